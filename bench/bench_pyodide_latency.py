#!/usr/bin/env python3
"""execute_code latency of `print(1)` through a real MCP stdio client: pyodide beside local.

For each runner it starts `python -m mcp_code_mode.executor_server` over stdio (no downstream servers,
a fresh process per runner), then measures, as a client sees it (round trip of `tools/call`):

- first:   the first call, sent as soon as the client is initialized (the warm pool is still filling);
- warm:    calls with a pause between them, so that a warm interpreter is waiting (median, p95);
- burst:   calls back to back, with no pause (median, p95): a pyodide worker serves one run, so
           here the pool's refill rate, not the run, sets the pace.

Medians are printed; nothing is written. The snapshot must exist (any earlier pyodide run makes it;
the first-ever start makes it and is reported as such).

    .venv/bin/python bench/bench_pyodide_latency.py [--warm 20] [--burst 20] [--gap 2.0] [--pool 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def call(client: Client, runner: str) -> tuple[float, int]:
    """(round trip ms, server-side executionTime ms) of one `print(1)`."""
    started = time.perf_counter()
    result = await client.call_tool("execute_code", {"language": "python", "code": "print(1)", "runner": runner})
    elapsed = (time.perf_counter() - started) * 1000
    data = result.structured_content or {}
    if not data.get("success") or data.get("output") != "1\n":
        raise SystemExit(f"{runner}: print(1) failed: {json.dumps(data)[:500]}")
    return elapsed, int(data.get("executionTime", 0))


async def measure(runner: str, args: argparse.Namespace, config: Path) -> dict[str, float]:
    env = {
        **os.environ,
        "CODE_MODE_POOL_SIZE": "2",
        "CODE_MODE_PYODIDE_POOL_SIZE": str(args.pool if runner == "pyodide" else 0),
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_code_mode.executor_server", "--config", str(config)], env=env
    )
    spawned = time.perf_counter()
    async with Client(params, mode="legacy") as client:
        initialized = (time.perf_counter() - spawned) * 1000
        first, _ = await call(client, runner)
        warm: list[float] = []
        server_side: list[int] = []
        for _ in range(args.warm):
            await anyio.sleep(args.gap)
            elapsed, inside = await call(client, runner)
            warm.append(elapsed)
            server_side.append(inside)
        await anyio.sleep(args.gap)
        burst_started = time.perf_counter()
        burst = [(await call(client, runner))[0] for _ in range(args.burst)]
        burst_total = (time.perf_counter() - burst_started) * 1000
    return {
        "initialize_ms": initialized,
        "first_ms": first,
        "first_from_spawn_ms": initialized + first,
        "warm_p50_ms": statistics.median(warm),
        "warm_p95_ms": percentile(warm, 0.95),
        "warm_server_p50_ms": statistics.median(server_side),
        "burst_p50_ms": statistics.median(burst),
        "burst_p95_ms": percentile(burst, 0.95),
        "burst_runs_per_s": args.burst / (burst_total / 1000),
    }


async def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "servers.json"
        config.write_text(json.dumps({"servers": {}}), encoding="utf-8")
        results = {runner: await measure(runner, args, config) for runner in args.runners}
    print(f"print(1) through a stdio MCP client; warm n={args.warm} (gap {args.gap} s), burst n={args.burst}")
    names = list(next(iter(results.values())))
    print(f"{'':22}" + "".join(f"{runner:>12}" for runner in results))
    for name in names:
        print(f"{name:22}" + "".join(f"{results[r][name]:12.1f}" for r in results))
    if "pyodide" in results and "local" in results:
        ratio = results["pyodide"]["warm_p50_ms"] / results["local"]["warm_p50_ms"]
        print(f"warm p50 ratio pyodide/local: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warm", type=int, default=20, help="warm calls, each after a pause (default 20)")
    parser.add_argument("--burst", type=int, default=20, help="back-to-back calls (default 20)")
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between warm calls (default 2.0)")
    parser.add_argument("--pool", type=int, default=2, help="CODE_MODE_PYODIDE_POOL_SIZE (default 2)")
    parser.add_argument("--runners", nargs="+", default=["pyodide", "local"], help="runners to measure")
    sys.exit(anyio.run(main, parser.parse_args()))
