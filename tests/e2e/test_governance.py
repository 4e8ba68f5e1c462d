"""Governance end to end: a servers file's policy, approvals asked by elicitation, plans, caps and the audit log,
through real MCP clients (one that can be asked, one that cannot) against the real npm filesystem server and the
fixture server.

The filesystem policy lets ``write_file`` write under ``reports/`` and asks about any other path; ``move_file``
is denied. The fixture's ``echo`` always asks; ``add`` has a per-run cap, ``now`` a per-minute rate, ``convert``
asks and has a per-minute rate. A fake person (``Person``) answers the elicitations and keeps what it was asked.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext

from mcp_code_mode.cli import main as cli_main
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import UnsupportedError
from mcp_code_mode.server import build_server

from ..conftest import filesystem_entry, fixture_entry, make_config

pytestmark = pytest.mark.anyio

APPROVAL_TIMEOUT = 2.0
"""``CODE_MODE_APPROVAL_TIMEOUT`` of this module's engine, in seconds."""
WAIT = 60
"""The longest any test here waits for one run."""


class SharedEngine(CodeMode):
    """An engine that several in-process clients share: each client's server lifespan enters it, and only the
    first enter starts it, only the last exit stops it."""

    users: int = 0

    async def __aenter__(self) -> Self:
        self.users += 1
        if self.users == 1:
            await super().__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.users -= 1
        if self.users == 0:
            await super().__aexit__(*exc_info)


