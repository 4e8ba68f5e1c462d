"""The approver with a fake person: one question for calls made together, the three answers, timeouts, and the
run's clock standing still while it waits."""

from __future__ import annotations

import anyio
import pytest

from mcp_code_mode.bridge import RunClock
from mcp_code_mode.governance.approvals import Approver, Choice, Gated, question

pytestmark = pytest.mark.anyio


class Person:
    def __init__(self, *answers: Choice | None, delay: float = 0.0) -> None:
        self.answers = list(answers)
        self.delay = delay
        self.asked: list[str] = []

    async def __call__(self, message: str) -> Choice | None:
        self.asked.append(message)
        await anyio.sleep(self.delay)
        return self.answers.pop(0) if self.answers else None


def gated(tool: str = "write_file", position: int = 1, **arguments: object) -> Gated:
    return Gated("fs", tool, arguments or {"path": "a.txt"}, position, 'fs: tools["write_*"]')


async def test_calls_made_together_are_asked_in_one_question() -> None:
    person = Person("allow_once")
    approver = Approver(person, timeout=5, description="tidy the reports")
    async with approver.running():
        answers: list[bool] = []

        async def one(i: int) -> None:
            answers.append((await approver.decide(gated(position=i, path=f"r/{i}.txt"))).allowed)

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(one, i + 1)
    assert answers == [True] * 50
    assert approver.questions == 1 and len(person.asked) == 1
    message = person.asked[0]
    assert message.startswith("The script “tidy the reports” wants to make 50 tool calls that need your approval")
    assert 'fs.write_file {"path": "r/1.txt"} (call 1 of the run; fs: tools["write_*"])' in message
    assert "… and 30 more of fs.write_file" in message


async def test_allow_once_asks_again_and_allow_run_does_not() -> None:
    person = Person("allow_once", "allow_run")
    approver = Approver(person, timeout=5)
    async with approver.running():
        first = await approver.decide(gated(position=1))
        second = await approver.decide(gated(position=2))
        third = await approver.decide(gated(position=3))
        other = approver.decide(gated("delete_file", position=4))
        with anyio.move_on_after(0.3):
            await other  # another tool is asked about again (and nobody answers it here)
    assert (first.how, second.how, third.how) == (
        "approved once",
        "approved for the rest of this run",
        "allowed for the rest of this run",
    )
    assert len(person.asked) == 3


async def test_deny_decline_and_silence_all_refuse() -> None:
    approver = Approver(Person("deny", None), timeout=5)
    async with approver.running():
        denied = await approver.decide(gated())
        declined = await approver.decide(gated())
    assert (denied.allowed, denied.how) == (False, "denied by the person")
    assert (declined.allowed, declined.how) == (False, "the person declined to answer")
    silent = Approver(Person("allow_once", delay=10), timeout=0.2)
    async with silent.running():
        late = await silent.decide(gated())
    assert not late.allowed and late.how == "no answer within 0.2 s (CODE_MODE_APPROVAL_TIMEOUT)"


async def test_a_failing_client_and_a_closed_run_allow_nothing() -> None:
    async def broken(message: str) -> Choice | None:
        raise RuntimeError("the client went away")

    approver = Approver(broken, timeout=5)
    async with approver.running():
        answer = await approver.decide(gated())
    assert not answer.allowed and "the client went away" in answer.how
    assert not (await approver.decide(gated())).allowed  # after the run: nobody asks, nothing is allowed


async def test_the_runs_clock_stands_still_while_the_person_thinks() -> None:
    clock = RunClock()
    approver = Approver(Person("allow_once", delay=0.3), timeout=5, clock=clock)
    async with approver.running():
        await approver.decide(gated())
    assert clock.paused == pytest.approx(0.35, abs=0.2)


def test_the_question_lists_each_call_and_how_to_answer() -> None:
    text = question([gated(position=3, path="x" * 400)], None)
    assert text.startswith("A script wants to make a tool call that needs your approval:")
    assert "(call 3 of the run;" in text and "…" in text and len(text) < 600
    assert "allow_once" in text and "allow_run" in text and "deny" in text
