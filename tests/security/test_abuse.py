"""Abuse ends cleanly: each script ends with a clear error within its timeout + 1 s, and the next run is clean."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from mcp_code_mode.engine import CodeMode

pytestmark = pytest.mark.anyio

TIMEOUT_MS = 5000
"""The timeout of abuses that end by themselves (memory, disk, bridge): generous, on a loaded machine."""
LOOP_TIMEOUT_MS = 1500
"""The timeout of abuses that only the timeout ends."""


@dataclass(frozen=True)
class Abuse:
    name: str
    code: str
    runners: tuple[str, ...]
    errors: tuple[str, ...]
    """Error types that count as the clear error for this abuse."""
    message: str = ""
    """A fragment the error message must contain (empty: any)."""
    timeout_ms: int = TIMEOUT_MS


ABUSES = [
    Abuse("infinite_loop", "while True:\n    pass", ("local", "cpython"), ("TimeoutError",), "", LOOP_TIMEOUT_MS),
    Abuse(
        "sleep_forever", "import time\ntime.sleep(10**6)", ("local", "cpython"), ("TimeoutError",), "", LOOP_TIMEOUT_MS
    ),
    Abuse("memory_bomb_at_once", "x = 'x' * (8 * 1024**3)", ("local", "cpython"), ("MemoryError",)),
    Abuse(
        "memory_bomb_growing",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024**2))",
        ("cpython",),
        ("MemoryError",),
    ),
    Abuse(
        "fork_bomb",
        "import os\nwhile True:\n    os.fork()",
        ("cpython",),
        ("BlockingIOError", "OSError", "TimeoutError", "WorkerDied"),
    ),
    Abuse(
        "thread_bomb",
        "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(60,)).start()",
        ("cpython",),
        ("RuntimeError", "OSError", "BlockingIOError", "TimeoutError"),
    ),
    Abuse("output_flood_100mb", "for i in range(1_000_000):\n    print('x' * 99)", ("cpython",), ()),
    Abuse("output_flood_one_string", "print('x' * 100_000_000)", ("local", "cpython"), ()),
    Abuse(
        "fill_the_workspace_disk",
        "i = 0\nwhile True:\n    with open(f'fill{i}.bin', 'w') as f:\n        f.write('x' * 32 * 1024**2)\n    i += 1",
        ("local", "cpython"),
        ("OSError",),
        "No space left on device",
    ),
    Abuse(
        "one_huge_file",
        "with open('big.bin', 'wb') as f:\n    while True:\n        f.write(b'x' * 1024**2)",
        ("cpython",),
        ("OSError",),
    ),
    Abuse(
        "close_the_bridge",
        "import os\nos.closerange(3, 4096)\nprint('closed')",
        ("cpython",),
        ("WorkerDied",),
        "before the run finished",
    ),
    Abuse(
        "flood_the_bridge_with_garbage",
        "import os\nfor fd in range(3, 64):\n    try:\n"
        "        os.write(fd, b'not json\\n' * 1000)\n    except OSError:\n        pass",
        ("cpython",),
        ("ProtocolError",),
        "malformed",
    ),
    Abuse(
        "flood_the_bridge_without_newlines",
        "import os\nfd = [f for f in range(3, 64) if os.path.exists(f'/proc/self/fd/{f}')]\n"
        "chunk = b'x' * 1024**2\nwhile True:\n    for f in fd:\n        try:\n            os.write(f, chunk)\n"
        "        except OSError:\n            pass",
        ("cpython",),
        ("ProtocolError", "TimeoutError"),
    ),
    Abuse(
        "kill_itself",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        ("cpython",),
        ("WorkerDied",),
        "SIGKILL",
    ),
    Abuse(
        "kill_everything_else_then_hang",
        "import os, signal, time\nos.kill(-1, signal.SIGKILL)\ntime.sleep(60)",
        ("cpython",),
        ("WorkerDied", "TimeoutError"),
    ),
]

CASES = [(abuse, runner) for abuse in ABUSES for runner in abuse.runners]


@pytest.mark.parametrize(("abuse", "runner"), CASES, ids=[f"{a.name}-{r}" for a, r in CASES])
async def test_abuse_ends_with_a_clear_error_and_the_next_run_is_clean(
    attacked: CodeMode, abuse: Abuse, runner: str
) -> None:
    started = time.monotonic()
    result = await attacked.execute(abuse.code, runner=runner, timeout_ms=abuse.timeout_ms)
    elapsed = time.monotonic() - started
    # The run's own time (from its hand-over to its worker, the kill included) is bounded by its timeout; the
    # call may also have waited for a worker to start after the previous abuse cost its worker.
    limit = abuse.timeout_ms / 1000 + 1
    assert result.execution_time < limit * 1000, f"the run took {result.execution_time} ms"
    assert elapsed < limit + 10, f"took {elapsed:.1f} s"
    if abuse.errors:
        assert not result.success
        assert result.error is not None and result.error.type in abuse.errors, result.error
        assert abuse.message in result.error.message
    else:  # a flood: capped, marked, and over quickly
        assert result.truncated
        assert len(result.output) <= attacked.config.settings.max_output_chars
    after = await attacked.execute(
        "import os\nprint(sorted(os.listdir('.')) if 'os' in dir() else 'ok')", runner="cpython"
    )
    assert after.success, after.error
    assert after.output == "[]\n", "the next run must start with an empty workspace"
    local = await attacked.execute("print('local ok')")
    assert local.success and local.output == "local ok\n"