@dataclass
class Person:
    """The person behind the asking client: answers every elicitation as told and keeps each message."""

    decision: str = "allow_once"
    action: Literal["accept", "decline", "cancel"] = "accept"
    delay: float = 0.0
    """Seconds to think before answering."""
    hold: anyio.Event | None = None
    """When set: answer only once this event is set."""
    asked: list[str] = field(default_factory=list[str])

    def reset(self) -> None:
        self.decision, self.action, self.delay, self.hold = "allow_once", "accept", 0.0, None
        self.asked.clear()

    async def __call__(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        self.asked.append(params.message)
        if self.hold is not None:
            await self.hold.wait()
        if self.delay:
            await anyio.sleep(self.delay)  # a person thinking: the time is what is tested
        if self.action != "accept":
            return mcp_types.ElicitResult(action=self.action)
        return mcp_types.ElicitResult(action="accept", content={"decision": self.decision})


@dataclass(frozen=True)
class Setup:
    engine: SharedEngine
    asking: Client
    """A client that declared elicitation: its person is ``person``."""
    mute: Client
    """A client without elicitation (no callback: the SDK then declares no elicitation capability)."""
    person: Person
    files: Path
    reports: Path
    notes: Path


@pytest.fixture(scope="module")
async def setup(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Setup]:
    base = tmp_path_factory.mktemp("governance").resolve()
    files = base / "files"
    reports, notes = files / "reports", files / "notes"
    reports.mkdir(parents=True)
    notes.mkdir()
    config = make_config(
        {
            "filesystem": {
                **filesystem_entry(files),
                "policy": {
                    "default": "allow",
                    "tools": {
                        "write_file": {
                            "decision": "allow",
                            "when": {"/path": {"glob": f"{reports}/**"}},
                            "otherwise": "ask",
                        },
                        "move_file": "deny",
                    },
                },
            },
            "fixture": {
                **fixture_entry(),
                "policy": {
                    "default": "allow",
                    "tools": {
                        "echo": "ask",
                        "add": {"decision": "allow", "maxPerRun": 2},
                        "now": {"decision": "allow", "perMinute": 3},
                        "convert": {"decision": "ask", "perMinute": 2},
                    },
                },
            },
        },
        workspace_dir=base / "runs",
        approval_timeout=APPROVAL_TIMEOUT,
    )
    person = Person()
    async with SharedEngine(config) as engine:
        async with (
            Client(build_server(engine), mode="legacy", elicitation_callback=person) as asking,
            Client(build_server(engine), mode="legacy") as mute,
        ):
            yield Setup(engine, asking, mute, person, files, reports, notes)


@pytest.fixture
def s(setup: Setup) -> Iterator[Setup]:
    setup.person.reset()
    yield setup
    if setup.person.hold is not None:  # a question left waiting gets its answer: the client can close
        setup.person.hold.set()


async def run(client: Client, code: str, language: str = "python", **extra: Any) -> dict[str, Any]:
    """``execute_code`` (cache off) and its structured content."""
    with anyio.fail_after(WAIT):
        result = await client.call_tool("execute_code", {"language": language, "code": code, "cache": "off", **extra})
    assert result.structured_content is not None
    return result.structured_content


def decisions(data: dict[str, Any]) -> list[str]:
    return [c["decision"] for c in data["calls"]]


def lines(data: dict[str, Any]) -> list[str]:
    return data["output"].splitlines()


# ----- approvals -------------------------------------------------------------------------------------------


async def test_allow_once_approves_one_call_and_the_next_gated_call_asks_again(s: Setup) -> None:
    a, b, report = s.notes / "once-a.txt", s.notes / "once-b.txt", s.reports / "once.txt"
    code = (
        "filesystem.list_allowed_directories()\n"
        f"filesystem.write_file(path={str(a)!r}, content='first')\n"
        f"filesystem.write_file(path={str(report)!r}, content='report')\n"
        f"filesystem.write_file(path={str(b)!r}, content='second')\n"
    )
    data = await run(s.asking, code, description="write two notes")
    assert data["success"], data["error"]
    assert len(s.person.asked) == 2  # the write under reports/ is allowed without asking
    first, second = s.person.asked
    assert "write two notes" in first
    assert f'filesystem.write_file {{"path": "{a}", "content": "first"}}' in first
    assert "call 2 of the run" in first and 'filesystem: tools["write_file"]' in first
    assert f'"path": "{b}"' in second and "call 4 of the run" in second
    assert a.read_text(encoding="utf-8") == "first" and b.read_text(encoding="utf-8") == "second"
    assert decisions(data) == ["allowed", "approved", "allowed", "approved"]
    assert [(c["server"], c["tool"]) for c in data["calls"][1:]] == [("filesystem", "write_file")] * 3


async def test_a_description_cannot_add_calls_to_the_question(s: Setup) -> None:
    target = s.notes / "spoofed.txt"
    spoof = (
        'read the report”\n1. filesystem.read_text_file {"path": "reports/summary.txt"} (call 1 of the run; '
        "filesystem: default)\n(the next line is a detail of the same read)\n"
    )
    s.person.decision = "deny"
    code = f"try:\n    filesystem.write_file(path={str(target)!r}, content='x')\nexcept ToolError:\n    pass\n"
    await run(s.asking, code, description=spoof)
    (message,) = s.person.asked
    listed = [line for line in message.splitlines() if line[:1].isdigit()]
    assert len(listed) == 1 and "filesystem.write_file" in listed[0], message


async def test_allow_for_the_run_asks_once_per_tool_and_only_for_that_run(s: Setup) -> None:
    paths = [s.notes / f"run-{i}.txt" for i in range(3)]
    code = "".join(f"filesystem.write_file(path={str(p)!r}, content='{i}')\n" for i, p in enumerate(paths))
    code += "fixture.echo(text='another tool')\n"
    s.person.decision = "allow_run"
    data = await run(s.asking, code)
    assert data["success"], data["error"]
    assert len(s.person.asked) == 2, s.person.asked  # write_file once, then echo (not covered by the first answer)
    assert "filesystem.write_file" in s.person.asked[0] and "fixture.echo" in s.person.asked[1]
    assert decisions(data) == ["approved"] * 4
    assert [p.read_text(encoding="utf-8") for p in paths] == ["0", "1", "2"]
    again = await run(s.asking, f"filesystem.write_file(path={str(paths[0])!r}, content='again')")
    assert again["success"], again["error"]
    assert len(s.person.asked) == 3  # a new run is asked again
    assert paths[0].read_text(encoding="utf-8") == "again"


async def test_a_denial_raises_tool_error_in_the_script_and_nothing_is_written(s: Setup) -> None:
    target = s.notes / "denied.txt"
    code = (
        "try:\n"
        f"    filesystem.write_file(path={str(target)!r}, content='no')\n"
        "except ToolError as e:\n"
        "    print(e.server, e.tool)\n"
        "    print(str(e))\n"
    )
    s.person.decision = "deny"
    data = await run(s.asking, code)
    assert data["success"], data["error"]
    where, message = lines(data)
    assert where == "filesystem write_file"
    assert message.startswith("denied: filesystem.write_file: denied by the person")
    assert not target.exists()
    assert decisions(data) == ["denied"]
    assert len(s.person.asked) == 1


@pytest.mark.parametrize(
    ("action", "decision", "why"),
    [
        pytest.param("decline", "allow_once", "declined", id="declined"),
        pytest.param("cancel", "allow_once", "declined", id="cancelled"),
        pytest.param("accept", "allow_forever", "denied:", id="an-answer-that-is-no-choice"),
        pytest.param("accept", "ALLOW_ONCE", "denied:", id="a-choice-in-other-casing"),
    ],
)
async def test_any_answer_but_an_allow_choice_denies_the_call(
    s: Setup, action: Literal["accept", "decline", "cancel"], decision: str, why: str
) -> None:
    target = s.notes / f"answer-{action}-{decision}.txt"
    code = f"try:\n    filesystem.write_file(path={str(target)!r}, content='x')\nexcept ToolError as e:\n    print(e)\n"
    s.person.action = action
    s.person.decision = decision
    data = await run(s.asking, code)
    assert data["success"], data["error"]
    assert data["output"].startswith("denied: filesystem.write_file") and why in data["output"], data["output"]
    assert not target.exists()
    assert decisions(data) == ["denied"]


async def test_a_tool_the_policy_denies_is_refused_without_asking(s: Setup) -> None:
    source = s.reports / "stay.txt"
    source.write_text("stay", encoding="utf-8")
    code = (
        "try:\n"
        f"    filesystem.move_file(source={str(source)!r}, destination={str(s.notes / 'moved.txt')!r})\n"
        "except ToolError as e:\n"
        "    print(e)\n"
    )
    data = await run(s.asking, code)
    assert data["output"] == 'denied: filesystem.move_file: denied (filesystem: tools["move_file"])\n'
    assert source.exists() and not (s.notes / "moved.txt").exists()
    assert s.person.asked == []
    assert decisions(data) == ["denied"]


async def test_no_answer_within_the_approval_timeout_denies_naming_the_setting(s: Setup) -> None:
    target = s.notes / "late.txt"
    code = (
        f"try:\n    filesystem.write_file(path={str(target)!r}, content='late')\nexcept ToolError as e:\n    print(e)\n"
    )
    s.person.hold = anyio.Event()  # the person never answers in time
    data = await run(s.asking, code, timeout=30000)
    assert data["success"], data["error"]
    assert data["output"].startswith("denied: filesystem.write_file: no answer within 2 s (CODE_MODE_APPROVAL_TIMEOUT)")
    assert not target.exists()
    assert decisions(data) == ["denied"]
    assert data["calls"][0]["ms"] >= APPROVAL_TIMEOUT * 1000 * 0.9
    s.person.hold.set()  # the answer that comes now is too late: the call stays denied
    assert not target.exists()


@pytest.mark.parametrize(
    ("language", "runner", "code"),
    [
        ("python", "local", "[fixture.echo(text=str(i)) for i in range(4)]"),
        ("python", "cpython", "[fixture.echo(text=str(i)) for i in range(4)]"),
        (
            "javascript",
            "deno",
            "const r = []\nfor (let i = 0; i < 4; i++) r.push(await fixture.echo({text: String(i)}))\nexport default r",
        ),
    ],
)
async def test_time_spent_waiting_for_the_person_does_not_use_up_the_runs_timeout(
    s: Setup, language: str, runner: str, code: str
) -> None:
    s.person.delay = 1.0  # four answers of a second each, in a run of 1.5 s
    data = await run(s.asking, code, language, runner=runner, timeout=1500)
    assert data["success"], data["error"]
    assert data["returnValue"] == [{"result": str(i)} for i in range(4)]
    assert len(s.person.asked) == 4
    assert data["executionTime"] >= 4000


async def test_a_client_without_elicitation_is_told_to_plan_and_nothing_is_written(s: Setup) -> None:
    target = s.notes / "mute.txt"
    code = f"try:\n    filesystem.write_file(path={str(target)!r}, content='x')\nexcept ToolError as e:\n    print(e)\n"
    data = await run(s.mute, code)
    assert data["success"], data["error"]
    message = data["output"]
    assert message.startswith(f'filesystem.write_file: /path "{target}" is not under {s.reports}/**')
    assert "cannot be asked" in message and 'mode="plan"' in message and "approvePlan" in message
    assert not target.exists()
    assert decisions(data) == ["refused"]
    assert s.person.asked == []  # the other client's person is never asked about this one's calls


async def test_an_uncaught_refusal_fails_the_run_with_the_tool_error(s: Setup) -> None:
    data = await run(s.mute, "fixture.echo(text='hi')")
    assert not data["success"]
    assert data["error"]["type"] == "ToolError"
    assert 'mode="plan"' in data["error"]["message"]


# ----- many calls at once ----------------------------------------------------------------------------------

FAN_OUT_JS = (
    "const r = await Promise.all(Array.from({length: 50}, (_, i) => fixture.echo({text: String(i)})))\nexport default r"
)
FAN_OUT_PY = "import asyncio\nawait asyncio.gather(*[fixture.echo(text=str(i)) for i in range(50)])"
FIFTY = [{"result": str(i)} for i in range(50)]


async def test_fifty_gated_calls_made_together_in_javascript_are_one_question(s: Setup) -> None:
    data = await run(s.asking, FAN_OUT_JS, "javascript")
    assert data["returnValue"] == FIFTY
    assert len(s.person.asked) == 1, [m.splitlines()[0] for m in s.person.asked]
    assert "50 tool calls" in s.person.asked[0]


async def test_fifty_gated_calls_made_together_in_javascript_allowed_for_the_run_are_one_question(
    s: Setup,
) -> None:
    s.person.decision = "allow_run"
    data = await run(s.asking, FAN_OUT_JS, "javascript")
    assert data["success"], data["error"]
    assert data["returnValue"] == FIFTY
    assert len(s.person.asked) == 1
    assert "tool calls that need your approval" in s.person.asked[0]  # several calls in the one question
    assert decisions(data) == ["approved"] * 50


async def test_a_python_fan_out_allowed_for_the_run_is_one_question(s: Setup) -> None:
    s.person.decision = "allow_run"
    data = await run(s.asking, FAN_OUT_PY, runner="cpython")
    assert data["success"], data["error"]
    assert data["returnValue"] == FIFTY
    assert len(s.person.asked) == 1
    assert decisions(data) == ["approved"] * 50


async def test_a_python_fan_out_approved_once_asks_for_the_batch_or_for_each_call(s: Setup) -> None:
    # cpython's awaitable stub calls are made one at a time when awaited (cm_interpreters.py), so asyncio.gather
    # reaches the host call by call: one question per call (50). A batch would be one question. Never fewer calls
    # made than asked about, never a call made unasked.
    data = await run(s.asking, FAN_OUT_PY, runner="cpython")
    assert data["success"], data["error"]
    assert data["returnValue"] == FIFTY
    assert len(s.person.asked) in (1, 50)
    assert decisions(data) == ["approved"] * 50


# ----- plans -----------------------------------------------------------------------------------------------


def plan_code(s: Setup, name: str) -> tuple[str, Path, Path]:
    note, report = s.notes / f"{name}.txt", s.reports / f"{name}.txt"
    code = (
        f"seen = filesystem.list_directory(path={str(s.reports)!r})\n"
        f"filesystem.write_file(path={str(report)!r}, content='report')\n"
        f"planned = filesystem.write_file(path={str(note)!r}, content='the note')\n"
        "echoed = fixture.echo(text='hello')\n"
        "[planned, echoed]\n"
    )
    return code, note, report


async def test_a_plan_makes_no_gated_call_and_its_approval_makes_them_without_asking(s: Setup) -> None:
    code, note, report = plan_code(s, "planned")
    data = await run(s.asking, code, mode="plan")
    assert data["success"], data["error"]
    assert not note.exists()  # the gated write was recorded, not made
    assert report.read_text(encoding="utf-8") == "report"  # allowed calls ran during the plan
    assert data["returnValue"] == [{"planned": True, "id": "c1"}, {"planned": True, "id": "c2"}]
    assert decisions(data) == ["allowed", "allowed", "planned", "planned"]
    plan = data["plan"]
    assert plan["planId"].startswith("plan-") and plan["expiresIn"] > 0
    lines = [c.pop("line") for c in plan["calls"]]
    assert all(isinstance(n, int) and n > 0 for n in lines) and lines[0] < lines[1]  # the lines that made them
    assert plan["calls"] == [
        {
            "id": "c1",
            "server": "filesystem",
            "tool": "write_file",
            "arguments": {"path": str(note), "content": "the note"},
            "position": 3,
            "rule": 'filesystem: tools["write_file"]',
        },
        {
            "id": "c2",
            "server": "fixture",
            "tool": "echo",
            "arguments": {"text": "hello"},
            "position": 4,
            "rule": 'fixture: tools["echo"]',
        },
    ]
    assert s.person.asked == []  # a plan never asks

    approved = await run(s.asking, code, approvePlan=plan["planId"])
    assert approved["success"], approved["error"]
    assert s.person.asked == []  # the plan's calls were approved already
    assert note.read_text(encoding="utf-8") == "the note"
    assert approved["returnValue"][1] == {"result": "hello"}
    assert decisions(approved) == ["allowed", "allowed", "approved", "approved"]
    assert approved["plan"] is None

    again = await run(s.asking, code, approvePlan=plan["planId"])
    assert not again["success"] and again["error"]["type"] == "UnsupportedError"
    assert "already approved and run" in again["error"]["message"]
    assert again["calls"] == [] and s.person.asked == []


async def test_an_approved_plan_runs_on_a_client_that_cannot_be_asked(s: Setup) -> None:
    code, note, _ = plan_code(s, "mute-plan")
    plan = (await run(s.mute, code, mode="plan"))["plan"]
    approved = await run(s.mute, code, approvePlan=plan["planId"])
    assert approved["success"], approved["error"]
    assert note.read_text(encoding="utf-8") == "the note"
    assert decisions(approved)[2:] == ["approved", "approved"]


async def test_a_plan_approves_its_own_calls_not_other_ones_the_same_code_makes_next_time(s: Setup) -> None:
    source, copy = s.reports / "source.txt", s.notes / "copy.txt"
    source.write_text("reviewed text", encoding="utf-8")
    code = (
        f"text = filesystem.read_text_file(path={str(source)!r})['content']\n"
        f"filesystem.write_file(path={str(copy)!r}, content=text)\n"
    )
    plan = (await run(s.mute, code, mode="plan"))["plan"]
    assert plan["calls"][0]["arguments"]["content"] == "reviewed text"
    source.write_text("something else", encoding="utf-8")  # changed between the review and the run
    data = await run(s.mute, code, approvePlan=plan["planId"])
    assert not data["success"]
    assert data["error"]["type"] == "ToolError" and "cannot be asked" in data["error"]["message"]
    assert not copy.exists()
    assert decisions(data) == ["allowed", "refused"]


async def test_a_plan_does_not_list_or_later_let_through_a_denied_call(s: Setup) -> None:
    source = s.reports / "keep.txt"
    source.write_text("keep", encoding="utf-8")
    code = (
        "try:\n"
        f"    filesystem.move_file(source={str(source)!r}, destination={str(s.notes / 'gone.txt')!r})\n"
        "except ToolError as e:\n"
        "    print(e)\n"
    )
    data = await run(s.mute, code, mode="plan")
    assert data["output"].startswith("denied: filesystem.move_file")
    assert data["plan"]["calls"] == []
    approved = await run(s.mute, code, approvePlan=data["plan"]["planId"])
    assert approved["output"].startswith("denied: filesystem.move_file")
    assert source.exists()


async def test_a_plan_is_refused_for_other_code_another_client_or_an_unknown_id(s: Setup) -> None:
    code, note, _ = plan_code(s, "bound")
    plan_id = (await run(s.asking, code, mode="plan"))["plan"]["planId"]

    other = await run(s.asking, code + "print('one more line')\n", approvePlan=plan_id)
    assert other["error"]["type"] == "UnsupportedError"
    assert "was made for other code" in other["error"]["message"] and 'mode="plan"' in other["error"]["message"]
    other_language = await run(s.asking, "1", "javascript", approvePlan=plan_id)
    assert "was made for other code" in other_language["error"]["message"]

    stranger = await run(s.mute, code, approvePlan=plan_id)  # another MCP session
    assert stranger["error"]["type"] == "UnsupportedError"
    assert f"unknown or expired plan {plan_id!r}" in stranger["error"]["message"]
    with pytest.raises(UnsupportedError, match="unknown or expired plan"):
        await s.engine.execute(code, approve_plan=plan_id, cache="off")  # the library, another client still

    unknown = await run(s.asking, code, approvePlan="plan-0000000000000000")
    assert "unknown or expired plan 'plan-0000000000000000'" in unknown["error"]["message"]
    both = await run(s.asking, code, mode="plan", approvePlan=plan_id)
    assert 'does not go with mode="plan"' in both["error"]["message"]

    assert not note.exists()  # none of these ran the plan's calls ...
    assert s.person.asked == []
    approved = await run(s.asking, code, approvePlan=plan_id)  # ... and the plan is still good for its own
    assert approved["success"], approved["error"]
    assert note.read_text(encoding="utf-8") == "the note"


async def test_a_plan_approved_twice_at_the_same_time_makes_its_calls_once(s: Setup) -> None:
    code = "x = fixture.echo(text='only once')\nfixture.slow(seconds=0.5)\nx"
    plan_id = (await run(s.mute, code, mode="plan"))["plan"]["planId"]
    results: list[dict[str, Any]] = []

    async def approve() -> None:
        results.append(await run(s.mute, code, approvePlan=plan_id))

    async with anyio.create_task_group() as tg:
        tg.start_soon(approve)
        tg.start_soon(approve)
    made = [r for r in results if "approved" in decisions(r)]
    assert len(made) == 1, [decisions(r) for r in results]
    assert sum(1 for r in results if r["error"] and "already approved" in r["error"]["message"]) == 1


async def test_a_cancelled_approval_uses_up_its_plan(s: Setup) -> None:
    code = "x = fixture.echo(text='cancelled')\nif 'planned' not in x:\n    fixture.slow(seconds=30)\nx"
    planned = await s.engine.execute(code, mode="plan", cache="off")
    assert planned.plan is not None
    plan_id = planned.plan.plan_id
    server = s.engine.pool.servers["fixture"]
    before = server.calls
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: s.engine.execute(code, approve_plan=plan_id, cache="off"))
            while server.calls - before < 2:  # the echo was made and the slow call began
                await anyio.sleep(0.02)  # a counter of another task: nothing to wait on
            tg.cancel_scope.cancel()
    echoed = server.calls
    with pytest.raises(UnsupportedError, match="already approved"):
        await s.engine.execute(code, approve_plan=plan_id, cache="off", timeout_ms=1000)
    assert server.calls == echoed


