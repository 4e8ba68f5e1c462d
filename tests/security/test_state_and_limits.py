"""Nothing of a run survives into the next (SysV IPC, keyrings, /dev/shm, /tmp), and every runner has
memory and disk limits (Deno's ArrayBuffers and WebAssembly memory included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.sandbox.bwrap import BwrapSandbox

from ..conftest import make_config

pytestmark = pytest.mark.anyio

SYSCALL = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("sysv-shared-memory", "libc.shmget(0, 1 << 30, 0o1600)"),  # IPC_PRIVATE, IPC_CREAT | 0600
        ("sysv-semaphores", "libc.semget(0, 1, 0o1600)"),
        ("sysv-message-queues", "libc.msgget(0, 0o1600)"),
        ("posix-message-queues", "libc.syscall(240, b'kept', 0o100 | 2, 0o600, 0)"),  # mq_open(O_CREAT|O_RDWR)
        ("keyring-add-key", "libc.syscall(248, b'user', b'kept', b'secret', 6, -3)"),  # add_key, user keyring
        ("keyring-keyctl", "libc.syscall(250, 0, -3, 0)"),  # keyctl(KEYCTL_GET_KEYRING_ID, user keyring)
        ("new-user-namespace", "libc.unshare(0x10000000)"),  # CLONE_NEWUSER
        ("new-network-namespace", "libc.unshare(0x40000000)"),
        ("ptrace", "libc.ptrace(16, 1, 0, 0)"),  # PTRACE_ATTACH to the sandbox's init
    ],
)
async def test_kernel_state_that_would_outlive_a_run_is_refused(engine: CodeMode, name: str, call: str) -> None:
    code = SYSCALL + f"result = {call}\nprint(result, os.strerror(ctypes.get_errno()))"
    result = await engine.execute(code, runner="cpython", cache="off")
    assert result.success, result.error
    assert result.output == "-1 Operation not permitted\n", f"{name}: {result.output}"


async def test_shared_memory_files_and_tmp_are_gone_for_the_next_run(engine: CodeMode) -> None:
    leave = (
        "import os\nfor d in ('/dev/shm', '/tmp', '.'):\n"
        "    with open(os.path.join(d, 'left-by-a-run'), 'w') as f:\n        f.write('x')\n"
        "print(sorted(os.listdir('/dev/shm')))"
    )
    first = await engine.execute(leave, runner="cpython", cache="off")
    assert first.success and first.output == "['left-by-a-run']\n", first
    look = "import os\nprint([sorted(os.listdir(d)) for d in ('/dev/shm', '/tmp', '.')])"
    for _ in range(3):  # whichever worker serves it
        after = await engine.execute(look, runner="cpython", cache="off")
        assert after.success and after.output == "[[], [], []]\n", after


async def test_deno_array_buffers_are_bounded_by_the_memory_limit(engine: CodeMode) -> None:
    code = (
        "const kept = [];\n"
        "try { for (let i = 0; i < 48; i++) { const b = new ArrayBuffer(64 * 1024 * 1024); new Uint8Array(b).fill(1);"
        " kept.push(b); } console.log('allocated', kept.length * 64); }\n"
        "catch (e) { console.log('refused', String(e).split(':')[0], kept.length * 64 <= 2048 + 640); }"
    )
    result = await engine.execute(code, "js", cache="off")
    refused = result.output.startswith("refused RangeError true")
    died = not result.success and result.error is not None and "out of memory" in result.error.message.lower()
    assert refused or died, result
    after = await engine.execute("console.log('next ok')", "js", cache="off")
    assert after.output == "next ok\n"


async def test_deno_webassembly_memory_is_bounded_by_the_memory_limit(engine: CodeMode) -> None:
    code = (
        "const memory = new WebAssembly.Memory({ initial: 1, maximum: 65536 });\nlet mb = 0;\n"
        "try { while (true) { memory.grow(1024); mb += 64; new Uint8Array(memory.buffer).fill(1); } }\n"
        "catch (e) { console.log('refused', String(e).split(':')[0], mb < 4000); }"
    )
    result = await engine.execute(code, "js", cache="off")
    died = not result.success and result.error is not None
    assert result.output.startswith("refused RangeError true") or died, result


async def test_deno_cannot_fill_the_disk_beyond_its_workspace(engine: CodeMode) -> None:
    code = (
        "const chunk = new Uint8Array(16 * 1024 * 1024);\nlet mb = 0;\n"
        "try { const f = Deno.openSync('big.bin', { write: true, create: true });"
        " while (mb < 4096) { f.writeSync(chunk); mb += 16; } console.log('wrote', mb); }\n"
        "catch (e) { console.log('refused', e.name, mb <= 256 + 16); }"
    )
    result = await engine.execute(code, "js", cache="off", timeout_ms=60_000)
    assert result.output.startswith("refused") and result.output.strip().endswith("true"), result
    after = await engine.execute("console.log([...Deno.readDirSync('.')].length)", "js", cache="off")
    assert after.output == "0\n"


FORK_AND_FILL = """
import os
import time
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray(300 * 1024 * 1024)
            for i in range(0, len(block), 4096):
                block[i] = 1
        except MemoryError:
            os._exit(3)
        time.sleep(3)  # hold it: the four must be alive together, not fill one after another under load
        os._exit(0)
    children.append(pid)
