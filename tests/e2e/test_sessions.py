"""Sessions (``execute_code(session=...)``) through a real MCP client: state that persists from call to call on
every runner that has sessions, and what a session refuses (another client, an expired or ended one, the caps).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import alive, child_pids, fixture_entry, free_port, http_client, make_config, write_config

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[Client]:
    config = make_config(
        {"fixture": fixture_entry()}, pool_size=1, cpython_pool_size=1, max_sessions=6, max_sessions_per_client=3
    )
    async with Client(build_server(CodeMode(config)), mode="legacy") as c:
        yield c


async def call(client: Client, code: str, **extra: Any) -> dict[str, Any]:
    arguments = {"language": "python", "code": code, "cache": "off", **extra}
    result = await client.call_tool("execute_code", arguments)
    assert result.structured_content is not None, result.content
    return result.structured_content


async def close(client: Client, session_id: str) -> None:
    closed = await client.call_tool("close_session", {"sessionId": session_id})
    assert not closed.is_error


@pytest.mark.parametrize("runner", ["cpython", "local", "pyodide"])
async def test_a_python_session_keeps_globals_imports_functions_and_files_and_a_plain_run_stays_fresh(
    client: Client, runner: str
) -> None:
    first = await call(
        client,
        "import math\nx = 41\ndef f(a):\n    return a + x\nopen('kept.txt', 'w').write('hi')\nx",
        runner=runner,
        session="new",
    )
    assert first["success"], first["error"]
    session = first["sessionId"]
    assert first["returnValue"] == 41 and session
    second = await call(client, "x = x + 1\nprint('x is', x)", session=session)
    assert second["success"] and second["output"] == "x is 42\n" and second["sessionId"] == session
    assert second["runner"] == runner  # the session's runner, though the call named none
    third = await call(client, "[f(1), round(math.pi, 2), open('kept.txt').read()]", session=session)
    assert third["returnValue"] == [43, 3.14, "hi"]
    assert [f["path"] for f in third["files"]] == ["kept.txt"]
    fresh = await call(client, "x", runner=runner)
    assert not fresh["success"] and "x" in fresh["error"]["message"] and fresh.get("sessionId") is None
    await close(client, session)


async def test_a_deno_session_keeps_the_global_scope_across_javascript_and_typescript_calls(client: Client) -> None:
    first = await call(
        client,
        "const base = 40;\nlet count = 1;\nfunction add(x) { return x + base + count; }\n"
        "class Box { get v() { return 7; } }\nawait new Promise((r) => setTimeout(r, 5));\nbase",
        language="javascript",
        session="new",
    )
    assert first["success"], first["error"]
    session = first["sessionId"]
    assert first["returnValue"] == 40 and first["runner"] == "deno"
    second = await call(
        client,
        "count = count + 1;\nconst seen: number = new Box().v;\nconsole.log(add(0));",
        language="typescript",
        session=session,
    )
    assert second["success"], second["error"]
    assert second["output"] == "42\n"
    third = await call(client, "({ seen, sum: add(1) })", language="javascript", session=session)
    assert third["returnValue"] == {"seen": 7, "sum": 43}
    failing = await call(client, "const y = 1;\nthrow new TypeError('boom');", language="javascript", session=session)
    assert failing["error"]["type"] == "TypeError" and failing["error"]["line"] == 2
    still = await call(client, "base + seen", language="javascript", session=session)
    assert still["returnValue"] == 47  # an error in one call leaves the session as it was
    fresh = await call(client, "export default typeof base;", language="javascript")
    assert fresh["returnValue"] == "undefined"
    await close(client, session)


WRITE = {
    "python": "open('n.txt', 'w').write(str(n))\nreport_progress(1, 1, 'written')\nn",
    "javascript": "await Deno.writeTextFile('n.txt', String(n)); reportProgress(1, 1, 'written'); n",
}


@pytest.mark.parametrize("runner", ["cpython", "local", "pyodide", "deno"])
async def test_a_sessions_later_call_reports_progress_and_its_files_come_back_readable(
    client: Client, runner: str
) -> None:
    """Sessions with the other per-run channels: a later call's files are kept as artifacts (its own caps) and
    read back with resources/read, and its report_progress reaches the client."""
    language = "javascript" if runner == "deno" else "python"
    first = await call(
        client, "n = 7" if language == "python" else "const n = 7;", language=language, runner=runner, session="new"
    )
    assert first["success"], first["error"]
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    arguments = {"language": language, "code": WRITE[language], "cache": "off", "session": first["sessionId"]}
    later = await client.call_tool("execute_code", arguments, progress_callback=on_progress)
    assert later.structured_content is not None and later.structured_content["success"], later.structured_content
    links = [b.uri for b in later.content if isinstance(b, types.ResourceLink)]
    assert len(links) == 1 and str(links[0]).endswith("/files/n.txt"), later.content
    read = await client.read_resource(str(links[0]))
    assert [getattr(c, "text", None) for c in read.contents] == ["7"]
    assert reports and reports[-1][2] == "written", reports
    await close(client, first["sessionId"])


async def test_a_session_whose_run_times_out_has_ended_and_its_next_call_says_why(client: Client) -> None:
    opened = await call(client, "x = 1", runner="cpython", session="new")
    session = opened["sessionId"]
    slow = await call(client, "import time\ntime.sleep(30)", session=session, timeout=500)
    assert slow["error"]["type"] == "TimeoutError"
    assert "the session has ended: a run timed out" in slow["error"]["message"]
    after = await call(client, "x", session=session)
    assert after["error"]["type"] == "UnsupportedError"
    assert f"session {session!r} has ended: a run timed out" in after["error"]["message"]
    listed = await client.call_tool("list_sessions", {})
    assert session not in str(listed.structured_content)


async def test_a_session_whose_worker_died_says_so_on_its_next_call(client: Client) -> None:
    opened = await call(client, "x = 1", runner="cpython", session="new")
    session = opened["sessionId"]
    died = await call(client, "import os\nos._exit(3)", session=session)
    assert died["error"]["type"] == "WorkerDied" and "exit code 3" in died["error"]["message"]
    assert "the session has ended: its worker ended" in died["error"]["message"]
    after = await call(client, "x", session=session)
    assert f"session {session!r} has ended: its worker ended" in after["error"]["message"]


async def test_a_client_gets_at_most_its_cap_of_sessions_and_close_session_frees_one(client: Client) -> None:
    opened = [(await call(client, "1", runner="cpython", session="new"))["sessionId"] for _ in range(3)]
    refused = await call(client, "1", runner="cpython", session="new")
    assert refused["error"]["type"] == "UnsupportedError"
    assert "CODE_MODE_MAX_SESSIONS_PER_CLIENT" in refused["error"]["message"]
    assert "close_session" in refused["error"]["message"]
    listed = await client.call_tool("list_sessions", {})
    rows = listed.structured_content["result"] if listed.structured_content else []
    assert {r["sessionId"] for r in rows} == set(opened) and all(r["runs"] == 1 for r in rows)
    await close(client, opened[0])
    gone = await call(client, "1", session=opened[0])
    assert gone["error"]["message"].startswith(f"unknown session {opened[0]!r}")
    again = await call(client, "2", runner="cpython", session="new")
    assert again["success"]
    for session in [*opened[1:], again["sessionId"]]:
        await close(client, session)


async def test_a_session_on_a_runner_without_sessions_is_refused_naming_those_with_them(client: Client) -> None:
    refused = await call(client, "1", runner="monty", session="new")
    assert refused["error"]["type"] == "UnsupportedError"
    message = refused["error"]["message"]
    assert "monty runner has no sessions" in message and "cpython" in message and "deno" in message


async def test_a_session_made_with_packages_keeps_them_for_calls_that_name_none(client: Client) -> None:
    opened = await call(client, "import attr\nattr.__name__", runner="cpython", packages=["attrs"], session="new")
    if not opened["success"] and "PackageInstallError" in str(opened["error"]):
        pytest.skip(f"attrs cannot be installed here: {opened['error']['message'][:200]}")
    assert opened["returnValue"] == "attr", opened["error"]
    later = await call(client, "attr.__name__", session=opened["sessionId"])
    assert later["returnValue"] == "attr", later["error"]
    other = await call(client, "1", session=opened["sessionId"], packages=[])
    assert "network and packages are those of its first run" in other["error"]["message"]
    await close(client, opened["sessionId"])


async def test_a_session_runs_only_on_its_own_runner_and_a_made_up_id_is_unknown(client: Client) -> None:
    opened = await call(client, "1", runner="local", session="new")
    other = await call(client, "1", runner="cpython", session=opened["sessionId"])
    assert "runs on the local runner" in other["error"]["message"]
    made_up = await call(client, "1", session="not-a-session")
    assert made_up["error"]["message"].startswith("unknown session 'not-a-session'")
    await close(client, opened["sessionId"])
    unknown = await client.call_tool("close_session", {"sessionId": opened["sessionId"]})
    assert unknown.is_error


async def test_a_done_that_an_earlier_run_of_the_session_forges_late_does_not_end_the_next_run(client: Client) -> None:
    # Run 1 leaves a thread that, during run 2, writes a `done` for run 1 on the session's run channel.
    forger = """
