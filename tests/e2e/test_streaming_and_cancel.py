"""Printed output streams as log messages, progress is reported, and a cancelled call kills its run.

Each test runs against a real server process through a real MCP client, over streamable HTTP (with a
token) and over stdio, so ``notifications/cancelled`` and the notifications cross a real transport.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import LoggingMessageNotificationParams

from ..conftest import (
    alive,
    child_pids,
    executing,
    fixture_entry,
    http_client,
    http_server,
    server_env,
    write_config,
)

pytestmark = pytest.mark.anyio

TOKEN = "stream-token"
SETTINGS = {"progress_interval_ms": "200", "pool_size": "1"}


@dataclass
class Session:
    """A connected client, the pid of the server process it talks to, and what the server sent it."""

    client: Client
    server_pid: int
    logs: list[tuple[float, LoggingMessageNotificationParams]] = field(default_factory=list)
    on_log: Callable[[LoggingMessageNotificationParams], None] | None = None

    async def record(self, params: LoggingMessageNotificationParams) -> None:
        self.logs.append((time.monotonic(), params))
        if self.on_log is not None:
            self.on_log(params)


def _pid_of(fragment: str) -> int:
    for pid in child_pids(os.getpid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if fragment in cmdline and "fixture_server" not in cmdline:
            return pid
    raise AssertionError(f"no child process runs {fragment}")


def _runs_worker(cmdline: bytes) -> bool:
    argv = cmdline.split(b"\0")
    return Path(argv[0].decode(errors="replace")).name.startswith("python") and b"worker.py" in cmdline


RUNNING_NAME = "cm-run"
"""What a zygote's child names itself (``/proc/PID/comm``) once it has a run (``sandboxed/worker.py``)."""


