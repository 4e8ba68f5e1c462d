#!/usr/bin/env python3
"""9. Load: 10, 50 and 200 concurrent clients issuing runs, against admission control.

    .venv/bin/python bench/load.py [--levels 10 50 200] [--runs 8 3 2]

One engine (``CodeMode``) in this process, no downstream servers, with the admission settings a user
gets by default (derived from the host: they are printed). A level is N clients started at once, each
a task with its own ``client=`` name issuing its runs one after another (as an agent does); client k
starts at place k of the mix, so every kind of run is in flight at once: ``print(1)``, a 0.5 s
``time.sleep``, a CPU loop of 0.3 s of CPU time and a script that allocates and touches a 200 MB
bytearray on the cpython runner, and ``print(1)`` and the sleep on the local runner; all with
``cache="off"``. A client that is refused (``ServerBusy``) goes on to its next run: no retries.

Every run ends as exactly one of: completed (with the expected output), timed out (``TimeoutError``),
refused as busy, or another failure (a wrong output, a failed run, any other exception); the last must
stay 0. Latency is the whole ``execute`` of a completed run; queue wait is from the call to the run's
start (its first progress report that is no longer ``queued``). While a level runs, this process and
its descendants (the executor: the engine and its workers; the clients are tasks in this process) are
sampled every 0.2 s for their summed PSS (``/proc/<pid>/smaps_rollup``), and ``/proc/meminfo`` for
MemAvailable. After the levels, a ``print(1)`` must succeed and ``execution_limits()`` must answer with
no run left running or queued.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Section,
    descendants,
    engine,
    median,
    memory_kib,
    ms,
    parser,
    percentile,
    quiesce,
    quiet_logs,
    run_section,
    wait_warm,
)

SCRIPTS = {
    "print": ("print(1)", "1\n"),
    "sleep": ("import time\ntime.sleep(0.5)\nprint('slept')", "slept\n"),
    "cpu": (
        "import time\nend = time.process_time() + 0.3\nn = 0\nwhile time.process_time() < end:\n"
        "    n += 1\nprint('looped')",
        "looped\n",
    ),
    "memory": (
        "block = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(block), 4096):\n    block[i] = 1\n"
        "print(len(block) // (1024 * 1024))",
        "200\n",
    ),
}
"""Kind -> (script, the output it must print)."""
MIX = [
    ("print", "cpython"),
    ("sleep", "cpython"),
    ("cpu", "cpython"),
    ("memory", "cpython"),
    ("print", "local"),
    ("sleep", "local"),
]
TIMEOUT_MS = 10_000
"""Each run's own timeout (it starts once the run has its slot)."""
SAMPLE_EVERY = 0.2


@dataclass
class Level:
    clients: int
    runs_per_client: int
    outcomes: Counter[str] = field(default_factory=Counter[str])
    refusals: Counter[str] = field(default_factory=Counter[str])
    latencies: list[float] = field(default_factory=list[float])
    """Milliseconds of the whole ``execute`` of each completed run."""
    waits: list[float] = field(default_factory=list[float])
    """Milliseconds from the call to the run's start, of each run that got a slot."""
    refusal_times: list[float] = field(default_factory=list[float])
    """Milliseconds from the call to its ``ServerBusy``."""
    problems: list[str] = field(default_factory=list[str])
    wall: float = 0.0
    peak_pss_kib: int = 0
    min_available_kib: int = 0
    peak_running: int = 0
    peak_queued: int = 0
    refused_by_server: int = 0
    """The server's ``refused`` counter's increase over the level."""


def tree_pss_kib() -> int:
    """Summed PSS of this process and its descendants."""
    return sum(memory_kib(pid)[1] for pid in [os.getpid(), *descendants(os.getpid())])


def mem_available_kib() -> int:
    with open("/proc/meminfo", encoding="utf-8") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def refusal_reason(message: str) -> str:
    if "queue is full" in message:
        return "queue full"
    if "this client already has" in message:
        return "client's share"
    if "waited" in message:
        return "queue timeout"
    return "other"


