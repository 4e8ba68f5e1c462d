#!/usr/bin/env python3
"""15. Memory and start-up against the peers: the executor as a fresh clone serves, FastMCP's CodeMode, a warm
pydantic-monty pool, smolagents.

    .venv/bin/python bench/startup.py [--reps 2]

Ours: ``mcp-code-mode serve --config mcp_servers.json`` (the repository's own servers file: the npm filesystem
and memory servers) with the default settings, as a child of a real stdio client. Only the directories
differ from a fresh clone's: the script cache is a new temporary directory, the Pyodide snapshot and
Deno's cache are the benchmarks' (``common.server_env``). A repetition starts it twice or three times:

- spawn → ``initialize`` answered, then at once the default runner's first run (``print(1)``, no
  ``runner`` given, ``cache="off"``): what a client that runs code as soon as it is connected waits;
- spawn → ``initialize`` answered, then the process tree is left to settle (its PSS steady within 2 %
  over a second and under 0.1 s of CPU in it), and its PSS is read (``/proc/<pid>/smaps_rollup``,
  downstream servers' subtrees left out: each child subtree that is no runner's worker); which runners
  had a worker then is read from the tree; then each runner's first run (``print(1)``, ``console.log(1)``),
  one after another once the processes are idle; then the tree's PSS once settled again;
- where the server has ``CODE_MODE_EAGER_RUNNERS`` and a runner with a target for its first run without a
  worker had one at idle (an eager runner), a third start with ``CODE_MODE_EAGER_RUNNERS=none`` measures
  that runner's first run without one.

Whatever the server does when it starts (pools started at once or on first use, downstream servers
connected before or after ``initialize``) is what is measured: nothing is assumed.

In the same repetition, FastMCP's CodeMode proxying the fixture server (``bench/fastmcp_peer.py``): spawn →
``initialize``, its tree's PSS once settled (the fixture server left out), its first ``return 1``, its PSS
settled again. Once per run: a fresh Python process holding a warm ``pydantic_monty.Monty`` pool after 50
``return 1``, and one holding a smolagents ``LocalPythonExecutor`` after 50 ``print(1)`` (``peers.footprint``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    ROOT,
    RUNNERS,
    Section,
    cmdline,
    descendants,
    executor,
    find_child,
    median,
    memory_kib,
    ms,
    parser,
    process_stats,
    process_table,
    quiesce,
    run_section,
    server_env,
    structured,
    timed,
)
from memory import kind
from peers import FASTMCP_NAME, failure_text, fastmcp_code_mode, fastmcp_execute, fastmcp_missing, footprint, scrub

from mcp_code_mode.config import Settings

CONFIG = ROOT / "mcp_servers.json"
IDLE_TARGET_MIB = 150
INITIALIZE_TARGET_MS = 1000.0
DEFAULT_FIRST_TARGET_MS = 100.0
COLD_TARGET_MS = {"local": 150.0, "cpython": 150.0, "deno": 150.0, "pyodide": 800.0}
"""First run of a runner that had no warm worker (issue 22); monty has none."""
_TICK = os.sysconf("SC_CLK_TCK")


def request(runner: str | None) -> dict[str, Any]:
    if runner == "deno":
        return {"language": "javascript", "code": "console.log(1)", "runner": "deno", "cache": "off"}
    return {"language": "python", "code": "print(1)", "cache": "off"} | ({"runner": runner} if runner else {})


def tree(root: int, downstream: Callable[[str], bool]) -> dict[str, Any]:
    """PSS and RSS (KiB) of ``root`` and its children's subtrees, those ``downstream`` says are a downstream
    server's (by their command lines) counted apart; workers per runner (``memory.kind``)."""
    table = process_table()
    rss, pss = memory_kib(root)
    out: dict[str, Any] = {"pss": pss, "rss": rss, "processes": 1, "workers": {}, "excluded_pss": 0, "excluded": []}
    for child in [pid for pid, ppid in table.items() if ppid == root]:
        subtree = [child, *descendants(child, table)]
        commands = " ".join(cmdline(pid) for pid in subtree)
        sizes = [memory_kib(pid) for pid in subtree]
        if downstream(commands):
            out["excluded_pss"] += sum(p for _, p in sizes)
            out["excluded"].append(Path(cmdline(child).split(" ", 1)[0] or "?").name)
            continue
        name = kind(commands)
        out["workers"][name] = out["workers"].get(name, 0) + 1
        out["pss"] += sum(p for _, p in sizes)
        out["rss"] += sum(r for r, _ in sizes)
        out["processes"] += len(subtree)
    return out


