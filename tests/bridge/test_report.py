"""The audit of a run's calls after their answers (``ToolDispatcher.report``): batched, and complete when the
host loop returns, however the run ended.

Against a real engine, the fixture server and the local runner: a run of more calls than one batch, a run
that times out between calls, and one that sends a malformed message after its calls. The host loop's own
guarantee (every answered call reported before ``serve_run`` returns) is also checked with an in-memory worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import anyio
import mcp_types as types
import pytest

from mcp_code_mode.bridge import ToolCallRecord, ToolDispatcher, serve_run
from mcp_code_mode.bridge import dispatcher as dispatcher_module
from mcp_code_mode.bridge.dispatcher import REPORT_BATCH
from mcp_code_mode.bridge.fake import FakeWorker
from mcp_code_mode.config import ServerConfig
from mcp_code_mode.downstream.pool import DownstreamServer, ToolPool
from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.stubs.index import StubIndex

from ..conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio

WAIT = 120
"""The longest any test here waits for one run."""


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[CodeMode]:
    async with CodeMode(make_config({"fixture": fixture_entry()}, pool_size=1, cpython_pool_size=0)) as cm:
        yield cm


def audited(engine: CodeMode, run_hash: str | None) -> list[dict[str, Any]]:
    assert engine.audit is not None and run_hash
    return list(reversed(engine.audit.query(run=run_hash, limit=10_000, tenant="default")))


async def test_every_call_of_a_run_longer_than_a_batch_is_in_the_audit_log_in_order(engine: CodeMode) -> None:
    n = 2 * REPORT_BATCH + 7
    code = f"for i in range({n}):\n    fixture.add(a=i, b=1)\n"
    with anyio.fail_after(WAIT):
        result = await engine.execute(code, "python", runner="local", cache="off")
    assert result.success, result.error
    entries = audited(engine, result.hash)
    assert len(entries) == n
    assert [e["preview"] for e in entries] == [f'{{"a":{i},"b":1}}' for i in range(n)]
    assert {(e["tool"], e["decision"], e["ok"]) for e in entries} == {("add", "allowed", True)}


async def test_a_run_that_times_out_after_its_calls_has_them_all_in_the_audit_log(engine: CodeMode) -> None:
    code = "for i in range(5):\n    fixture.add(a=i, b=1)\nwhile True:\n    pass\n"
    with anyio.fail_after(WAIT):
        result = await engine.execute(code, "python", runner="local", cache="off", timeout_ms=1500)
    assert not result.success and result.error is not None and result.error.type == "TimeoutError"
    entries = audited(engine, result.hash)
    assert [e["preview"] for e in entries] == [f'{{"a":{i},"b":1}}' for i in range(5)]


class OkPool:
    """A pool whose every call answers ``ok`` at once."""

    def __init__(self, servers: dict[str, DownstreamServer]) -> None:
        self.servers = servers

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        await anyio.lowlevel.checkpoint()
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


def fake_dispatcher(seen: list[tuple[ToolCallRecord, dict[str, Any]]]) -> ToolDispatcher:
    config = ServerConfig(name="fx", transport="stdio", command="x")
    servers = {"fx": DownstreamServer(config=config, state="ready")}
    tools = [ToolInfo("fx", "t", "a tool", {"type": "object", "properties": {}}, None)]
    index = StubIndex.build([("fx", None)], tools)
    return ToolDispatcher(
        cast(ToolPool, OkPool(servers)), index, max_calls=100, observe=lambda r, a: seen.append((r, a))
    )


def calls(n: int, *, wait: bool = True) -> list[bytes | dict[str, Any]]:
    return [
        {"op": "call", "id": i + 1, "server": "fx", "tool": "t", "arguments": {"n": i}, "wait": wait} for i in range(n)
    ]


@pytest.mark.parametrize("wait", [True, False])
@pytest.mark.parametrize(
    ("end", "ended"),
    [
        ({"op": "done", "success": True}, "done"),
        (b"not json\n", "refused"),
        ({"op": "started", "pid": 1}, "refused"),
        (None, "closed"),
    ],
)
async def test_the_host_loop_reports_every_answered_call_before_it_returns(
    end: bytes | dict[str, Any] | None, ended: str, wait: bool
) -> None:
    seen: list[tuple[ToolCallRecord, dict[str, Any]]] = []
    worker = FakeWorker([*calls(REPORT_BATCH + 3, wait=wait), *([end] if end is not None else [])])
    with anyio.fail_after(WAIT):
        hosted = await serve_run(
            worker, fake_dispatcher(seen), timeout=30, max_output=1000, max_calls=1 if wait else 16
        )
    assert hosted.ended == ended
    assert sorted(a["n"] for _, a in seen) == list(range(REPORT_BATCH + 3))
    if wait or ended == "done":  # else calls still in hand when the run ended were cancelled (and reported)
        assert all(r.ok and r.decision == "allowed" for r, _ in seen)


async def test_a_cancelled_host_loop_still_reports_the_calls_it_answered() -> None:
    seen: list[tuple[ToolCallRecord, dict[str, Any]]] = []
    dispatcher = fake_dispatcher(seen)
    never = anyio.Event()

    class Stuck(FakeWorker):
        async def receive(self) -> dict[str, Any] | None:
            message = await super().receive()
            if message is None:
                await never.wait()  # the run says nothing more
            return message

    with anyio.move_on_after(0.5) as scope:
        await serve_run(Stuck(calls(5)), dispatcher, timeout=30, max_output=1000, max_calls=1)
    assert scope.cancelled_caught
    assert [a["n"] for _, a in seen] == [0, 1, 2, 3, 4]


async def test_report_waits_for_a_batch_and_everything_gives_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatcher_module, "REPORT_SECONDS", 3600.0)  # only the batch's size counts here
    seen: list[tuple[ToolCallRecord, dict[str, Any]]] = []
    dispatcher = fake_dispatcher(seen)
    for i in range(3):
        await dispatcher.handle("fx", "t", {"n": i})
    dispatcher.report()
    assert len(dispatcher.calls) == 3 and seen == []  # not yet: fewer than a batch, just now
    dispatcher.report(everything=True)
    assert [a["n"] for _, a in seen] == [0, 1, 2]
    for i in range(3, 3 + REPORT_BATCH):
        await dispatcher.handle("fx", "t", {"n": i})
    dispatcher.report()
    assert [a["n"] for _, a in seen] == list(range(3 + REPORT_BATCH))


async def test_report_gives_a_call_that_waited_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatcher_module, "REPORT_SECONDS", 0.0)
    seen: list[tuple[ToolCallRecord, dict[str, Any]]] = []
    dispatcher = fake_dispatcher(seen)
    await dispatcher.handle("fx", "t", {"n": 0})
    dispatcher.report()
    assert [a["n"] for _, a in seen] == [0]
