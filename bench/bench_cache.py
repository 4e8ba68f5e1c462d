#!/usr/bin/env python3
"""Benchmark of the script cache: hybrid search at 1,000 and 10,000 scripts, and exact-hit replay.

    .venv/bin/python bench/bench_cache.py [--sizes 1000 10000] [--replays 300]

Search: a cache file is filled with variations of the quality set's scripts (``tests/cache``), with
the real embedder (WordLlama static vectors); each of the quality set's queries is searched several
times in a fresh process-level store, and the medians are printed. The first search after opening
(which loads the vectors from SQLite) is reported separately.

Replay: a side-effect-free script is run once through ``CodeMode.execute`` (no downstream servers),
then replayed; the time of ``execute`` around each replay is what the server spends.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cache.helpers import new_script  # noqa: E402
from tests.cache.quality_set import QUERIES, SCRIPTS  # noqa: E402

from mcp_code_mode.cache.embed import StaticEmbedder  # noqa: E402
from mcp_code_mode.cache.store import ScriptStore  # noqa: E402
from mcp_code_mode.config import CodeModeConfig, Settings  # noqa: E402
from mcp_code_mode.engine import CodeMode  # noqa: E402

WORDS = (
    "invoice customer order ticket report shipment product account payment subscription campaign contact "
    "project task document weekly monthly daily export import archive backup summary total average count"
).split()


def variations(count: int, seed: int = 7) -> list[object]:
    rng = random.Random(seed)
    out: list[object] = []
    for i in range(count):
        base = SCRIPTS[i % len(SCRIPTS)]
        extra = " ".join(rng.sample(WORDS, 3))
        code = base.code + f"\n# variant {i}: {extra}\nlimit_{i} = {rng.randint(1, 10_000)}\n"
        description = f"{base.description} ({extra})" if base.description else None
        out.append(new_script(code, tools=base.tools, description=description))
    return out


def fill(path: Path, count: int) -> float:
    store = ScriptStore(path, StaticEmbedder()).open()
    started = time.perf_counter()
    scripts = variations(count)
    for start in range(0, count, 500):
        store.put_many(scripts[start : start + 500])  # pyright: ignore[reportArgumentType]
    store.close()
    return time.perf_counter() - started


def bench_search(count: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scripts.db"
        filled = fill(path, count)
        opened = time.perf_counter()
        store = ScriptStore(path, StaticEmbedder()).open()
        open_ms = (time.perf_counter() - opened) * 1000
        store.embedder.embed(["warm up the model"])  # pyright: ignore[reportOptionalMemberAccess]
        first = time.perf_counter()
        store.search(QUERIES[0].text)
        first_ms = (time.perf_counter() - first) * 1000
        times: list[float] = []
        for _ in range(rounds):
            for query in QUERIES:
                t0 = time.perf_counter()
                store.search(query.text, limit=5)
                times.append((time.perf_counter() - t0) * 1000)
        store.close()
    times.sort()
    p95 = times[int(len(times) * 0.95)]
    print(
        f"search  {count:>6} scripts: p50 {statistics.median(times):6.2f} ms  p95 {p95:6.2f} ms  "
        f"(n={len(times)}; first search after open {first_ms:.0f} ms, open {open_ms:.0f} ms, fill {filled:.0f} s)"
    )


async def bench_replay(replays: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(cache_dir=Path(tmp) / "cache", workspace_dir=Path(tmp) / "runs", cache_embedder="none")
        config = CodeModeConfig.from_servers({}, settings=settings, env={})
        code = "total = sum(i * i for i in range(1000))\nprint(total)\ntotal"
        async with CodeMode(config) as cm:
            first = await cm.execute(code, allow_networking=False)
            assert first.success and not first.cached
            times: list[float] = []
            reported: list[int] = []
            for _ in range(replays):
                t0 = time.perf_counter()
                result = await cm.execute(code, allow_networking=False)
                times.append((time.perf_counter() - t0) * 1000)
                assert result.cached
                reported.append(result.execution_time)
            runs: list[float] = []
            for i in range(20):
                t0 = time.perf_counter()
                await cm.execute(code + f"\n# {i}", allow_networking=False, cache="off")
                runs.append((time.perf_counter() - t0) * 1000)
    times.sort()
    print(
        f"replay  exact hit: p50 {statistics.median(times):.3f} ms  p95 {times[int(len(times) * 0.95)]:.3f} ms  "
        f"(n={replays}; executionTime field median {statistics.median(reported)} ms; "
        f"a real run of the same script: p50 {statistics.median(runs):.1f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 10_000])
    parser.add_argument("--rounds", type=int, default=4, help="times each query is searched")
    parser.add_argument("--replays", type=int, default=300)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    for size in args.sizes:
        bench_search(size, args.rounds)
    anyio.run(bench_replay, args.replays)
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