import gc, threading, time
channel = next(o for o in gc.get_objects() if type(o).__name__ == "Channel" and hasattr(o, "tools"))
def forge():
    time.sleep(0.3)
    channel.send({"op": "done", "success": True, "returnValue": "forged", "run": 1})
threading.Thread(target=forge, daemon=True).start()
"""
    first = await call(client, forger, runner="cpython", session="new")
    assert first["success"], first["error"]
    second = await call(client, "import time\ntime.sleep(0.8)\n'real'", session=first["sessionId"])
    assert second["success"] and second["returnValue"] == "real"
    await close(client, first["sessionId"])


async def test_a_second_call_on_a_session_while_one_runs_is_refused(client: Client) -> None:
    opened = await call(client, "1", runner="cpython", session="new")
    session = opened["sessionId"]
    answers: list[dict[str, Any]] = []
    busy: dict[str, Any] = {}
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:

            async def slow() -> None:
                answers.append(await call(client, "import time\ntime.sleep(1.5)\n'slow'", session=session))

            tg.start_soon(slow)
            await anyio.sleep(0.5)  # the slow call is running by now (no event tells a client that)
            busy = await call(client, "'fast'", session=session)
    assert "running another call" in busy["error"]["message"]
    assert answers[0]["returnValue"] == "slow"
    await close(client, session)


@pytest.mark.parametrize("session", [None, "new"])
async def test_no_deno_script_can_open_an_inspector_session_of_its_own(client: Client, session: str | None) -> None:
    code = 'const { Session } = await import("node:inspector");\nnew Session().connect();\n"connected"'
    if session is None:
        code = code.replace('\n"connected"', '\nexport default "connected";')
    done = await call(client, code, language="javascript", **({"session": session} if session else {}))
    assert done["error"]["type"] == "NotCapable" and "inspector" in done["error"]["message"]
    if session is not None:
        await close(client, done["sessionId"])


# ----- over stdio and HTTP, a real server process with the environment of a desktop client ------------------------


def _desktop_env(home: Path, **settings: str) -> dict[str, str]:
    return {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "USER": "root",
        "SHELL": "/bin/sh",
        "TERM": "dumb",
        "CODE_MODE_CACHE_EMBEDDER": "hashing",
        "CODE_MODE_EAGER_RUNNERS": "none",
        **settings,
    }


async def test_over_stdio_an_agent_keeps_state_across_ten_calls(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("mcp-code-mode")),
        args=["serve", "--config", str(config)],
        env=_desktop_env(tmp_path),
        cwd="/",
    )
    with anyio.fail_after(120):
        async with Client(params) as agent:
            made = await call(agent, "seen = []", runner="cpython", session="new")
            session = made["sessionId"]
            for number in range(1, 10):
                step = await call(agent, f"seen.append({number})\nsum(seen)", session=session)
                assert step["success"] and step["returnValue"] == number * (number + 1) // 2, step
            listed = await agent.call_tool("list_sessions", {})
            assert listed.structured_content is not None
            assert [r["runs"] for r in listed.structured_content["result"]] == [10]


def _session_children(pid: int) -> list[int]:
    """The processes under the server that hold a session's interpreter (a zygote child that stays ``cm-run``)."""
    found: list[int] = []
    for child in child_pids(pid):
        try:
            name = Path(f"/proc/{child}/comm").read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if name == "cm-run":
            found.append(child)
    return found


