"""The other stages with fakes: the cache (a real SQLite file in a temporary directory), the environment,
progress reporting and the stub book."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_code_mode.bridge import FileEntry, RunResult
from mcp_code_mode.cache import ScriptCache, ToolUse
from mcp_code_mode.engine._caching import CacheStage, replayed
from mcp_code_mode.engine._environment import prepare
from mcp_code_mode.engine._progress import RunProgress, reporting
from mcp_code_mode.engine._request import RunPlan
from mcp_code_mode.errors import PackageError
from mcp_code_mode.runners import StubBundle

from .fakes import FakeRunner, info

pytestmark = pytest.mark.anyio


def a_plan(code: str = "print(1)", *, mode: str = "auto", runner: FakeRunner | None = None, **fields: Any) -> RunPlan:
    values: dict[str, Any] = {
        "code": code,
        "language": "python",
        "runner": runner or FakeRunner(info("fake")),
        "mode": mode,
        "timeout_ms": 1000,
        "network": False,
        "requirements": (),
        "package_imports": (),
        **fields,
    }
    return RunPlan(**values)


BUNDLE = StubBundle("def tool(): ...", 1, ("srv",))


@pytest.fixture
def stage(tmp_path: Path) -> Any:
    scripts = ScriptCache(tmp_path, ttl=3600, embedder=None, current_schema=lambda s, t: None)
    scripts.open()
    yield CacheStage(scripts)
    scripts.close()


async def test_a_side_effect_free_run_is_replayed_and_one_with_tool_calls_is_not(stage: CacheStage) -> None:
    plain = stage.key(a_plan("print(1)"), BUNDLE)
    await stage.store(plain, RunResult(success=True, output="1\n"), [], None)
    stored = await stage.lookup(plain, time.perf_counter())
    assert stored is not None
    hit = replayed(stored, time.perf_counter())
    assert hit.cached and hit.output == "1\n" and hit.runner == "fake"
    assert await stage.lookup(plain, time.perf_counter(), readable=lambda s: False) is None  # another key's tokens

    calls = stage.key(a_plan("srv.tool()"), BUNDLE)
    await stage.store(calls, RunResult(success=True, tool_calls=1), [ToolUse("srv", "tool", "h")], None)
    assert await stage.lookup(calls, time.perf_counter()) is None


async def test_a_run_that_left_files_is_not_replayed_but_reuse_replays_it(stage: CacheStage) -> None:
    keyed = stage.key(a_plan("open('a','w')"), BUNDLE)
    await stage.store(keyed, RunResult(success=True, files=[FileEntry("a", 0)]), [], None)
    assert await stage.lookup(keyed, time.perf_counter()) is None
    reuse = stage.key(a_plan("open('a','w')", mode="reuse"), BUNDLE)
    stored = await stage.lookup(reuse, time.perf_counter())
    assert stored is not None and replayed(stored, time.perf_counter()).files == [FileEntry("a", 0)]


async def test_the_key_changes_with_the_stubs_and_the_runner(stage: CacheStage) -> None:
    base = stage.key(a_plan(), BUNDLE).key
    assert stage.key(a_plan(), StubBundle("def other(): ...", 2, ("srv",))).key != base
    assert stage.key(a_plan(runner=FakeRunner(info("another"))), BUNDLE).key != base
    assert stage.key(a_plan(network=True), BUNDLE).key != base


async def test_off_neither_reads_nor_writes(stage: CacheStage) -> None:
    keyed = stage.key(a_plan(mode="off"), BUNDLE)
    await stage.store(keyed, RunResult(success=True), [], None)
    assert stage.scripts.stats(tenant="default")["scripts"] == 0
    assert await stage.lookup(stage.key(a_plan(), BUNDLE), time.perf_counter()) is None


class FakeEnvironments:
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.asked: list[tuple[str, list[str]]] = []

    async def ensure(self, runner: str, requirements: list[str]) -> Any:
        self.asked.append((runner, requirements))
        await anyio.sleep(0.02)
        if self.fail:
            raise PackageError("no such version")
        from mcp_code_mode.packages import Environment

        return Environment("k", Path("/env"), tuple(requirements), installed=True, seconds=0.5)


async def test_the_environment_stage_installs_only_for_environment_runners() -> None:
    envs = FakeEnvironments(fail=False)
    self_installing = a_plan(runner=FakeRunner(info("js", packages="self")), requirements=("axios",))
    assert (await prepare(self_installing, envs)).environment is None  # pyright: ignore[reportArgumentType]
    assert envs.asked == []
    prepared = await prepare(a_plan(requirements=("six",)), envs)  # pyright: ignore[reportArgumentType]
    assert prepared.environment is not None and prepared.install_ms == 500
    assert envs.asked == [("fake", ["six"])]


async def test_a_failed_install_says_why_and_how_long_it_took() -> None:
    prepared = await prepare(a_plan(requirements=("six",)), FakeEnvironments(fail=True))  # pyright: ignore[reportArgumentType]
    assert prepared.error == "no such version"
    assert prepared.install_ms >= 15


async def test_progress_is_reported_at_the_start_and_at_each_interval_with_rising_elapsed_time() -> None:
    reports: list[RunProgress] = []

    async def on_progress(progress: RunProgress) -> None:
        reports.append(progress)

    async def work() -> str:
        await anyio.sleep(0.35)
        return "done"

    started = time.perf_counter()
    assert await reporting(work, on_progress, lambda: 3, started=started, interval=0.1) == "done"
    assert 3 <= len(reports) <= 5
    assert all(b.elapsed > a.elapsed for a, b in zip(reports, reports[1:], strict=False))
    assert all(r.tool_calls == 3 and r.queued is None for r in reports)


async def test_an_error_of_the_run_is_raised_as_itself_not_in_a_group() -> None:
    async def work() -> str:
        raise PackageError("bad")

    async def on_progress(progress: RunProgress) -> None:
        pass

    with pytest.raises(PackageError, match="bad"):
        await reporting(work, on_progress, lambda: 0, started=time.perf_counter(), interval=0.1)