async def one_run(cm: Any, level: Level, client: str, kind: str, runner: str) -> None:
    from mcp_code_mode.engine import RunProgress
    from mcp_code_mode.errors import CodeModeError, ServerBusy

    code, expected = SCRIPTS[kind]
    started = time.perf_counter()
    began: list[float] = []

    async def progress(report: RunProgress) -> None:
        if report.queued is None and not began:
            began.append(time.perf_counter())

    try:
        result = await cm.execute(
            code, runner=runner, cache="off", timeout_ms=TIMEOUT_MS, on_progress=progress, client=client
        )
    except ServerBusy as exc:
        level.refusal_times.append((time.perf_counter() - started) * 1000)
        level.outcomes["refused"] += 1
        level.refusals[refusal_reason(str(exc))] += 1
        return
    except CodeModeError as exc:  # counted as lost: the run neither ran nor was refused as busy
        level.outcomes["other"] += 1
        level.problems.append(f"{client} {kind}/{runner}: {type(exc).__name__}: {exc}"[:300])
        return
    elapsed = (time.perf_counter() - started) * 1000
    if began:
        level.waits.append((began[0] - started) * 1000)
    if result.success and result.output == expected:
        level.outcomes["completed"] += 1
        level.latencies.append(elapsed)
    elif not result.success and result.error is not None and result.error.type == "TimeoutError":
        level.outcomes["timed out"] += 1
    else:
        level.outcomes["other"] += 1
        detail = result.error.model_dump_json() if result.error else repr(result.output)
        level.problems.append(f"{client} {kind}/{runner}: {detail}"[:300])


async def run_level(cm: Any, level: Level) -> None:
    """N clients at once, each issuing its runs one after another; samples the tree meanwhile."""
    done = anyio.Event()
    refused_before = cm.admission.refused
    level.min_available_kib = mem_available_kib()

    async def sample() -> None:
        while not done.is_set():
            load = cm.admission.load()
            level.peak_running = max(level.peak_running, load["running"])
            level.peak_queued = max(level.peak_queued, load["queued"])
            pss, available = await anyio.to_thread.run_sync(lambda: (tree_pss_kib(), mem_available_kib()))
            level.peak_pss_kib = max(level.peak_pss_kib, pss)
            level.min_available_kib = min(level.min_available_kib, available)
            with anyio.move_on_after(SAMPLE_EVERY):
                await done.wait()

    async def client(k: int) -> None:
        for i in range(level.runs_per_client):
            kind, runner = MIX[(k + i) % len(MIX)]
            await one_run(cm, level, f"client-{level.clients}-{k}", kind, runner)

    started = time.perf_counter()
    async with anyio.create_task_group() as sampling:
        sampling.start_soon(sample)
        async with anyio.create_task_group() as clients:
            for k in range(level.clients):
                clients.start_soon(client, k)
        level.wall = time.perf_counter() - started
        done.set()
    level.refused_by_server = cm.admission.refused - refused_before


def mib(kib: float) -> str:
    return f"{kib / 1024:,.0f} MiB"