def ours_downstream(commands: str) -> bool:
    return kind(commands) == "other"


def fixture_downstream(commands: str) -> bool:
    return "fixture_server.py" in commands


def cpu_seconds(root: int) -> float:
    stats = process_stats()
    pids = [root, *descendants(root, process_table(stats))]
    return sum((int(stats[pid][11]) + int(stats[pid][12])) / _TICK for pid in pids if pid in stats)


async def settle(root: int, downstream: Callable[[str], bool], limit: float = 30.0) -> dict[str, Any]:
    """The tree once its PSS moved < 2 % over a second with under 0.1 s of CPU used in it (or after ``limit``)."""
    started = time.monotonic()
    previous: dict[str, Any] | None = None
    while True:
        before = cpu_seconds(root)
        await anyio.sleep(1.0)
        now = await anyio.to_thread.run_sync(tree, root, downstream)
        busy = cpu_seconds(root) - before
        steady = previous is not None and abs(now["pss"] - previous["pss"]) < 0.02 * previous["pss"] and busy < 0.1
        if steady or time.monotonic() - started > limit:
            now["settled"] = steady
            now["after"] = time.monotonic() - started
            return now
        previous = now


async def ours_first_run(folder: Path) -> dict[str, Any]:
    """Spawn → initialize, then the default runner's first run at once."""
    env = server_env(folder / "cache-first")
    with (folder / "first.log").open("a", encoding="utf-8") as errlog:
        spawned = time.perf_counter()
        async with executor(CONFIG, env, errlog) as client:
            initialized = (time.perf_counter() - spawned) * 1000
            elapsed, result = await timed(lambda: client.call_tool("execute_code", request(None)))
            data = structured(result)
    return {"initialize": initialized, "first": elapsed, "runner": data.get("runner", "?")}


async def ours_idle(folder: Path, runners: tuple[str, ...] = RUNNERS, **settings: str) -> dict[str, Any]:
    """Spawn → initialize, settle, idle tree, each runner's first run, settled tree (``settings``: other
    than the defaults)."""
    env = server_env(folder / f"cache-idle-{len(settings)}", **settings)
    out: dict[str, Any] = {"first": {}}
    with (folder / "idle.log").open("a", encoding="utf-8") as errlog:
        spawned = time.perf_counter()
        async with executor(CONFIG, env, errlog) as client:
            out["initialize"] = (time.perf_counter() - spawned) * 1000
            server = find_child("mcp-code-mode serve")
            if server is None:
                raise SystemExit("cannot find the server process")
            out["idle"] = await settle(server, ours_downstream)
            for runner in runners:
                warm = (await anyio.to_thread.run_sync(tree, server, ours_downstream))["workers"].get(runner, 0) > 0
                await quiesce()
                elapsed, result = await timed(lambda runner=runner: client.call_tool("execute_code", request(runner)))
                data = result.structured_content or {}
                failed = None
                if data.get("output") != "1\n" or data.get("runner") != runner:
                    failed = str((data.get("error") or {}).get("message") or data)[:300]
                out["first"][runner] = (elapsed, warm, failed)
            out["used"] = await settle(server, ours_downstream)
    return out


