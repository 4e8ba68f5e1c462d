#!/usr/bin/env python3
"""Latency of the deno runner through the engine, next to the local (Python) runner.

    .venv/bin/python bench/bench_deno_latency.py [--runs 40]

Prints medians (milliseconds, wall clock around ``CodeMode.execute``) of:
- ``warm``: a trivial script (``console.log(1)`` / ``print(1)``) when a warm worker is waiting;
- ``back-to-back``: the same script run again as soon as the previous one returned (the deno runner
  starts one process per run, so this shows whether the pool keeps up);
- ``typescript``: a small TypeScript script with an interface, when a warm worker is waiting;
- ``100 tool calls``: one script making 100 sequential calls to the fixture server's ``add``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from mcp_code_mode.config import CodeModeConfig, Settings
from mcp_code_mode.engine import CodeMode

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"

TS = "interface P { x: number; y: number }\nconst p: P = { x: 1, y: 2 };\nconsole.log(p.x + p.y);"
JS_CALLS = "let s = 0;\nfor (let i = 0; i < 100; i++) s += (await fixture.add({ a: i, b: 1 })).result;\nconsole.log(s);"
PY_CALLS = "s = 0\nfor i in range(100):\n    s += fixture.add(a=i, b=1)['result']\nprint(s)"


async def timed(cm: CodeMode, code: str, language: str) -> float:
    started = time.perf_counter()
    result = await cm.execute(code, language)
    elapsed = (time.perf_counter() - started) * 1000
    if not result.success:
        raise SystemExit(f"{language} run failed: {result.error}")
    return elapsed


async def wait_warm(cm: CodeMode, runner: str, count: int) -> None:
    pool = cm.runners[runner].pool  # type: ignore[attr-defined]  # ProcessRunner.pool
    with anyio.fail_after(60):
        while pool.warm < count:
            await anyio.sleep(0.01)


async def series(runs: int, measure: Callable[[], Awaitable[float]]) -> float:
    return statistics.median([await measure() for _ in range(runs)])


async def main(runs: int) -> None:
    settings = Settings(pool_size=2)
    servers = {"fixture": {"command": sys.executable, "args": [str(FIXTURE)]}}
    config = CodeModeConfig.from_servers(servers, settings=settings, env=dict(os.environ))
    async with CodeMode(config) as cm:
        rows: list[tuple[str, str, float]] = []
        for runner, language, trivial in (("deno", "javascript", "console.log(1)"), ("local", "python", "print(1)")):
            await wait_warm(cm, runner, 2)
            await timed(cm, trivial, language)  # first run: module caches

            async def warm(runner: str = runner, language: str = language, trivial: str = trivial) -> float:
                await wait_warm(cm, runner, 1)
                return await timed(cm, trivial, language)

            rows.append((runner, "warm", await series(runs, warm)))
            await wait_warm(cm, runner, 2)
            rows.append(
                (runner, "back-to-back", await series(runs, lambda c=trivial, lang=language: timed(cm, c, lang)))
            )
            if runner == "deno":

                async def typescript() -> float:
                    await wait_warm(cm, "deno", 1)
                    return await timed(cm, TS, "typescript")

                rows.append((runner, "typescript", await series(runs, typescript)))
        # Tool calls are dominated by the downstream server: alternate the runners so that both see the same load.
        calls: dict[str, list[float]] = {"deno": [], "local": []}
        for _ in range(max(5, runs // 3)):
            for runner, language, code in (("deno", "javascript", JS_CALLS), ("local", "python", PY_CALLS)):
                await wait_warm(cm, runner, 1)
                calls[runner].append(await timed(cm, code, language))
        rows.extend((runner, "100 tool calls", statistics.median(samples)) for runner, samples in calls.items())
        print(f"{'runner':8} {'case':16} {'median ms':>10}")
        for runner, case, median in sorted(rows, key=lambda row: row[0]):
            print(f"{runner:8} {case:16} {median:10.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    anyio.run(main, parser.parse_args().runs)
