#!/usr/bin/env python3
"""2. execute_code latency of a trivial script through a real MCP stdio client, per runner, and the peers.

    .venv/bin/python bench/latency.py [--warm 20] [--burst 15] [--runners ...] [--no-peers]

For each runner, a fresh ``mcp-code-mode serve`` (no downstream servers, default settings; the Pyodide
pool only in the pyodide runner's server, size 2) is started as a child of a real stdio client, and
``print(1)`` (``console.log(1)`` for deno) is sent with ``cache="off"``:

- first: the first call, sent as soon as the client is initialized (the pools are still filling);
  also from the spawn of the server to that first answer;
- warm: calls each sent after a pause long enough for a worker to be waiting (the zygote runners
  reuse their worker; deno and pyodide use one process per run, so the pause lets the pool refill);
- back-to-back: calls with no pause (for one-shot runners the pool's refill rate sets the pace).

Targets: warm p50 per runner (issue 2), back-to-back p50 deno <= 15 ms and pyodide <= 60 ms (issue 22).

Peers, in the same run: pydantic's ``mcp-run-python`` (``.tools/peers``, cold and warm), FastMCP's
CodeMode (``.tools/peers/fastmcp``, ``return 1`` through its ``execute``, in front of the fixture server),
a warm pydantic-monty pool (``return 1``) and smolagents' ``LocalPythonExecutor`` (both in this process,
no MCP; smolagents has no isolation: the floor). See ``peers.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    RUNNERS,
    Section,
    executor,
    median,
    ms,
    parser,
    percentile,
    run_section,
    server_env,
    snapshot_exists,
    structured,
    timed,
    write_config,
)
from peers import PEER_VERSION, fastmcp_latency, mcp_run_python, monty_pool, patched_attempt, row, smolagents_floor

WARM_TARGET = {"local": 15.0, "cpython": 15.0, "pyodide": 40.0, "deno": 40.0, "deno-isolates": 40.0}
FIRST_TARGET = {"pyodide": 800.0}
BURST_TARGET = {"deno": 15.0, "deno-isolates": 15.0, "pyodide": 60.0}
"""Back-to-back p50 (issue 22: no waiting for a new process between runs)."""
GAP = {"local": 0.1, "cpython": 0.1, "deno": 0.3, "deno-isolates": 0.3, "pyodide": 1.0, "monty": 0.1}
"""Seconds between warm calls: enough for a zygote to be back, or for a one-shot pool to refill."""


ISOLATES = "deno-isolates"
"""The deno runner in its isolate mode (``CODE_MODE_DENO_ISOLATES=true``), in a server of its own."""
CHOICES = (*RUNNERS, ISOLATES)


def runner_name(runner: str) -> str:
    return "deno" if runner == ISOLATES else runner


def request(runner: str) -> dict[str, Any]:
    if runner in ("deno", ISOLATES):
        return {"language": "javascript", "code": "console.log(1)", "runner": "deno", "cache": "off"}
    return {"language": "python", "code": "print(1)", "runner": runner, "cache": "off"}


async def measure_runner(runner: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    config = write_config(folder, {})
    env = server_env(folder / f"cache-{runner}", pyodide_pool_size=2 if runner == "pyodide" else 0)
    if runner == ISOLATES:
        env["CODE_MODE_DENO_ISOLATES"] = "true"
    out: dict[str, Any] = {"warm": [], "server": [], "burst": [], "trivial": []}
    with (folder / f"server-{runner}.log").open("w+", encoding="utf-8") as errlog:
        spawned = time.perf_counter()
        async with executor(config, env, errlog) as client:
            initialized = time.perf_counter()

            async def call() -> tuple[float, dict[str, Any]]:
                elapsed, result = await timed(lambda: client.call_tool("execute_code", request(runner)))
                data = structured(result)
                if data.get("output") != "1\n" or data.get("runner") != runner_name(runner):
                    raise SystemExit(f"{runner}: unexpected answer {json.dumps(data)[:300]}")
                return elapsed, data

            out["first"], _ = await call()
            out["start_to_first"] = (initialized - spawned) * 1000 + out["first"]
            for _ in range(args.warm):
                await anyio.sleep(GAP[runner])
                elapsed, data = await call()
                out["warm"].append(elapsed)
                out["server"].append(float(data.get("executionTime", 0)))
            await anyio.sleep(GAP[runner] * 2)
            burst_started = time.perf_counter()
            for _ in range(args.burst):
                out["burst"].append((await call())[0])
            out["burst_rate"] = args.burst / (time.perf_counter() - burst_started)
            for _ in range(args.warm):  # the MCP round trip alone: a tool that runs nothing
                out["trivial"].append((await timed(lambda: client.call_tool("list_supported_languages", {})))[0])
    return out


async def measure(args: argparse.Namespace, section: Section) -> None:
    had_snapshot = snapshot_exists()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        for runner in args.runners:
            results[runner] = await measure_runner(runner, args, Path(tmp))
    table = section.table(
        f'`print(1)` (`console.log(1)` under deno) as `execute_code` through a stdio MCP client, `cache="off"`; '
        f"warm n={args.warm} (paced), back-to-back n={args.burst}.",
        [
            "runner",
            "first call after start",
            "spawn → first answer",
            "warm p50",
            "warm p95",
            "warm p50 inside the server",
            "MCP round trip alone",
            "back-to-back p50",
            "back-to-back p95",
            "back-to-back runs/s",
        ],
    )
    for runner, r in results.items():
        warm = median(r["warm"])
        table.rows.append(
            [
                runner,
                ms(r["first"]),
                ms(r["start_to_first"]),
                ms(warm),
                ms(percentile(r["warm"], 0.95)),
                ms(median(r["server"]), 0),
                ms(median(r["trivial"])),
                ms(median(r["burst"])),
                ms(percentile(r["burst"], 0.95)),
                f"{r['burst_rate']:.1f}",
            ]
        )
        if runner in WARM_TARGET:
            goal = WARM_TARGET[runner]
            section.target(f"{runner} warm p50 <= {goal:g} ms", ms(warm), warm <= goal)
        if runner in BURST_TARGET:
            burst, goal = median(r["burst"]), BURST_TARGET[runner]
            section.target(f"{runner} back-to-back p50 <= {goal:g} ms", ms(burst), burst <= goal)
        if runner in FIRST_TARGET:
            first = r["first"]
            section.target(
                f"{runner} first call <= {FIRST_TARGET[runner]:g} ms", ms(first), first <= FIRST_TARGET[runner]
            )
    section.notes.append(
        "\"Inside the server\" is the result's `executionTime`: from the worker's hand-over to its answer. "
        '"MCP round trip alone" is the median of `list_supported_languages` (runs nothing) on the same '
        "session: the client, stdio and the server's MCP layer."
    )
    section.notes.append(
        "Pauses between warm calls: "
        + ", ".join(f"{r} {GAP[r]:g} s" for r in args.runners)
        + ". Each runner has its own fresh server with the default pool sizes (local 2, cpython 1, deno 2, "
        "monty 1), the Pyodide pool's (2) only in the pyodide runner's server (0 in the others); which pools start "
        "at once and which on first use is the server's own default (`CODE_MODE_EAGER_RUNNERS`)."
    )
    if "pyodide" in args.runners and not had_snapshot:
        section.notes.append(
            "The Pyodide memory snapshot did not exist before this section, so the pyodide server's first "
            "call includes making it (a one-time cost): rerun for the first call of a normal start."
        )
    if args.peers:
        await measure_peers(args, section)


async def measure_peers(args: argparse.Namespace, section: Section) -> None:
    table = section.table(
        "Peers, same machine, same run, the same trivial script (`print(1)`, `return 1` where the peer answers "
        "with a value).",
        ["peer", "first call after start", "spawn → first answer", "warm p50", "warm p95"],
    )
    peer = await mcp_run_python(args.warm, 0.1, args.peer_timeout)
    table.rows.append(row(peer))
    if peer.failure:
        why = ""
        if "JSR" in peer.failure:
            why = (
                " (it fetches `@std/cli` from the JSR registry when it starts; this machine reaches PyPI, npm "
                "and Debian only)"
            )
        section.notes.append(f"mcp-run-python {PEER_VERSION} could not run here{why}: {peer.failure}")
        patched = await anyio.to_thread.run_sync(patched_attempt, args.peer_timeout)
        if "attempting to load from" in patched:
            patched += " (Pyodide's `loadPackage` fetches micropip and pydantic from Pyodide's CDN at start)"
        section.notes.append(
            "With its one JSR import (`@std/cli`'s `parseArgs`) replaced by a few lines, its own `example` "
            f"got further and then failed: {patched}. So no figure for mcp-run-python is given here."
        )
    fastmcp = await fastmcp_latency(args.warm, 0.1, args.peer_timeout)
    table.rows.append(row(fastmcp))
    if fastmcp.failure:
        section.notes.append(f"FastMCP's CodeMode could not run here: {fastmcp.failure}")
    else:
        section.notes.append(
            "FastMCP's CodeMode (`bench/fastmcp_peer.py`) proxies the fixture server; its `execute` runs the "
            "script in a new pydantic-monty pool (a `monty` process) each time; `return 1` is its trivial script."
        )
    table.rows.append(row(await anyio.to_thread.run_sync(monty_pool, 200)))
    section.notes.append(
        "The pydantic-monty pool (`pydantic_monty.Monty`, one warm process) is held by the benchmark's own "
        "process: each run is a checkout, `feed_run` and the worker's return, and one `monty` process serves run "
        "after run (our monty runner retires the process a script ran in, so a run never shares one)."
    )
    floor = smolagents_floor(200)
    table.rows.append(row(floor))
    section.notes.append(
        "smolagents' `LocalPythonExecutor` is called in the benchmark's own process (no worker, sandbox or "
        "MCP): the floor under any isolated runner; our `local` runner runs that same interpreter in a "
        "sandboxed zygote worker."
    )


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--warm", type=int, default=20, help="paced warm calls per runner (default 20)")
    cli.add_argument("--burst", type=int, default=10, help="back-to-back calls per runner (default 10)")
    cli.add_argument(
        "--runners", nargs="+", default=list(RUNNERS), choices=CHOICES, help=f"{ISOLATES}: deno in its isolate mode"
    )
    cli.add_argument("--no-peers", dest="peers", action="store_false", help="skip mcp-run-python and smolagents")
    cli.add_argument("--peer-timeout", type=float, default=90.0, help="seconds allowed to mcp-run-python")
    section = Section("latency", "2. execute_code latency", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
