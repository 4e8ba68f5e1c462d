"""The session book: owners, caps, tombstones and the idle sweeper, on an in-memory session (no worker)."""

from __future__ import annotations

import anyio
import pytest

from mcp_code_mode.bridge import RunResult, ToolDispatcher
from mcp_code_mode.engine._sessions import SessionBook
from mcp_code_mode.errors import UnsupportedError
from mcp_code_mode.runners import RunnerSession, RunRequest

pytestmark = pytest.mark.anyio


class FakeSession:
    """A runner's session that only records whether it was closed."""

    def __init__(self) -> None:
        self.ended: str | None = None
        self.closed = False

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult:
        return RunResult(success=True)

    async def aclose(self) -> None:
        self.closed = True


def book(**options: float) -> SessionBook:
    return SessionBook(
        idle_s=options.get("idle_s", 600),
        max_total=int(options.get("total", 4)),
        max_per_client=int(options.get("per", 2)),
    )


async def opened(sessions: SessionBook, client: str) -> tuple[str, FakeSession]:
    fake = FakeSession()

    async def opener() -> RunnerSession:
        return fake

    session = await sessions.open(client, "cpython", "python", opener)
    return session.id, fake


async def test_another_clients_id_an_unknown_id_and_a_closed_one_read_the_same() -> None:
    sessions = book()
    mine, fake = await opened(sessions, "a")
    assert sessions.get("a", mine).runner == "cpython"
    messages: list[str] = []
    for client, session_id in (("b", mine), ("a", "made-up")):
        with pytest.raises(UnsupportedError) as refused:
            sessions.get(client, session_id)
        messages.append(str(refused.value).replace(repr(session_id), "ID"))
    assert messages[0] == messages[1] and messages[0].startswith("unknown session ID")
    assert not await sessions.close("b", mine) and not fake.closed  # not b's to close
    assert await sessions.close("a", mine) and fake.closed
    with pytest.raises(UnsupportedError, match="^unknown session"):
        sessions.get("a", mine)


async def test_a_session_its_runner_ended_tells_its_owner_why_and_no_one_else() -> None:
    sessions = book()
    mine, fake = await opened(sessions, "a")
    fake.ended = "a run timed out"
    with pytest.raises(UnsupportedError, match="has ended: a run timed out"):
        sessions.get("a", mine)
    with pytest.raises(UnsupportedError, match="^unknown session"):
        sessions.get("b", mine)
    assert sessions.list("a") == []


async def test_the_caps_per_client_and_in_all_are_refused_naming_the_setting() -> None:
    sessions = book(total=3, per=2)
    await opened(sessions, "a")
    await opened(sessions, "a")
    with pytest.raises(UnsupportedError, match="CODE_MODE_MAX_SESSIONS_PER_CLIENT"):
        await opened(sessions, "a")
    await opened(sessions, "b")
    with pytest.raises(UnsupportedError, match=r"CODE_MODE_MAX_SESSIONS=3\)"):
        await opened(sessions, "c")
    assert [s["runs"] for s in sessions.list("a")] == [0, 0]


async def test_an_idle_session_is_closed_by_the_sweeper_and_then_is_unknown_to_its_owner() -> None:
    sessions = book(idle_s=0.2)
    mine, fake = await opened(sessions, "a")
    busy, kept = await opened(sessions, "a")
    sessions.get("a", busy).busy = True  # a session running a call is never swept
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sessions.sweep)
            while not fake.closed:
                await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    assert not kept.closed
    with pytest.raises(UnsupportedError, match=r"^unknown session .*closed after 0.2 s idle"):
        sessions.get("a", mine)
    await sessions.aclose()
    assert kept.closed and len(sessions) == 0


async def test_a_replicas_session_ids_carry_its_name_and_another_replica_says_where_the_session_is() -> None:
    r1 = SessionBook(idle_s=600, max_total=4, max_per_client=2, replica="r1")
    r2 = SessionBook(idle_s=600, max_total=4, max_per_client=2, replica="r2")
    session_id, _ = await opened(r1, "a")
    assert session_id.startswith("r1~") and r1.get("a", session_id).runner == "cpython"
    with pytest.raises(UnsupportedError, match="lives on replica 'r1', and this request reached replica 'r2'"):
        r2.get("a", session_id)
    with pytest.raises(UnsupportedError, match="^unknown session"):  # its own name: unknown, as ever
        r2.get("a", "r2~made-up")
