"""The default Python runner's first worker started before the engine (``runners._early``, what ``serve`` does).

The engine's pool adopts it in place of its first start; a worker nobody claims is killed with its sandbox
released; one that dies before it is adopted is replaced by a start of the pool's own.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.runners._early import early_kind, start_early
from mcp_code_mode.runners._zygote import ZygoteRunner
from mcp_code_mode.sandbox import BwrapSandbox, detect_sandbox

from ..conftest import alive, make_config

pytestmark = pytest.mark.anyio


def test_only_the_default_eager_start_of_a_zygote_runner_starts_early(tmp_path: Path) -> None:
    kinds = {
        (eager, runner): early_kind(make_config({}, eager_runners=eager, python_runner=runner).settings)
        for eager in ("default", "none", "all", "local")
        for runner in (None, "local", "cpython", "pyodide")
    }
    assert kinds[("default", None)] == "local"
    assert kinds[("default", "local")] == "local"
    assert kinds[("default", "cpython")] == "cpython"
    assert kinds[("default", "pyodide")] is None
    assert all(kind is None for (eager, _), kind in kinds.items() if eager != "default")


@pytest.mark.parametrize("kind", ["local", "cpython"])
async def test_the_pool_adopts_the_worker_started_early_and_runs_in_it(tmp_path: Path, kind: str) -> None:
    config = make_config({}, workspace_dir=tmp_path / "runs", python_runner=kind)
    sandbox = detect_sandbox(config.settings)
    early = await start_early(config.settings, sandbox)
    assert early is not None and early.kind == kind
    pid = early.worker.process.pid
    async with CodeMode(config, sandbox=sandbox, early=early) as cm:
        runner = cm.runners[kind]
        assert isinstance(runner, ZygoteRunner)
        await cm.ready([kind])
        pool = runner.workers.pool
        assert [w.process.pid for w in pool.idle_workers] == [pid]
        result = await cm.execute("print(6 * 7)", cache="off")
        assert result.success, result.error
        assert result.output == "42\n"
        await cm.ready([kind])  # the zygote back from its run
        assert [w.process.pid for w in pool.idle_workers] == [pid]  # a zygote serves run after run
        assert pool.spawned == 1, "the pool started a worker of its own besides the adopted one"
    assert not alive(pid)


async def test_a_worker_nobody_claims_is_killed_and_its_uid_given_back(tmp_path: Path) -> None:
    started = make_config({}, workspace_dir=tmp_path / "runs")
    sandbox = detect_sandbox(started.settings)
    early = await start_early(started.settings, sandbox)
    assert early is not None
    pid, uid = early.worker.process.pid, early.worker.spec.uid
    engine = make_config({}, workspace_dir=tmp_path / "runs", eager_runners="none")  # the engine starts none eagerly
    async with CodeMode(engine, sandbox=sandbox, early=early) as cm:
        assert not alive(pid)
        if isinstance(sandbox, BwrapSandbox):
            assert uid not in sandbox.uids.held, "the unclaimed worker's uid slot is still held"
        assert (await cm.execute("print(1)", cache="off")).success


async def test_a_worker_that_dies_before_it_is_adopted_is_replaced(tmp_path: Path) -> None:
    config = make_config({}, workspace_dir=tmp_path / "runs")
    sandbox = detect_sandbox(config.settings)
    early = await start_early(config.settings, sandbox)
    assert early is not None
    os.killpg(early.worker.process.pid, signal.SIGKILL)
    with anyio.fail_after(10):
        await early.worker.process.wait()
    async with CodeMode(config, sandbox=sandbox, early=early) as cm:
        await cm.ready(["local"])
        result = await cm.execute("print(1)", cache="off")
        assert result.success, result.error
        runner = cm.runners["local"]
        assert isinstance(runner, ZygoteRunner)
        assert early.worker.process.pid not in [w.process.pid for w in runner.workers.pool.idle_workers]