statuses = [os.waitpid(pid, 0)[1] for pid in children]
killed = sum(1 for s in statuses if os.WIFSIGNALED(s) and os.WTERMSIG(s) == 9)
print(killed, "killed", sum(1 for s in statuses if os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0), "filled")
"""


async def test_the_memory_limit_covers_every_process_a_run_forks(tmp_path: Path) -> None:
    config = make_config({}, workspace_dir=tmp_path / "runs", limit_memory_mb=512, pool_size=0, cpython_pool_size=1)
    async with CodeMode(config) as cm:
        sandbox = cm.sandbox
        if not isinstance(sandbox, BwrapSandbox) or sandbox.cgroups is None:
            pytest.skip("no memory cgroup can be made on this host: the limit is per process (SECURITY.md)")
        assert "memory cgroup per worker" in sandbox.describe()["memory"]
        result = await cm.execute(FORK_AND_FILL, runner="cpython", cache="off", timeout_ms=30_000)
        # Each child alone is within the 512 MB rlimit; four together are not, and the cgroup says no.
        assert result.success, result.error
        killed, filled = int(result.output.split()[0]), int(result.output.split()[2])
        assert killed >= 2 and filled <= 2, result.output
        after = await cm.execute("print('next ok')", runner="cpython", cache="off")
        assert after.output == "next ok\n"


async def test_pyodide_memory_is_bounded(engine: CodeMode) -> None:
    code = "try:\n    block = bytearray(3 * 1024**3)\n    print('allocated')\nexcept MemoryError:\n    print('refused')"
    result = await engine.execute(code, runner="pyodide", cache="off")
    assert result.output == "refused\n" or not result.success, result
    after = await engine.execute("print('next ok')", runner="pyodide", cache="off")
    assert after.output == "next ok\n"


async def test_pyodide_cannot_fill_the_disk_beyond_its_workspace(engine: CodeMode) -> None:
    code = (
        "import os\nchunk = b'x' * (16 * 1024 * 1024)\nwritten = 0\n"
        "try:\n    with open('/workspace/big.bin', 'wb') as f:\n        while written < 4096:\n"
        "            f.write(chunk)\n            f.flush()\n            written += 16\n    print('wrote', written)\n"
        "except OSError as e:\n    print('refused', e.errno, written <= 256 + 16)"
    )
    result = await engine.execute(code, runner="pyodide", cache="off", timeout_ms=60_000)
    refused = result.output.startswith("refused") and result.output.strip().endswith("True")
    limited = result.error is not None and any(
        text in result.error.message for text in ("File too large", "No space left")
    )  # Pyodide's file system may end the interpreter instead of raising
    assert refused or limited, result
    after = await engine.execute("import os\nprint(os.listdir('/workspace'))", runner="pyodide", cache="off")
    assert after.output == "[]\n", after


async def test_a_run_is_what_the_kernel_kills_first_and_yields_the_cpu_to_the_server(engine: CodeMode) -> None:
    code = "import os\nprint(open('/proc/self/oom_score_adj').read().strip(), os.nice(0))"
    result = await engine.execute(code, runner="cpython", cache="off")
    assert result.output == "1000 10\n", result
    undo = "import os\ntry:\n    os.nice(-10)\nexcept PermissionError as e:\n    print('refused', e.errno)"
    result = await engine.execute(undo, runner="cpython", cache="off")
    assert result.output == "refused 1\n", result  # EPERM: a run cannot take its priority back
