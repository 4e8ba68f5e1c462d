"""Forged bridge traffic, one test per technique, on every runner a script can write raw bytes from.

A run can write on its own run channel (cpython: the socket it holds; deno: fds 0 and 1 through
``node:fs``). What it says there is believed about its own run only: it cannot hand its worker back
to the pool, make the host signal a process, or crash the server, and the next runs are served by
fresh processes that it cannot reach.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_code_mode.engine import CodeMode

pytestmark = pytest.mark.anyio

FORGED_DONE = {"op": "done", "success": True, "returnValue": "forged", "error": None, "files": [], "dropped": 0}
HIJACKED = {**FORGED_DONE, "returnValue": "hijacked"}

# cpython: write on every descriptor, then wait for a next run and answer it as if it were the worker.
CPYTHON_HIJACK = f"""
import os, json, select
line = (json.dumps({FORGED_DONE!r}) + "\\n" + json.dumps({{"op": "ready", "child": 1}}) + "\\n").encode()
fds = [int(n) for n in os.listdir("/proc/self/fd")]
for fd in fds:
    try:
        os.write(fd, line)
    except OSError:
        pass
answer = (json.dumps({HIJACKED!r}) + "\\n").encode()
deadline = __import__("time").monotonic() + 20
while __import__("time").monotonic() < deadline:
    for fd in fds:
        try:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready and b'"op": "run"' in os.read(fd, 1 << 20).replace(b'"op":"run"', b'"op": "run"'):
                for out in fds:
                    try:
                        os.write(out, answer)
                    except OSError:
                        pass
        except (OSError, ValueError):
            pass
"""

DENO_HIJACK = f"""
import fs from "node:fs";
const lines = JSON.stringify({json.dumps(FORGED_DONE)}) + "\\n" + JSON.stringify({{ op: "ready" }}) + "\\n";
for (const fd of [0, 1, 2]) {{ try {{ fs.writeSync(fd, lines); }} catch {{ /* refused */ }} }}
const answer = JSON.stringify({json.dumps(HIJACKED)}) + "\\n";
const buffer = new Uint8Array(1 << 16);
const until = Date.now() + 20000;
while (Date.now() < until) {{
  try {{
    const n = fs.readSync(0, buffer);
    if (n > 0 && new TextDecoder().decode(buffer.subarray(0, n)).includes('"op":"run"')) fs.writeSync(1, answer);
  }} catch {{ await new Promise((resolve) => setTimeout(resolve, 50)); }}
}}
"""

HIJACKS = [("cpython", "python", CPYTHON_HIJACK), ("deno", "js", DENO_HIJACK)]


@pytest.mark.parametrize(("runner", "language", "attack"), HIJACKS, ids=[h[0] for h in HIJACKS])
async def test_a_forged_done_and_ready_never_hand_the_worker_to_the_next_runs(
    engine: CodeMode, runner: str, language: str, attack: str
) -> None:
    attacked = await engine.execute(attack, language, runner=runner, timeout_ms=30_000, cache="off")
    # Its own run may end with what it forged (it is the run's own word about itself), nothing more.
    assert attacked.return_value in ("forged", None), attacked
    victim = {
        "python": "fixture.add(a=20, b=22)['result']",
        "js": "export default (await fixture.add({ a: 20, b: 22 })).result;",
    }
    for round_ in range(4):
        result = await engine.execute(victim[language], language, runner=runner, cache="off")
        assert result.success, result.error
        assert result.return_value != "hijacked", f"run {round_} was answered by the attacker"
        assert result.return_value == 42


async def test_a_started_message_with_a_host_pid_ends_the_run_and_signals_nothing(engine: CodeMode) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        forged = json.dumps({"op": "started", "pid": sleeper.pid})
        cpython = (
            "import os\nfor fd in [int(n) for n in os.listdir('/proc/self/fd')]:\n    try:\n"
            f"        os.write(fd, ({forged!r} + '\\n').encode())\n    except OSError:\n        pass\n"
            "import time\ntime.sleep(5)"
        )
        result = await engine.execute(cpython, runner="cpython", cache="off")
        assert not result.success and result.error is not None
        assert result.error.type == "ProtocolError" and "op 'started'" in result.error.message
        deno = (
            f"import fs from 'node:fs';\nfs.writeSync(1, {json.dumps(forged + chr(10))});\n"
            "await new Promise(r => setTimeout(r, 5000));"
        )
        result = await engine.execute(deno, "js", cache="off")
        if engine.config.settings.deno_isolates:
            # fd 1 of a supervisor is not its control channel: the line never reaches the bridge.
            assert result.success, result.error
        else:
            assert not result.success and result.error is not None
            assert result.error.type == "ProtocolError" and "op 'started'" in result.error.message
        assert sleeper.poll() is None, "the host signalled a process a sandbox named"
    finally:
        sleeper.kill()
        sleeper.wait()


DEEP = "[" * 200_000


@pytest.mark.parametrize("after_done", [False, True], ids=["as-the-first-message", "after-a-forged-done"])
async def test_a_deeply_nested_line_ends_that_run_only(engine: CodeMode, after_done: bool) -> None:
    prefix = f"json.dumps({FORGED_DONE!r}) + '\\n' + " if after_done else ""
    code = (
        "import os, json\n"
        f"line = ({prefix}'{DEEP[:10]}' * {len(DEEP) // 10} + '\\n').encode()\n"
        "for fd in [int(n) for n in os.listdir('/proc/self/fd')]:\n    try:\n        os.write(fd, line)\n"
        "    except OSError:\n        pass\nimport time\ntime.sleep(5)"
    )
    result = await engine.execute(code, runner="cpython", cache="off")
    if after_done:
        assert result.return_value == "forged"
    else:
        assert result.error is not None and result.error.type == "ProtocolError"
        assert "nested too deeply" in result.error.message
    after = await engine.execute("fixture.add(a=1, b=2)['result']", runner="cpython", cache="off")
    assert after.success and after.return_value == 3


@pytest.mark.parametrize(
    ("garbage", "fragment"),
    [
        ("'not json\\n'", "malformed"),
        ("'[1, 2]\\n'", "not a JSON object"),
        ("json.dumps({'op': 'exit', 'status': 'exit code 0'}) + '\\n'", "does not know"),
        ("json.dumps({'op': 'call', 'id': 'x', 'server': 'fixture', 'tool': 'add', 'arguments': {}}) + '\\n'", "'id'"),
        (
            "json.dumps({'op': 'done', 'success': True, 'files': [{'path': '../../etc/shadow', 'size': 1}]}) + '\\n'",
            "invalid file entry",
        ),
    ],
    ids=["not-json", "not-an-object", "unknown-op", "forged-id", "file-outside"],
)
async def test_each_malformed_message_ends_the_run_with_a_clear_error_and_the_next_run_works(
    engine: CodeMode, garbage: str, fragment: str
) -> None:
    code = (
        "import os, json\n"
        f"line = ({garbage}).encode()\n"
        "fds = os.listdir('/proc/self/fd')\n"
        "fd = next(int(n) for n in fds if os.readlink(f'/proc/self/fd/{n}').startswith('socket:'))\n"
        "os.write(fd, line)\nimport time\ntime.sleep(5)"
    )
    result = await engine.execute(code, runner="cpython", cache="off")
    assert not result.success and result.error is not None
    assert result.error.type == "ProtocolError" and fragment in result.error.message, result.error
    after = await engine.execute("fixture.add(a=1, b=2)['result']", runner="cpython", cache="off")
    assert after.success and after.return_value == 3


# ----- a SIGKILLed server leaves nothing running ------------------------------------------------

SERVER = """
import sys, anyio
sys.path[:0] = {paths!r}
from tests.conftest import make_config
from mcp_code_mode.engine import CodeMode

