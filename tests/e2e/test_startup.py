"""Start-up as a desktop client sees it: the server answers ``initialize`` while its downstream servers still
connect, a run waits only for the servers it names, and runners start on first use (or at once when eager).

Each test spawns ``mcp-code-mode serve`` over stdio with the minimal environment of a desktop client and reads
the server's process tree from /proc: which worker processes exist is the host's fact, not the server's word.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from ..conftest import fixture_entry, write_config

pytestmark = pytest.mark.anyio

GATE = "slow-gate"
"""The file (in the test's home) the slow fixture server waits for before it serves: a test opens it when the
server may come up, so "still starting" is a fact of the test, not a race with the machine's load."""


def _slow(home: Path) -> dict[str, Any]:
    """A fixture server that starts serving only once the test opens its gate (``_open``)."""
    return fixture_entry(FIXTURE_START_GATE=str(home / GATE))


def _open(home: Path) -> None:
    (home / GATE).touch()


async def _open_after(home: Path, seconds: float) -> None:
    await anyio.sleep(seconds)
    _open(home)


def _environment(home: Path, **settings: str) -> dict[str, str]:
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/sh",
        "TERM": "dumb",
        **settings,
    }


@asynccontextmanager
async def serving(
    home: Path, servers: dict[str, Any], on_message: Any = None, **settings: str
) -> AsyncGenerator[tuple[Client, float]]:
    """A client of a freshly spawned server, and the seconds from spawn to ``initialize`` answered."""
    config = write_config(home / "mcp_servers.json", servers)
    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("mcp-code-mode")),
        args=["serve", "--config", str(config)],
        env=_environment(home, **settings),
        cwd="/",
    )
    started = time.monotonic()
    with anyio.fail_after(300):
        async with Client(params, mode="legacy", message_handler=on_message) as client:
            yield client, time.monotonic() - started


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _commands_under(pid: int) -> list[str]:
    tree = _children()
    found: list[str] = []
    todo = list(tree.get(pid, []))
    while todo:
        child = todo.pop()
        todo.extend(tree.get(child, []))
        try:
            found.append((Path("/proc") / str(child) / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found


def _server_pid(home: Path) -> int:
    """The ``mcp-code-mode serve`` this test spawned: the child of ours serving its own servers file (other
    tests of this process may keep servers of their own running)."""
    config = str(home / "mcp_servers.json").encode()
    for pid in _children().get(os.getpid(), []):
        try:
            cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        if b"serve" in cmdline and config in cmdline:
            return pid
    raise AssertionError(f"no mcp-code-mode serve child with {config.decode()}")


def _workers(home: Path, kind: str) -> list[str]:
    marker = {"local": "worker.py local", "cpython": "worker.py cpython", "deno": "deno_worker"}[kind]
    return [c for c in _commands_under(_server_pid(home)) if marker in c]


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert result.structured_content is not None, result
    return result.structured_content


async def test_initialize_is_answered_before_a_slow_downstream_server_is_up_and_a_run_that_names_it_waits(
    tmp_path: Path,
) -> None:
    servers = {"slow": _slow(tmp_path), "quick": fixture_entry()}
    async with serving(tmp_path, servers) as (client, _):
        answered = time.monotonic()  # the slow server cannot be up: its gate is still shut
        listed = await client.list_tools()
        description = next(t.description or "" for t in listed.tools if t.name == "execute_code")
        assert "- slow" in description and "starting" in description, description

        # A run that names only the quick server does not wait for the slow one: that one is still starting after.
        quick = await _call(client, "execute_code", language="python", code="quick.add(a=1, b=2)", cache="off")
        assert quick["success"], quick["error"]
        assert "3" in str(quick["returnValue"]), quick
        listed = await client.list_tools()
        description = next(t.description or "" for t in listed.tools if t.name == "execute_code")
        assert "- slow (starting" in description, (time.monotonic() - answered, description)

        # A run that names the slow server waits for it, then calls it.
        slow: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            tg.start_soon(_open_after, tmp_path, 1.0)
            slow = await _call(client, "execute_code", language="python", code="slow.add(a=2, b=5)", cache="off")
        assert slow["success"], slow["error"]
        assert "7" in str(slow["returnValue"])
        listed = await client.list_tools()
        description = next(t.description or "" for t in listed.tools if t.name == "execute_code")
        assert "starting" not in description and "- slow" in description and "tools:" in description


async def test_a_client_that_listed_the_tools_early_is_told_when_a_starting_server_s_tools_arrive(
    tmp_path: Path,
) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    servers = {"slow": _slow(tmp_path)}
    async with serving(tmp_path, servers, on_message) as (client, _):
        tools = client.server_capabilities.tools
        assert tools is not None and tools.list_changed is True
        early = await client.list_tools()
        assert "- slow (starting" in next(t.description or "" for t in early.tools if t.name == "execute_code")
        _open(tmp_path)
        with anyio.fail_after(60):
            await changed.wait()
        later = await client.list_tools()
        description = next(t.description or "" for t in later.tools if t.name == "execute_code")
        assert "- slow (" in description and "tools: " in description and "starting" not in description


async def test_a_run_that_waits_for_a_starting_server_says_so_in_its_progress(tmp_path: Path) -> None:
    reports: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append(message or "")

    servers = {"slow": _slow(tmp_path)}
    async with (
        serving(tmp_path, servers, CODE_MODE_EAGER_RUNNERS="none") as (client, _),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_open_after, tmp_path, 1.0)
        result = await client.call_tool(
            "execute_code",
            {"language": "python", "code": "slow.add(a=1, b=1)", "cache": "off"},
            progress_callback=on_progress,
        )
        assert result.structured_content is not None and result.structured_content["success"], result
    assert reports[:2] == ["starting: waiting for slow", "starting: waiting for the local runner"], reports
    assert len(reports) >= 3 and all(r.startswith("running: ") for r in reports[2:]), reports


async def test_get_tool_stubs_and_search_tools_wait_for_a_server_that_is_still_starting(tmp_path: Path) -> None:
    async with serving(tmp_path, {"slow": _slow(tmp_path)}) as (client, _), anyio.create_task_group() as tg:
        tg.start_soon(_open_after, tmp_path, 1.0)
        stubs = await client.call_tool("get_tool_stubs", {"server": "slow"})
        text = "".join(getattr(c, "text", "") for c in stubs.content)
        assert "def add(" in text, text[:500]
        found = await _call(client, "search_tools", query="add two numbers", limit=3)
        assert any(t["tool"] == "slow.add" for t in found["tools"]), found


async def test_a_runner_that_is_not_eager_has_no_worker_until_its_first_run(tmp_path: Path) -> None:
    async with serving(tmp_path, {}, CODE_MODE_EAGER_RUNNERS="local") as (client, _):
        with anyio.fail_after(60):
            while not _workers(tmp_path, "local"):  # the eager runner warms in the background
                await anyio.sleep(0.1)
        await anyio.sleep(1.0)
        assert _workers(tmp_path, "cpython") == [] and _workers(tmp_path, "deno") == [], _commands_under(
            _server_pid(tmp_path)
        )
        result = await _call(client, "execute_code", language="python", runner="cpython", code="1 + 1", cache="off")
        assert result["success"] and result["returnValue"] == 2, result
        assert _workers(tmp_path, "cpython"), "the cpython runner ran without a worker process of its own?"
        assert _workers(tmp_path, "deno") == []


async def test_no_runner_is_started_until_a_run_needs_it_with_eager_none(tmp_path: Path) -> None:
    async with serving(tmp_path, {}, CODE_MODE_EAGER_RUNNERS="none") as (client, _):
        await anyio.sleep(2.0)
        assert (
            _workers(tmp_path, "local") == []
            and _workers(tmp_path, "cpython") == []
            and _workers(tmp_path, "deno") == []
        )
        result = await _call(client, "execute_code", language="javascript", code="export default 6 * 7;", cache="off")
        assert result["success"] and result["returnValue"] == 42, result
        with anyio.fail_after(60):  # a deno worker serves one run: its replacement is started after the answer
            while not _workers(tmp_path, "deno"):
                await anyio.sleep(0.05)
        assert _workers(tmp_path, "local") == [] and _workers(tmp_path, "cpython") == []


def test_an_unknown_eager_runner_stops_start_up_naming_the_valid_ones(tmp_path: Path) -> None:
    config = write_config(tmp_path / "mcp_servers.json", {})
    done = subprocess.run(
        [str(Path(sys.executable).with_name("mcp-code-mode")), "serve", "--config", str(config)],
        env=_environment(tmp_path, CODE_MODE_EAGER_RUNNERS="local,locl"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "CODE_MODE_EAGER_RUNNERS names no runner locl" in done.stderr, done.stderr
    assert "valid: default, all, none, " in done.stderr and "cpython" in done.stderr
