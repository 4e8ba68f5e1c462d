"""The dispatcher's answer to a call for a server that is down: not available, and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from mcp_code_mode.bridge.dispatcher import ToolDispatcher
from mcp_code_mode.config import ServerConfig
from mcp_code_mode.downstream.pool import DownstreamServer, ToolPool, down_servers
from mcp_code_mode.stubs.index import StubIndex

pytestmark = pytest.mark.anyio


@dataclass
class FakePool:
    """The two things the dispatcher reads of a pool; no call ever reaches it here."""

    servers: dict[str, DownstreamServer]
    calls: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        self.calls.append((server, tool))
        raise AssertionError("a down server must not be called")


def _server(name: str, state: Any, error: str | None = None) -> DownstreamServer:
    config = ServerConfig(name=name, transport="stdio", command="x")
    return DownstreamServer(config=config, state=state, error=error)


def _dispatcher(*servers: DownstreamServer, unavailable: bool = True) -> tuple[ToolDispatcher, FakePool]:
    pool = FakePool({s.name: s for s in servers})
    down = down_servers(pool.servers) if unavailable else None
    index = StubIndex.build([(s.name, None) for s in servers], [], unavailable=down)
    return ToolDispatcher(cast(ToolPool, pool), index, max_calls=10), pool


async def test_a_call_to_a_server_that_failed_to_start_says_it_is_not_available_and_why() -> None:
    dispatcher, pool = _dispatcher(_server("ghost", "failed", "cannot start 'ghost': command not found"))
    answer = await dispatcher.handle("ghost", "x", {})
    assert answer == {
        "error": {
            "message": "server 'ghost' is not available: cannot start 'ghost': command not found",
            "server": "ghost",
            "tool": "x",
        }
    }
    assert pool.calls == []


async def test_a_down_server_is_found_by_its_namespace_too() -> None:
    dispatcher, _ = _dispatcher(_server("my-ghost", "failed", "boom"))
    answer = await dispatcher.handle("my_ghost", "x", {})
    assert answer["error"]["message"] == "server 'my-ghost' is not available: boom"


async def test_a_disabled_server_says_it_is_disabled() -> None:
    dispatcher, _ = _dispatcher(_server("old", "disabled"))
    answer = await dispatcher.handle("old", "x", {})
    assert answer["error"]["message"] == "server 'old' is not available: it is disabled in the servers file"


async def test_without_an_unavailable_map_the_pools_state_still_explains() -> None:
    dispatcher, _ = _dispatcher(_server("ghost", "failed"), unavailable=False)
    answer = await dispatcher.handle("ghost", "x", {})
    assert answer["error"]["message"] == "server 'ghost' is not available: it failed to start"


async def test_an_unknown_server_lists_the_configured_ones() -> None:
    dispatcher, _ = _dispatcher(_server("ghost", "failed", "boom"))
    answer = await dispatcher.handle("nobody", "x", {})
    assert answer["error"]["message"] == "unknown server 'nobody' (configured: ghost)"


@dataclass
class CountingPool:
    """A pool whose every call waits a moment, counting how many are in flight per server."""

    servers: dict[str, DownstreamServer]
    now: dict[str, int] = field(default_factory=dict[str, int])
    most: dict[str, int] = field(default_factory=dict[str, int])
    most_at_once: int = 0
    """The most calls in flight at once, all servers together."""

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        import anyio
        import mcp_types as types

        self.now[server] = self.now.get(server, 0) + 1
        self.most[server] = max(self.most.get(server, 0), self.now[server])
        self.most_at_once = max(self.most_at_once, sum(self.now.values()))
        await anyio.sleep(0.05)
        self.now[server] -= 1
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


async def test_a_servers_max_concurrent_calls_bounds_its_calls_in_a_run_and_not_the_others() -> None:
    import anyio

    from mcp_code_mode.downstream.tools import ToolInfo

    narrow = ServerConfig.model_validate(
        {"name": "narrow", "transport": "stdio", "command": "x", "maxConcurrentCalls": 2}
    )
    wide = ServerConfig(name="wide", transport="stdio", command="x")
    servers = {c.name: DownstreamServer(config=c, state="ready") for c in (narrow, wide)}
    schema = {"type": "object", "properties": {}}
    tools = [ToolInfo(name, "t", "a tool", schema, None) for name in servers]
    index = StubIndex.build([(name, None) for name in servers], tools)
    pool = CountingPool(servers)
    dispatcher = ToolDispatcher(cast(ToolPool, pool), index, max_calls=100, concurrency=6)
    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(dispatcher.handle, "narrow", "t", {})
            group.start_soon(dispatcher.handle, "wide", "t", {})
    assert pool.most["narrow"] == 2
    assert pool.most_at_once == 6  # the narrow server's waiting calls hold none of the run's slots
    given = ToolDispatcher(cast(ToolPool, pool), index, max_calls=100, concurrency=6, server_concurrency={"wide": 3})
    pool.most.clear()
    pool.most_at_once = 0
    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(given.handle, "wide", "t", {})
            group.start_soon(given.handle, "narrow", "t", {})
    assert pool.most["wide"] == 3  # a mapping given to the dispatcher replaces the configs'
    assert pool.most["narrow"] > 2 and pool.most_at_once == 6