async def main():
    config = make_config({{}}, cache_dir={cache!r}, workspace_dir={runs!r}, pool_size=1, cpython_pool_size=1)
    async with CodeMode(config) as cm:
        async def said(text):
            print("RUNNING", flush=True)
        await cm.execute({code!r}, {language!r}, runner={runner!r}, timeout_ms=120_000, on_output=said, cache="off")

anyio.run(main)
"""
LONG = {
    "cpython": ("python", "import time\nprint('x', flush=True)\nwhile True:\n    time.sleep(0.1)"),
    "local": ("python", "import time\nprint('x')\nwhile True:\n    time.sleep(0.1)"),
    "deno": ("js", "console.log('x');\nsetInterval(() => {}, 100);\nawait new Promise(() => {});"),
}


def descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set[int](), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def server_dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    yield tmp_path / "cache", tmp_path / "runs"


@pytest.mark.parametrize("runner", sorted(LONG))
def test_a_sigkilled_server_leaves_no_running_script_and_no_workspace(
    runner: str, server_dirs: tuple[Path, Path]
) -> None:
    from ..conftest import CACHE_DIR

    language, code = LONG[runner]
    _, runs = server_dirs
    program = SERVER.format(
        paths=[str(Path(__file__).resolve().parents[2]), *[p for p in sys.path if p]],
        cache=str(CACHE_DIR),
        runs=str(runs),
        code=code,
        language=language,
        runner=runner,
    )
    server = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "RUNNING"
        tree = descendants(server.pid)
        assert tree, "the run's processes should be there"
        server.send_signal(signal.SIGKILL)  # as the OOM killer does: nothing of the server runs after this
        server.wait()
        deadline = time.monotonic() + 10
        while (left := {pid for pid in tree if alive(pid)}) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"still running after the server died: {left}"
        assert not runs.exists() or list(runs.iterdir()) == []
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
