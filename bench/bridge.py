#!/usr/bin/env python3
"""1. Bridge overhead: N tool calls from inside one script, against N direct calls from the host.

    .venv/bin/python bench/bridge.py [--calls 500] [--reps 4] [--runners local cpython pyodide deno]

One engine (``CodeMode``) over the Python fixture server. For each repetition and runner: N direct
``call_tool("fixture", "add")`` from the host through the engine's own pool session (the session the
bridge uses), and one ``execute_code`` whose script makes the same N calls, started when a warm worker
is waiting. The two alternate order from one repetition to the next, and the runners rotate, so that
both sides see the same load. A script's time is the whole ``execute`` (hand-over to the worker, the
calls, the answer). Ratio = median script time / median direct time of the same runner's pairs.
Target <= 1.25 (issue 2). One unmeasured run per runner comes first (module caches, JIT).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    RUNNERS,
    Section,
    engine,
    fixture_entry,
    median,
    ms,
    parser,
    quiet_logs,
    ratio,
    run_section,
    snapshot_exists,
    timed,
    wait_warm,
)

TARGET = 1.25
PY = "s = 0\nfor i in range({n}):\n    s += fixture.add(a=i, b=1)['result']\nprint(s)"
JS = "let s = 0;\nfor (let i = 0; i < {n}; i++) s += (await fixture.add({{ a: i, b: 1 }})).result;\nconsole.log(s);"


def script(runner: str, n: int) -> tuple[str, str]:
    """(language, code) of the N-call script for a runner."""
    return ("javascript", JS.format(n=n)) if runner == "deno" else ("python", PY.format(n=n))


async def run_script(cm: Any, runner: str, n: int) -> float:
    language, code = script(runner, n)
    await wait_warm(cm, runner)
    elapsed, result = await timed(lambda: cm.execute(code, language, runner=runner, cache="off"))
    if not result.success or result.output.strip() != str(n * (n + 1) // 2) or result.tool_calls != n:
        raise SystemExit(f"{runner}: the {n}-call script failed: {result.error} {result.output[:200]!r}")
    return elapsed


async def run_direct(cm: Any, n: int) -> float:
    async def calls() -> int:
        total = 0
        for i in range(n):
            result = await cm.pool.call_tool("fixture", "add", {"a": i, "b": 1})
            total += int((result.structured_content or {})["result"])
        return total

    elapsed, total = await timed(calls)
    if total != n * (n + 1) // 2:
        raise SystemExit(f"direct calls summed to {total}")
    return elapsed


async def measure(args: argparse.Namespace, section: Section) -> None:
    n, runners = args.calls, args.runners
    had_snapshot = snapshot_exists()
    scripts: dict[str, list[float]] = {r: [] for r in runners}
    direct: dict[str, list[float]] = {r: [] for r in runners}
    with tempfile.TemporaryDirectory(prefix="bench-bridge-") as tmp, quiet_logs():
        cm = engine(
            {"fixture": fixture_entry()},
            Path(tmp),
            pool_size=2,
            cpython_pool_size=1,
            pyodide_pool_size=1 if "pyodide" in runners else 0,
            cache_embedder="none",
        )
        async with cm:
            for runner in runners:
                await run_script(cm, runner, 20)
            for rep in range(args.reps):
                order = runners[rep % len(runners) :] + runners[: rep % len(runners)]
                for runner in order:
                    if rep % 2 == 0:
                        direct[runner].append(await run_direct(cm, n))
                        scripts[runner].append(await run_script(cm, runner, n))
                    else:
                        scripts[runner].append(await run_script(cm, runner, n))
                        direct[runner].append(await run_direct(cm, n))
    table = section.table(
        f"{n} calls to the fixture server's `add`, {args.reps} interleaved repetitions (medians).",
        [
            "runner",
            f"{n} calls in one script",
            f"{n} direct calls",
            "ratio",
            "overhead per call",
            "ratio per repetition",
        ],
    )
    for runner in runners:
        s, d = median(scripts[runner]), median(direct[runner])
        paired = [a / b for a, b in zip(scripts[runner], direct[runner], strict=True)]
        pairs = ", ".join(f"{r:.2f}" for r in paired)
        table.rows.append([runner, ms(s), ms(d), ratio(s / d), f"{(s - d) / n * 1000:,.0f} µs", pairs])
        spread = f"{ratio(s / d)} (repetitions {min(paired):.2f}–{max(paired):.2f})"
        section.target(f"bridge ratio <= {TARGET} ({runner})", spread, s / d <= TARGET)
        if min(paired) <= TARGET < max(paired):
            section.notes.append(
                f"{runner}: the repetitions' ratios fall on both sides of the target ({pairs}): on this shared "
                "machine that verdict is within the noise."
            )
    section.notes.append(
        "Direct calls go through the engine's own `ClientSession` to the same fixture server process the "
        "bridge uses; a script's time is the whole `execute` (worker hand-over, calls, answer), with the "
        "cache off. The ratio per repetition (script / the direct batch next to it) shows the noise of a "
        "shared machine."
    )
    if "pyodide" in runners and not had_snapshot:
        section.notes.append("The Pyodide snapshot did not exist before this section: its start made it.")


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--calls", type=int, default=500)
    cli.add_argument("--reps", type=int, default=4)
    cli.add_argument("--runners", nargs="+", default=list(RUNNERS), choices=RUNNERS)
    args = cli.parse_args()
    section = Section("bridge", "1. Bridge overhead", "")
    return run_section(measure, section, args)


if __name__ == "__main__":
    sys.exit(main())