async def test_over_http_another_client_gets_unknown_session_and_an_idle_session_expires_with_its_worker(
    tmp_path: Path,
) -> None:
    token = "sessions-test-token"
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    port = free_port()
    workers: set[int] = set()
    env = _desktop_env(tmp_path, CODE_MODE_AUTH_TOKEN=token, CODE_MODE_SESSION_IDLE_S="1")
    argv = [sys.executable, "-m", "mcp_code_mode.cli", "serve", "--http", "--port", str(port), "--config", str(config)]
    log = tmp_path / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, env=env, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        with anyio.fail_after(60):
            while True:
                assert process.poll() is None, log.read_text(encoding="utf-8")
                try:
                    if httpx2.get(url.replace("/mcp", "/healthz"), timeout=1).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.05)  # polling a port: there is no event to wait on
        async with http_client(url, token) as first, http_client(url, token) as second:
            made = await call(first, "secret = 'first client'\nsecret", runner="cpython", session="new")
            assert made["success"], made["error"]
            session = made["sessionId"]
            assert (await call(first, "secret", session=session))["returnValue"] == "first client"
            assert len(_session_children(process.pid)) == 1
            stolen = await call(second, "secret", session=session)
            assert stolen["error"]["message"].startswith(f"unknown session {session!r}")
            assert "secret" not in str((await second.call_tool("list_sessions", {})).structured_content)
            with anyio.fail_after(15):
                while _session_children(process.pid):
                    await anyio.sleep(0.1)  # the sweeper closes it after 1 s idle and kills its worker
            expired = await call(first, "secret", session=session)
            message = expired["error"]["message"]
            assert message.startswith(f"unknown session {session!r}") and "after 1 s idle" in message
            held = await call(second, "y = 1", runner="cpython", session="new")
            assert held["success"]
            workers = child_pids(process.pid)
            assert _session_children(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=20)
    with anyio.fail_after(10):
        while [pid for pid in workers if alive(pid)]:
            await anyio.sleep(0.05)  # the server closed its open session: no process of it outlives it
