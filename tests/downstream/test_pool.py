"""ToolPool against real servers: concurrent start, failures, environment, restarts, timeouts, shutdown."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_code_mode.downstream.env import child_environment
from mcp_code_mode.downstream.pool import ToolPool
from mcp_code_mode.errors import DownstreamError, ServerUnavailable

from ..conftest import alive, child_pids, filesystem_entry, fixture_entry, make_config, memory_entry

pytestmark = pytest.mark.anyio


def pool_of(servers: dict[str, dict[str, Any]], tool_timeout: float = 30) -> ToolPool:
    config = make_config(servers)
    return ToolPool(config.servers, config.env, default_timeout=tool_timeout)


async def pid_of(pool: ToolPool, server: str) -> int:
    result = await pool.call_tool(server, "pid")
    assert result.structured_content is not None
    return int(result.structured_content["result"])


def process_start_seconds(pid: int) -> float:
    ticks = int(Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK")


async def test_servers_start_concurrently() -> None:
    servers = {f"slow{i}": fixture_entry(FIXTURE_START_DELAY="3") for i in range(3)}
    async with pool_of(servers) as pool:
        assert all(s.state == "ready" for s in pool.servers.values())
        starts = [process_start_seconds(await pid_of(pool, name)) for name in servers]
    # Each server takes >= 3 s to start: started one after another, their processes would be >= 3 s apart.
    assert max(starts) - min(starts) < 2.0


async def test_a_server_that_cannot_start_is_reported_and_the_others_serve(tmp_path: Path) -> None:
    servers = {
        "missing": {"command": "definitely-not-a-command-xyz"},
        "exits": fixture_entry(FIXTURE_EXIT_AT_START="7"),
        "hangs": {**fixture_entry(FIXTURE_START_DELAY="60"), "timeout": 1},
        "fs": filesystem_entry(tmp_path),
    }
    started = time.monotonic()
    async with pool_of(servers) as pool:
        assert time.monotonic() - started < 20
        states = {name: s.state for name, s in pool.servers.items()}
        assert states == {"missing": "failed", "exits": "failed", "hangs": "failed", "fs": "ready"}
        assert "command not found" in (pool.servers["missing"].error or "")
        assert "exited during start-up" in (pool.servers["exits"].error or "")
        assert "exiting at start-up as asked" in (pool.servers["exits"].error or "")
        assert "did not answer within 1 s" in (pool.servers["hangs"].error or "")
        result = await pool.call_tool("fs", "list_allowed_directories")
        assert not result.is_error
        with pytest.raises(ServerUnavailable, match="'missing'"):
            await pool.call_tool("missing", "anything")


async def test_disabled_servers_are_not_started() -> None:
    async with pool_of({"off": {**fixture_entry(), "disabled": True}}) as pool:
        assert pool.servers["off"].state == "disabled"
        with pytest.raises(ServerUnavailable, match="disabled"):
            await pool.call_tool("off", "add", {"a": 1, "b": 2})


async def test_children_get_an_allow_list_of_the_host_environment_plus_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOST_SECRET_TOKEN", "s3cret-from-host")
    async with pool_of({"fx": fixture_entry(OWN_SETTING="mine")}) as pool:

        async def env(name: str) -> str:
            result = await pool.call_tool("fx", "show_env", {"name": name})
            assert result.structured_content is not None
            return str(result.structured_content["result"])

        assert await env("HOST_SECRET_TOKEN") == "<unset>"
        assert await env("OWN_SETTING") == "mine"
        assert await env("PATH") == os.environ["PATH"]
    assert "HOST_SECRET_TOKEN" not in child_environment({})


async def test_a_dead_server_fails_the_call_in_flight_and_is_restarted_on_the_next_call() -> None:
    async with pool_of({"fx": fixture_entry(), "other": fixture_entry()}) as pool:
        first = await pid_of(pool, "fx")
        with pytest.raises(ServerUnavailable, match="'fx'.*died during the call to 'crash'"):
            await pool.call_tool("fx", "crash")
        assert await pid_of(pool, "other")  # the others keep serving
        second = await pid_of(pool, "fx")
        assert second != first
        assert pool.servers["fx"].restarts == 1
        assert not alive(first)


async def test_each_call_has_a_timeout_and_the_server_keeps_serving() -> None:
    async with pool_of({"fx": {**fixture_entry(), "timeout": 1, "startupTimeout": 60}}) as pool:
        started = time.monotonic()
        with pytest.raises(DownstreamError, match="'slow' did not answer within 1 s"):
            await pool.call_tool("fx", "slow", {"seconds": 30})
        assert time.monotonic() - started < 3
        result = await pool.call_tool("fx", "add", {"a": 2, "b": 3})
        assert result.structured_content == {"result": 5}


async def test_tool_list_changed_refreshes_the_index() -> None:
    async with pool_of({"fx": fixture_entry()}) as pool:
        before = pool.version
        assert pool.find("fx", "brand_new") is None
        await pool.call_tool("fx", "add_tool", {"name": "brand_new"})
        with anyio.fail_after(10):
            while pool.find("fx", "brand_new") is None:
                await anyio.sleep(0.05)
        assert pool.version > before
        result = await pool.call_tool("fx", "brand_new", {"text": "x"})
        assert result.structured_content == {"result": "brand_new:x"}


async def test_tool_errors_are_results_and_unknown_servers_are_errors() -> None:
    async with pool_of({"fx": fixture_entry()}) as pool:
        result = await pool.call_tool("fx", "fail", {"message": "nope"})
        assert result.is_error
        with pytest.raises(DownstreamError, match="no such server"):
            await pool.call_tool("nobody", "x")


async def test_shutdown_leaves_no_child_process_behind(tmp_path: Path) -> None:
    servers = {
        "fx": fixture_entry(),
        "fs": filesystem_entry(tmp_path),
        "mem": memory_entry(tmp_path / "m.jsonl"),
    }
    before = set(child_pids(os.getpid()))  # others of this test process (a session's test hosts) stay
    async with pool_of(servers) as pool:
        fx = await pid_of(pool, "fx")
        children = [pid for pid in child_pids(os.getpid()) if pid not in before]
        assert fx in children
        assert len(children) >= 3
    with anyio.fail_after(10):
        while any(alive(pid) for pid in children):
            await anyio.sleep(0.05)


async def test_streamable_http_servers_are_called_with_their_headers(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    from ..conftest import FIXTURE_SERVER

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "FIXTURE_HTTP_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, str(FIXTURE_SERVER)], env=env, stderr=subprocess.DEVNULL)
    try:
        with anyio.fail_after(30):
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                        break
                except OSError:
                    await anyio.sleep(0.1)
        servers = {"remote": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Api-Key": "${FIXTURE_KEY:-k-123}"}}}
        async with pool_of(servers) as pool:
            assert pool.servers["remote"].state == "ready", pool.servers["remote"].error
            assert pool.servers["remote"].config.transport == "http"
            result = await pool.call_tool("remote", "add", {"a": 20, "b": 22})
            assert result.structured_content == {"result": 42}
            header = await pool.call_tool("remote", "show_header", {"name": "x-api-key"})
            assert header.structured_content == {"result": "k-123"}
    finally:
        proc.kill()
        proc.wait()