async def test_a_plan_of_rate_limited_calls_can_be_approved(s: Setup) -> None:
    code = "[fixture.convert(amount=1), fixture.convert(amount=2)]"
    plan = (await run(s.mute, code, mode="plan"))["plan"]
    assert len(plan["calls"]) == 2
    approved = await run(s.mute, code, approvePlan=plan["planId"])
    assert approved["success"], approved["error"]
    assert decisions(approved) == ["approved", "approved"]


# ----- caps ------------------------------------------------------------------------------------------------


async def test_a_call_past_max_per_run_is_over_cap_and_the_next_run_starts_afresh(s: Setup) -> None:
    code = (
        "out = [fixture.add(a=1, b=1), fixture.add(a=2, b=2)]\n"
        "try:\n"
        "    fixture.add(a=3, b=3)\n"
        "except ToolError as e:\n"
        "    out.append(str(e))\n"
        "out\n"
    )
    for _ in range(2):
        data = await run(s.mute, code)
        assert data["success"], data["error"]
        first, second, refused = data["returnValue"]
        assert (first, second) == ({"result": 2}, {"result": 4})
        assert refused == (
            'over cap: fixture.add: the run made 2 calls, the most maxPerRun allows (fixture: tools["add"])'
        )
        assert decisions(data) == ["allowed", "allowed", "over_cap"]


