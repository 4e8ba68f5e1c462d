"""``WorkerPool``'s start delay: a replacement waits ``spawn_delay``; a start a run waits for does not.

The workers are real processes (a Python one-liner that says ``ready`` and waits for its stdin to close);
what is measured is when each was started, against the delay, which is made long (2 s) so that a start
that waited for it cannot be mistaken for one that did not on a loaded machine.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.runners._pool import WorkerPool
from mcp_code_mode.sandbox import Profile, SandboxSpec

DELAY = 2.0
WORKER = 'import sys; print(\'{"op": "ready"}\', flush=True); sys.stdin.read()'

pytestmark = pytest.mark.anyio


def _pool(started: list[float]) -> WorkerPool:
    def launcher(profile: Profile) -> SandboxSpec:
        started.append(time.monotonic())
        return SandboxSpec(argv=[sys.executable, "-I", "-c", WORKER], env={}, cwd=Path("/"), workspace=None)

    pool = WorkerPool(launcher, size=1, label="test")
    pool.spawn_delay = DELAY
    return pool


async def test_a_pools_first_start_and_a_waited_for_start_skip_the_delay() -> None:
    started: list[float] = []
    pool = _pool(started)
    async with anyio.create_task_group() as tg:
        begun = time.monotonic()
        await pool.start(tg)
        worker = await pool.acquire()  # the first run waits for the pool's first start
        assert started[0] - begun < DELAY / 2, "the first start waited for the replacement delay"
        pool.release(worker, clean=False)  # a one-run worker: killed, and a replacement is due
        await anyio.sleep(0.2)
        assert len(started) == 1, "the replacement did not wait for its delay"
        asked = time.monotonic()
        worker = await pool.acquire()  # a run that waits for the replacement cuts its delay short
        assert len(started) == 2
        assert started[1] - asked < DELAY / 2, "a run waited for the whole replacement delay"
        pool.release(worker, clean=False)
        await pool.aclose()
        tg.cancel_scope.cancel()