async def measure(args: argparse.Namespace, section: Section) -> None:
    from mcp_code_mode.presentation import execution_limits

    if len(args.levels) != len(args.runs):
        raise SystemExit("--levels and --runs need as many values each")
    levels = [Level(n, runs) for n, runs in zip(args.levels, args.runs, strict=True)]
    alive: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp, quiet_logs():
        cm = engine({}, Path(tmp), pyodide_pool_size=0, cache_embedder="none")
        async with cm:
            limits = execution_limits(cm)["admission"]
            idle_pss = await anyio.to_thread.run_sync(tree_pss_kib)
            for level in levels:
                await wait_warm(cm, "cpython")
                await wait_warm(cm, "local")
                await quiesce(timeout=5)
                await run_level(cm, level)
            with anyio.fail_after(30):
                final = await cm.execute("print(1)", runner="cpython", cache="off", client="final")
                after = execution_limits(cm)["admission"]
            alive = {"output": final.output, "success": final.success, "load": after}
    settings = section.table(
        "Admission settings in force (the defaults, derived from this host: "
        f"{os.cpu_count()} cores, limit_memory_mb {cm.config.settings.limit_memory_mb} per run).",
        ["maxConcurrentRuns", "maxQueuedRuns", "maxRunsPerClient", "memoryBudgetMB", "queueTimeoutMs"],
    )
    settings.rows.append(
        [
            str(limits[name])
            for name in ("maxConcurrentRuns", "maxQueuedRuns", "maxRunsPerClient", "memoryBudgetMB", "queueTimeoutMs")
        ]
    )
    table = section.table(
        "Per level: N clients at once, each issuing its runs one after another (mix: print, sleep 0.5 s, "
        "0.3 s CPU loop, 200 MB bytearray on cpython; print and sleep on local). Latency of completed runs; "
        "queue wait of runs that got a slot; the longest time a refused call took to get its ServerBusy. "
        "Peak running / queued runs, peak PSS of the executor tree (this process and its workers; "
        f"{mib(idle_pss)} idle before the levels) and minimum host MemAvailable: sampled every {SAMPLE_EVERY:g} s.",
        [
            "clients",
            "runs issued",
            "completed",
            "timed out",
            "refused busy",
            "other failures",
            "wall",
            "throughput",
            "latency p50 / p95",
            "queue wait p50 / p95",
            "refused after (max)",
            "peak running / queued",
            "tree peak PSS",
            "host MemAvailable min",
        ],
    )
    lost = 0
    counted_right = True
    for level in levels:
        issued = level.clients * level.runs_per_client
        accounted = sum(level.outcomes.values())
        lost += level.outcomes["other"] + (issued - accounted)
        counted_right &= level.refused_by_server == level.outcomes["refused"]
        refusals = ", ".join(f"{n} {why}" for why, n in level.refusals.most_common())
        table.rows.append(
            [
                str(level.clients),
                f"{issued} ({level.runs_per_client} per client)",
                str(level.outcomes["completed"]),
                str(level.outcomes["timed out"]),
                str(level.outcomes["refused"]) + (f" ({refusals})" if refusals else ""),
                str(level.outcomes["other"] + issued - accounted),
                f"{level.wall:.1f} s",
                f"{level.outcomes['completed'] / level.wall:.1f} runs/s",
                f"{ms(median(level.latencies), 0)} / {ms(percentile(level.latencies, 0.95), 0)}",
                f"{ms(median(level.waits), 0)} / {ms(percentile(level.waits, 0.95), 0)}",
                ms(max(level.refusal_times, default=math.nan)),
                f"{level.peak_running} / {level.peak_queued}",
                mib(level.peak_pss_kib),
                mib(level.min_available_kib),
            ]
        )
        section.notes.extend(f"{level.clients} clients: lost run: {problem}" for problem in level.problems[:5])
    load = alive.get("load", {})
    is_alive = alive.get("success") is True and alive.get("output") == "1\n"
    drained = load.get("running") == 0 and load.get("queued") == 0
    section.target(
        "nothing lost (other failures == 0)",
        f"{lost} lost; the server's refusal counter "
        + ("matches the refusals seen" if counted_right else "**differs from the refusals seen**"),
        lost == 0 and counted_right,
    )
    section.target(
        "server alive at the end",
        f"print(1) {'succeeded' if is_alive else 'failed'}; execution_limits: "
        f"{load.get('running', '?')} running, {load.get('queued', '?')} queued, {load.get('refused', '?')} refused",
        is_alive and drained,
    )
    section.notes.append(
        f"Each run's timeout is {TIMEOUT_MS / 1000:g} s (from its start, not its call); a refused client does "
        "not retry. The Pyodide pool is off (pyodide_pool_size 0) and nothing is embedded (cache off); the "
        "other pools have their default sizes. The machine has 2 cores shared by the clients, the engine "
        "and its workers."
    )
    if lost or not (is_alive and drained):
        section.failed = f"{lost} runs lost" if lost else "the server was not alive and idle at the end"


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--levels", type=int, nargs="+", default=[10, 50, 200], help="concurrent clients per level")
    cli.add_argument("--runs", type=int, nargs="+", default=[8, 3, 2], help="runs per client, per level")
    section = Section("load", "9. Load", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