def run_children(server_pid: int) -> set[int]:
    """The processes running a script: forked children of a zygote worker of the server that have
    their run (each zygote also keeps one child forked ahead, waiting, named ``cm-waiting``)."""
    found: set[int] = set()
    for pid in child_pids(server_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            name = Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
            parent = int(Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[1])
            parent_cmdline = Path(f"/proc/{parent}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        # A zygote and its run child both run worker.py in Python; bubblewrap's own command line
        # mentions worker.py too, but its program is bwrap.
        if _runs_worker(cmdline) and _runs_worker(parent_cmdline) and name == RUNNING_NAME:
            found.add(pid)
    return found


@pytest.fixture(scope="module", params=["http", "stdio"])
async def session(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncGenerator[Session]:
    folder = tmp_path_factory.mktemp(f"stream-{request.param}")
    config = write_config(folder / "servers.json", {"fixture": fixture_entry()})
    holder: list[Session] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        await holder[0].record(params)

    if request.param == "http":
        with http_server(config, folder / "server.log", auth_token=TOKEN, **SETTINGS) as server:
            async with http_client(server.url, TOKEN, logging_callback=on_log) as client:
                holder.append(Session(client, server.process.pid))
                yield holder[0]
        return
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_code_mode.cli", "serve", "--config", str(config)],
        env=server_env(**SETTINGS),
    )
    async with Client(params, mode="legacy", logging_callback=on_log) as client:
        holder.append(Session(client, _pid_of("mcp_code_mode.cli serve")))
        yield holder[0]


async def test_printed_output_arrives_as_log_messages_while_the_script_runs(session: Session) -> None:
    first = anyio.Event()
    session.on_log = lambda params: first.set() if "first line" in str(params.data) else None
    code = "import time\nprint('first line')\ntime.sleep(1.5)\nprint('second line')\n"
    # cache "off" (executing): this test is about a run's own output; a replay would answer at once
    async with executing(session.client, code) as done:
        await first.wait()
        assert not done, "the first line arrived only with the result"
    assert done[0]["output"] == "first line\nsecond line\n"
    texts = [str(p.data) for _, p in session.logs]
    assert "first line\n" in texts and "second line\n" in texts
    assert all(p.logger == "stdout" and p.level == "info" for _, p in session.logs)


async def test_a_client_that_asks_for_progress_gets_elapsed_time_and_tool_calls(session: Session) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    code = "import time\nfixture.add(a=1, b=2)\ntime.sleep(0.5)\nfixture.add(a=3, b=4)\ntime.sleep(0.5)\n"
    with anyio.fail_after(60):
        result = await session.client.call_tool(
            "execute_code", {"language": "python", "code": code}, progress_callback=on_progress
        )
    assert result.structured_content is not None and result.structured_content["success"]
    assert len(reports) >= 3
    values = [value for value, _, _ in reports]
    assert values == sorted(values) and len(set(values)) == len(values), "progress must strictly increase"
    assert values[-1] >= 0.6
    messages = [m or "" for _, _, m in reports]
    # Before it runs, a run may wait for the fixture server's start (the server connects in the background).
    waited = [m for m in messages if not m.startswith("running: ")]
    assert all(m == "starting: waiting for fixture" for m in waited), messages
    running = messages[len(waited) :]
    assert running and running[0].endswith(" s, 0 tool calls"), messages
    assert running[-1].endswith("2 tool calls")


async def test_a_call_without_a_progress_token_gets_no_progress(session: Session) -> None:
    # The SDK only asks for progress when a callback is given; the run still works without one.
    result = await session.client.call_tool("execute_code", {"language": "python", "code": "print('quiet')"})
    assert result.structured_content is not None and result.structured_content["output"] == "quiet\n"


async def cancel_once_printed(session: Session, code: str, marker: str) -> tuple[set[int], float]:
    """Run ``code``, cancel the call once ``marker`` was printed, and time until its process is gone."""
    started = anyio.Event()
    session.on_log = lambda params: started.set() if marker in str(params.data) else None
    scope = anyio.CancelScope()
    runs: set[int] = set()
    cancelled_at = 0.0

    async def call() -> None:
        with scope:
            await session.client.call_tool("execute_code", {"language": "python", "code": code, "timeout": 200000})
        assert scope.cancelled_caught, "the call ended by itself"

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await started.wait()
            runs = run_children(session.server_pid)
            cancelled_at = time.monotonic()
            scope.cancel()  # the SDK client sends notifications/cancelled for the abandoned request
    assert len(runs) == 1, runs
    with anyio.fail_after(10):
        while any(alive(pid) for pid in runs):
            await anyio.sleep(0.005)  # polling /proc: a process's death is not an event we can await
    return runs, time.monotonic() - cancelled_at


async def test_cancelling_a_call_kills_the_run_within_half_a_second_and_the_server_goes_on(session: Session) -> None:
    code = "import time\nprint('sleeping')\ntime.sleep(120)\nprint('woke up')\n"
    runs, seconds = await cancel_once_printed(session, code, "sleeping")
    assert seconds < 0.5, f"the run's process outlived the cancellation by {seconds:.3f} s"
    assert not any("woke up" in str(p.data) for _, p in session.logs)
    with anyio.fail_after(60):
        result = await session.client.call_tool("execute_code", {"language": "python", "code": "fixture.add(a=1, b=1)"})
    assert result.structured_content is not None
    assert result.structured_content["returnValue"] == {"result": 2}
    assert not run_children(session.server_pid) & runs


async def test_cancelling_during_a_tool_call_kills_the_run_too(session: Session) -> None:
    code = "print('calling')\nfixture.slow(seconds=30)\nprint('returned')\n"
    _, seconds = await cancel_once_printed(session, code, "calling")
    assert seconds < 0.5, f"the run's process outlived the cancellation by {seconds:.3f} s"
    assert not any("returned" in str(p.data) for _, p in session.logs)
    with anyio.fail_after(60):
        result = await session.client.call_tool("execute_code", {"language": "python", "code": "print('next')"})
    assert result.structured_content is not None and result.structured_content["output"] == "next\n"