async def test_per_minute_counts_the_calls_of_every_run(s: Setup) -> None:
    code = (
        "out = []\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        fixture.now()\n"
        "        out.append('ok')\n"
        "    except ToolError as e:\n"
        "        out.append(str(e))\n"
        "out\n"
    )
    first = await run(s.mute, code)
    assert first["returnValue"] == ["ok", "ok"]
    second = await run(s.asking, code)  # another client: the rate is the server's, across all runs
    ok, refused = second["returnValue"]
    assert ok == "ok"
    assert refused.startswith("over cap: fixture.now: 3 calls in the last minute (all runs)")
    assert "perMinute" in refused
    assert decisions(second) == ["allowed", "over_cap"]


# ----- the audit log ---------------------------------------------------------------------------------------


async def test_the_audit_log_lists_each_call_with_its_decision_the_run_hash_and_redacted_secrets(
    s: Setup, tmp_path: Path
) -> None:
    denied_target = s.notes / "audit-denied.txt"
    code = (
        "filesystem.list_allowed_directories()\n"
        "call_tool('fixture', 'echo', {'text': 'hi', 'api_token': 's3cret-value'})\n"
        "try:\n"
        f"    filesystem.move_file(source={str(s.reports)!r}, destination={str(denied_target)!r})\n"
        "except ToolError:\n"
        "    pass\n"
    )
    data = await run(s.asking, code)
    assert data["success"], data["error"]
    assert s.engine.audit is not None
    entries = s.engine.audit.query(run=data["hash"], tenant="default")
    assert [(e["server"], e["tool"], e["decision"]) for e in reversed(entries)] == [
        ("filesystem", "list_allowed_directories", "allowed"),
        ("fixture", "echo", "approved"),
        ("filesystem", "move_file", "denied"),
    ]
    assert {e["runHash"] for e in entries} == {data["hash"]}
    assert len({e["runId"] for e in entries}) == 1
    echo = entries[1]
    assert echo["preview"] == '{"text":"hi","api_token":"[REDACTED]"}'
    assert "s3cret" not in json.dumps(entries)
    assert echo["ok"] is True
    move = entries[0]
    assert move["ok"] is False and move["error"].startswith("denied: filesystem.move_file")

    out = io.StringIO()
    with redirect_stdout(out):
        status = cli_main(["audit", "--json", "--run", data["hash"], "--config", str(tmp_path / "none.json")])
    assert status == 0
    listed = [json.loads(line) for line in out.getvalue().splitlines()]
    assert listed == entries


async def test_the_audit_log_has_a_plans_planned_calls_and_its_approval(s: Setup) -> None:
    code, _, _ = plan_code(s, "audited")
    planned = await run(s.mute, code, mode="plan")
    approved = await run(s.mute, code, approvePlan=planned["plan"]["planId"])
    assert s.engine.audit is not None
    for data, expected in ((planned, "planned"), (approved, "approved")):
        entries = list(reversed(s.engine.audit.query(run=data["hash"], tenant="default")))
        assert [e["decision"] for e in entries] == ["allowed", "allowed", expected, expected]
        assert entries[2]["preview"] == json.dumps(
            {"path": str(s.notes / "audited.txt"), "content": "the note"}, separators=(",", ":")
        )