async def fastmcp_start(folder: Path) -> dict[str, Any]:
    """FastMCP's CodeMode: spawn → initialize, its settled tree (fixture server left out), first ``return 1``,
    its tree settled again."""
    with (folder / "fastmcp.log").open("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            with anyio.fail_after(120):
                spawned = time.perf_counter()
                async with fastmcp_code_mode(errlog) as client:
                    initialized = (time.perf_counter() - spawned) * 1000
                    peer = find_child("fastmcp_peer.py")
                    if peer is None:
                        raise RuntimeError("cannot find FastMCP's process")
                    idle = await settle(peer, fixture_downstream)
                    elapsed, text = await timed(lambda: fastmcp_execute(client, "return 1"))
                    if text.strip() != "1":
                        raise RuntimeError(f"return 1 answered {text[:200]!r}")
                    used = await settle(peer, fixture_downstream)
        except Exception as exc:  # the boundary of a peer we do not control: whatever it raised is the finding
            return {"failure": failure_text(exc, errlog)}
    return {"initialize": initialized, "idle": idle, "first": elapsed, "used": used}


def mib(kib: float) -> str:
    return "n/a" if math.isnan(kib) else f"{kib / 1024:,.0f} MiB"


async def measure(args: argparse.Namespace, section: Section) -> None:
    firsts: list[dict[str, Any]] = []
    idles: list[dict[str, Any]] = []
    peers: list[dict[str, Any]] = []
    peer_missing = await anyio.to_thread.run_sync(fastmcp_missing)
    colds: list[dict[str, Any]] = []
    lazy_setting = "eager_runners" in Settings.model_fields
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for rep in range(args.reps):
            folder = Path(tmp) / f"rep-{rep}"
            folder.mkdir()
            firsts.append(await ours_first_run(folder))
            idles.append(await ours_idle(folder))
            had = tuple(r for r in RUNNERS if r in COLD_TARGET_MS and idles[-1]["first"][r][1])
            if had and lazy_setting:  # those runners' first run without a worker, where the server can say so
                colds.append(await ours_idle(folder, had, eager_runners="none"))
            if peer_missing is None:
                peers.append(await fastmcp_start(folder))
    monty = await anyio.to_thread.run_sync(footprint, "monty")
    smol = await anyio.to_thread.run_sync(footprint, "smolagents")

    initialize = median([r["initialize"] for r in firsts + idles])
    first = median([r["first"] for r in firsts])
    idle_pss = median([r["idle"]["pss"] for r in idles])
    used_pss = median([r["used"]["pss"] for r in idles])
    default_runner = firsts[0]["runner"]
    table = section.table(
        f"Spawn of the server to `initialize` answered, its first run, and its process tree's PSS; medians of "
        f"{args.reps} repetitions (ours: {2 * args.reps} spawns for `initialize`). Downstream servers are left out "
        "of the PSS.",
        ["what", "spawn → initialize answered", "first run after initialize", "idle PSS (processes)", "PSS after runs"],
    )
    idle_processes = median([r["idle"]["processes"] for r in idles])
    table.rows.append(
        [
            f"mcp-code-mode, default settings, the repository's mcp_servers.json (default runner: {default_runner})",
            ms(initialize),
            ms(first),
            f"{mib(idle_pss)} ({idle_processes:.0f})",
            f"{mib(used_pss)} (after a run on each runner)",
        ]
    )
    good = [p for p in peers if "failure" not in p]
    if good:
        table.rows.append(
            [
                FASTMCP_NAME + ", proxying the fixture server",
                ms(median([p["initialize"] for p in good])),
                ms(median([p["first"] for p in good])) + " (`return 1`, after the idle reading)",
                f"{mib(median([p['idle']['pss'] for p in good]))} "
                f"({median([p['idle']['processes'] for p in good]):.0f})",
                f"{mib(median([p['used']['pss'] for p in good]))} (after its first run)",
            ]
        )
    else:
        why = peer_missing or next((p["failure"] for p in peers if "failure" in p), "not run")
        table.rows.append([FASTMCP_NAME, "could not run here (see notes)", "", "", ""])
        section.notes.append(f"FastMCP's CodeMode could not run here: {why}")
    table.rows.append(
        [
            "pydantic-monty pool (`Monty`, 1 warm process) in a Python process of its own",
            "",
            ms(monty["times"][0]) + " (`return 1`, the pool's first)",
            f"{mib(monty['pss_kib'])} ({monty['processes']})",
            "",
        ]
    )
    table.rows.append(
        [
            "smolagents LocalPythonExecutor in a Python process of its own (no isolation)",
            "",
            ms(smol["times"][0]) + " (`print(1)`)",
            f"{mib(smol['pss_kib'])} ({smol['processes']})",
            "",
        ]
    )

    runs = section.table(
        "Our first run of each runner, one after another once the idle tree had settled: whether the runner had "
        "a worker then (read from the process tree), and the run through the stdio client.",
        ["runner", "had a worker (repetitions)", "first run, no worker (median)", "first run, with a worker (median)"],
    )
    for runner in RUNNERS:
        starts = idles + [r for r in colds if runner in r["first"]]
        failures = [r["first"][runner][2] for r in starts if r["first"][runner][2]]
        if failures:
            runs.rows.append([runner, "", f"failed in {len(failures)} of {len(idles)} (see notes)", ""])
            section.notes.append(f"The {runner} runner's first run failed: {scrub(failures[0])}")
            if runner in COLD_TARGET_MS:
                section.target(f"{runner} first run without a warm worker", "the run failed", False)
            continue
        cold = [r["first"][runner][0] for r in starts if not r["first"][runner][1]]
        warm = [r["first"][runner][0] for r in idles if r["first"][runner][1]]
        runs.rows.append([runner, f"{len(warm)} of {len(idles)}", ms(median(cold)), ms(median(warm))])
        if runner in COLD_TARGET_MS:
            goal = COLD_TARGET_MS[runner]
            label = f"{runner} first run without a warm worker <= {goal:g} ms"
            if cold:
                section.target(label, ms(median(cold)), median(cold) <= goal)
            else:
                section.target(label, f"every start had a worker (first run {ms(median(warm))})", None)
    if colds:
        section.notes.append(
            "A runner that had a worker in the default start ("
            + ", ".join(sorted({r for c in colds for r in c["first"]}))
            + ") was also started with `CODE_MODE_EAGER_RUNNERS=none` (every pool empty until its first run), "
            "once per repetition: its first run there is the one without a worker (the column's median covers both)."
        )

    section.target(
        f"idle PSS <= {IDLE_TARGET_MIB} MiB (default settings and config, downstream excluded)",
        mib(idle_pss),
        idle_pss <= IDLE_TARGET_MIB * 1024,
    )
    section.target(
        f"initialize <= {INITIALIZE_TARGET_MS / 1000:g} s after spawn",
        ms(initialize),
        initialize <= INITIALIZE_TARGET_MS,
    )
    section.target(
        f"default runner's first run after initialize <= {DEFAULT_FIRST_TARGET_MS:g} ms ({default_runner})",
        ms(first),
        first <= DEFAULT_FIRST_TARGET_MS,
    )
    unsettled = sum(not r["idle"]["settled"] for r in idles)
    excluded = sorted({name for r in idles for name in r["idle"]["excluded"]})
    section.notes.append(
        "Idle: read once the tree had settled, "
        + ", ".join(f"{r['idle']['after']:.0f}" for r in idles)
        + " s after `initialize`"
        + (f" ({unsettled} did not settle within 30 s: read then)" if unsettled else "")
        + "; left out as downstream servers: "
        + (", ".join(f"`{name}`" for name in excluded) or "nothing (no downstream process was running)")
        + f" ({mib(median([r['idle']['excluded_pss'] for r in idles]))} PSS). Workers per runner at idle: "
        + ", ".join(f"{name} {count}" for name, count in sorted(idles[0]["idle"]["workers"].items()))
        + " (first repetition)."
    )
    section.notes.append(
        "FastMCP's tree at idle is its own process (the fixture server left out): its CodeMode starts a new "
        "pydantic-monty pool (a `monty` process) for each `execute`, so no sandbox process waits between runs. "
        f"The Monty pool keeps one `monty` process between runs (its first `return 1` includes its pool's start; "
        f"warm: {ms(median(monty['times'][1:]), 2)}); smolagents runs in its host's process (warm "
        f"`print(1)` {ms(median(smol['times'][1:]), 2)})."
    )


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--reps", type=int, default=2)
    section = Section("startup", "15. Memory and start-up against the peers", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
