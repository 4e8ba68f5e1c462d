"""Admission control with real runs: the cap holds, the queue orders and bounds, busy is answered at once,
per-client shares hold, the memory budget defers a run, and a cancelled queued run leaves at once."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_code_mode.engine import CodeMode, RunProgress, RunResult
from mcp_code_mode.errors import ServerBusy
from mcp_code_mode.presentation import execution_limits

from .conftest import make_config

pytestmark = pytest.mark.anyio

SPAN = "import time\nstart = time.time()\ntime.sleep({seconds})\n[start, time.time()]"


@asynccontextmanager
async def engine_with(tmp_path: Path, **settings: Any) -> AsyncGenerator[CodeMode]:
    config = make_config({}, workspace_dir=tmp_path / "runs", pool_size=1, cpython_pool_size=2, **settings)
    async with CodeMode(config) as cm:
        yield cm


def most_at_once(spans: list[list[float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


async def run_all(cm: CodeMode, codes: list[tuple[str, str]]) -> list[RunResult | ServerBusy]:
    results: list[RunResult | ServerBusy | None] = [None] * len(codes)

    async def one(i: int, client: str, code: str) -> None:
        try:
            results[i] = await cm.execute(code, runner="cpython", cache="off", client=client)
        except ServerBusy as exc:
            results[i] = exc

    async with anyio.create_task_group() as tg:
        for i, (client, code) in enumerate(codes):
            tg.start_soon(one, i, client, code)
            await anyio.sleep(0.01)  # arrival order
    return [r for r in results if r is not None]


async def test_the_cap_on_concurrent_runs_holds(tmp_path: Path) -> None:
    async with engine_with(tmp_path, max_concurrent_runs=2, max_runs_per_client=2) as cm:
        with anyio.fail_after(60):
            results = await run_all(cm, [(client, SPAN.format(seconds=0.6)) for client in "abcde"])
        spans = [r.return_value for r in results if isinstance(r, RunResult)]
        assert len(spans) == 5 and all(isinstance(r, RunResult) and r.success for r in results)
        assert most_at_once(spans) == 2
        assert execution_limits(cm)["admission"]["maxConcurrentRuns"] == 2


async def test_a_full_queue_answers_busy_at_once_with_the_load(tmp_path: Path) -> None:
    async with engine_with(tmp_path, max_concurrent_runs=1, max_queued_runs=1, max_runs_per_client=3) as cm:
        started = time.monotonic()
        busy_after: list[float] = []

        async def third() -> None:
            await anyio.sleep(0.3)
            with pytest.raises(ServerBusy, match=r"the queue is full; 1 of 1 runs running, 1 of 1 queued"):
                await cm.execute("1", runner="cpython", cache="off", client="a")
            busy_after.append(time.monotonic() - started)

        results: list[RunResult | ServerBusy] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(third)
                results = await run_all(cm, [("a", SPAN.format(seconds=1.5))] * 2)
        assert all(isinstance(r, RunResult) and r.success for r in results)
        assert busy_after and busy_after[0] < 1.2, "busy must come at once, not after a run ended"
        assert cm.admission.refused == 1


async def test_a_greedy_client_cannot_keep_a_polite_one_waiting(tmp_path: Path) -> None:
    async with engine_with(tmp_path, max_concurrent_runs=2, max_runs_per_client=1, max_queued_runs=2) as cm:
        polite_waited: list[float] = []

        async def polite() -> None:
            await anyio.sleep(0.4)  # the greedy client's runs are all in by now
            asked = time.time()
            result = await cm.execute(SPAN.format(seconds=0.1), runner="cpython", cache="off", client="polite")
            polite_waited.append(result.return_value[0] - asked)

        greedy: list[RunResult | ServerBusy] = []
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(polite)
                greedy = await run_all(cm, [("greedy", SPAN.format(seconds=1.5))] * 3)
        # Its share is one slot of two and so one of the two queue places: the third is refused, the other
        # two run one at a time.
        assert sum(isinstance(r, ServerBusy) for r in greedy) == 1
        spans = [r.return_value for r in greedy if isinstance(r, RunResult)]
        assert len(spans) == 2 and most_at_once(spans) == 1
        assert polite_waited and polite_waited[0] < 1.0, f"the polite client waited {polite_waited}"


async def test_the_memory_budget_defers_a_run_that_would_pass_it(tmp_path: Path) -> None:
    settings = {"limit_memory_mb": 256, "memory_budget_mb": 384, "max_concurrent_runs": 4, "max_runs_per_client": 4}
    async with engine_with(tmp_path, **settings) as cm:
        with anyio.fail_after(60):
            results = await run_all(cm, [("a", SPAN.format(seconds=0.5))] * 2)
        spans = [r.return_value for r in results if isinstance(r, RunResult)]
        assert len(spans) == 2 and most_at_once(spans) == 1  # 2 x 256 MB > 384 MB: one waits
        assert execution_limits(cm)["admission"]["memoryBudgetMB"] == 384


async def test_a_run_that_waits_too_long_in_the_queue_is_told_so(tmp_path: Path) -> None:
    async with engine_with(tmp_path, max_concurrent_runs=1, queue_timeout_ms=300, max_runs_per_client=2) as cm:
        with anyio.fail_after(60):
            results = await run_all(cm, [("a", SPAN.format(seconds=1.5)), ("b", "1")])
        assert isinstance(results[0], RunResult) and results[0].success
        assert isinstance(results[1], ServerBusy) and "CODE_MODE_QUEUE_TIMEOUT_MS" in str(results[1])


async def test_a_cancelled_queued_run_leaves_the_queue_at_once_and_progress_says_how_many_are_ahead(
    tmp_path: Path,
) -> None:
    async with engine_with(tmp_path, max_concurrent_runs=1, max_runs_per_client=3) as cm:
        reports: list[RunProgress] = []
        queued = anyio.Event()

        async def on_progress(progress: RunProgress) -> None:
            reports.append(progress)
            if progress.queued == 1:
                queued.set()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: cm.execute(SPAN.format(seconds=2), runner="cpython", cache="off", client="a"))
                await anyio.sleep(0.3)
                tg.start_soon(lambda: cm.execute("1", runner="cpython", cache="off", client="b"))
                await anyio.sleep(0.1)
                async with anyio.create_task_group() as third:
                    third.start_soon(
                        lambda: cm.execute("1", runner="cpython", cache="off", client="c", on_progress=on_progress)
                    )
                    await queued.wait()
                    assert cm.admission.load()["queued"] == 2
                    third.cancel_scope.cancel()
                assert cm.admission.load()["queued"] == 1  # at once: only b's run waits now
                assert cm.admission.load()["running"] == 1
                tg.cancel_scope.cancel()
        assert reports[0].queued == 1  # one run (b's) ahead of it
        assert cm.admission.load()["queued"] == 0 and cm.admission.load()["running"] == 0


async def test_limits_and_search_answer_while_every_slot_runs_a_cpu_loop(tmp_path: Path) -> None:
    from mcp import Client

    from mcp_code_mode.server import build_server

    async with engine_with(tmp_path, max_concurrent_runs=2, max_runs_per_client=2) as cm:
        async with Client(build_server(cm)) as client:
            times: list[float] = []

            async def spin(client_name: str) -> None:
                await cm.execute(
                    "while True:\n    pass", runner="cpython", cache="off", timeout_ms=4000, client=client_name
                )

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(spin, "a")
                    tg.start_soon(spin, "b")
                    while cm.admission.load()["running"] < 2:
                        await anyio.sleep(0.01)
                    await anyio.sleep(0.5)  # both loops are burning their cores now
                    for tool, arguments in [
                        ("get_execution_limits", {}),
                        ("search_tools", {"query": "read a file"}),
                    ] * 5:
                        asked = time.perf_counter()
                        answer = await client.call_tool(tool, arguments)
                        times.append(time.perf_counter() - asked)
                        assert not answer.is_error, answer
                    assert cm.admission.load()["running"] == 2
                    tg.cancel_scope.cancel()
            times.sort()
            assert times[len(times) // 2] < 0.1, f"the tools took {times} s while the slots were busy"


async def test_over_mcp_a_run_with_no_room_is_a_server_busy_result_with_the_load(tmp_path: Path) -> None:
    from mcp import Client

    from mcp_code_mode.server import build_server

    async with engine_with(tmp_path, max_concurrent_runs=1, max_queued_runs=0) as cm:
        async with Client(build_server(cm)) as client:
            answer, waited = None, 0.0
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(
                        lambda: cm.execute(SPAN.format(seconds=3), runner="cpython", cache="off", client="other")
                    )
                    while cm.admission.load()["running"] < 1:
                        await anyio.sleep(0.01)
                    asked = time.perf_counter()
                    answer = await client.call_tool("execute_code", {"language": "python", "code": "1"})
                    waited = time.perf_counter() - asked
                    tg.cancel_scope.cancel()
                assert answer is not None
                structured = answer.structured_content or {}
                assert answer.is_error and structured.get("success") is False
                assert structured["error"]["type"] == "ServerBusy"
                assert "the queue is full; 1 of 1 runs running, 0 of 0 queued" in structured["error"]["message"]
                assert waited < 1.0
