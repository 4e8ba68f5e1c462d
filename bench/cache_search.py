#!/usr/bin/env python3
"""5. Cache and search: exact-hit replay, search_cached_scripts and search_tools at 1,000 and 10,000 entries.

    .venv/bin/python bench/cache_search.py [--sizes 1000 10000] [--rounds 3] [--replays 300]

- search_cached_scripts: a cache file is filled with variations of the quality set's scripts
  (``tests/cache/quality_set.py``), embedded with the default embedder (WordLlama); a fresh
  ``ScriptCache`` (what the tool calls) opens it, and each of the quality set's queries is searched
  ``--rounds`` times. The first search after opening (it loads the vectors) is reported apart.
- search_tools: ``ToolSearch`` (what the tool calls) over 1,000 / 10,000 synthetic tools spread over
  10 servers, shaped like the fixture server's synthetic tools; the first search builds the index
  (reported apart), then a set of queries is searched.
- replay: a side-effect-free script is run once through ``CodeMode.execute``, then replayed; the time
  of ``execute`` around each replay is what the server spends (issue 7's "inside the server").

Everything here runs in this process: these are server-side times, without the MCP round trip.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import Section, engine, median, ms, parser, percentile, quiet_logs, run_section
from tests.cache.helpers import new_script
from tests.cache.quality_set import QUERIES, SCRIPTS

from mcp_code_mode.cache import ScriptCache
from mcp_code_mode.cache.embed import make_embedder
from mcp_code_mode.cache.models import NewScript
from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.discovery import ToolSearch
from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.stubs import StubIndex

SEARCH_TARGET = 20.0
REPLAY_TARGET = 2.0
WORDS = (
    "invoice customer order ticket report shipment product account payment subscription campaign contact "
    "project task document weekly monthly daily export import archive backup summary total average count"
).split()
VERBS = ["get", "list", "create", "update", "delete", "search", "archive", "export"]
NOUNS = (
    "invoice customer order ticket report shipment product account payment subscription campaign contact "
    "project task document warehouse invoice-line refund coupon supplier contract asset"
).split()
TOOL_QUERIES = [
    "archive an old invoice",
    "find a customer by id",
    "list open support tickets",
    "export the monthly report",
    "create a new shipment",
    "delete a contact",
    "update a subscription plan",
    "search payments",
    "get a product by its identifier",
    "refund a payment",
    "list suppliers with archived ones",
    "export contracts",
]


def variations(count: int, seed: int = 7) -> list[NewScript]:
    """``count`` distinct scripts made from the quality set (from ``bench_cache.py`` of issue 7)."""
    rng = random.Random(seed)
    out: list[NewScript] = []
    for i in range(count):
        base = SCRIPTS[i % len(SCRIPTS)]
        extra = " ".join(rng.sample(WORDS, 3))
        code = base.code + f"\n# variant {i}: {extra}\nlimit_{i} = {rng.randint(1, 10_000)}\n"
        description = f"{base.description} ({extra})" if base.description else None
        out.append(new_script(code, tools=base.tools, description=description))
    return out


def fill(path: Path, count: int, embedder: Any) -> float:
    store = ScriptStore(path, embedder).open()
    started = time.perf_counter()
    scripts = variations(count)
    for start in range(0, count, 500):
        store.put_many(scripts[start : start + 500], tenant="default")
    store.close()
    return time.perf_counter() - started


def search_scripts(count: int, rounds: int) -> dict[str, Any]:
    embedder = make_embedder("wordllama")
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as tmp:
        filled = fill(Path(tmp) / "scripts.db", count, embedder)
        cache = ScriptCache(Path(tmp), ttl=3600, embedder=embedder, current_schema=lambda server, tool: "h1")
        cache.open()
        try:
            first, _ = _timed(lambda: cache.search(QUERIES[0].text, tenant="default"))
            times = [
                _timed(lambda q=q: cache.search(q.text, limit=5, tenant="default"))[0]
                for _ in range(rounds)
                for q in QUERIES
            ]
        finally:
            cache.close()
    return {"times": times, "first": first, "fill": filled}


def synthetic_tools(count: int, servers: int = 10) -> list[ToolInfo]:
    schema = {
        "type": "object",
        "properties": {
            "identifier": {"type": "string", "description": "The record's identifier."},
            "limit": {"type": "integer", "default": 10, "description": "Page size."},
            "include_archived": {"type": "boolean", "default": False},
        },
        "required": ["identifier"],
    }
    tools: list[ToolInfo] = []
    for i in range(count):
        verb, noun = VERBS[i % len(VERBS)], NOUNS[(i // len(VERBS)) % len(NOUNS)]
        description = (
            f"{verb.capitalize()} {noun} records in back office {i % servers} (tool {i}). Use it to {verb} a "
            f"{noun} by its identifier; results are paginated with `limit` and archived {noun}s are skipped "
            "unless `include_archived` is set."
        )
        tools.append(
            ToolInfo(f"office{i % servers}", f"{verb}_{noun.replace('-', '_')}_{i}", description, schema, None)
        )
    return tools


def search_tools(count: int, rounds: int) -> dict[str, Any]:
    tools = synthetic_tools(count)
    index = StubIndex.build([(f"office{i}", None) for i in range(10)], tools)
    finder = ToolSearch(make_embedder("wordllama"))
    try:
        first, _ = _timed(lambda: finder.search(index, 1, TOOL_QUERIES[0]))
        times = [_timed(lambda q=q: finder.search(index, 1, q))[0] for _ in range(rounds) for q in TOOL_QUERIES]
    finally:
        finder.close()
    return {"times": times, "first": first}


def _timed(action: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return (time.perf_counter() - started) * 1000, result


async def replay(count: int) -> dict[str, list[float]]:
    code = "total = sum(i * i for i in range(1000))\nprint(total)\ntotal"
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        cm = engine({}, Path(tmp), cache_embedder="none", pyodide_pool_size=0)
        async with cm:
            first = await cm.execute(code, allow_networking=False)
            assert first.success and not first.cached
            hits: list[float] = []
            for _ in range(count):
                started = time.perf_counter()
                result = await cm.execute(code, allow_networking=False)
                hits.append((time.perf_counter() - started) * 1000)
                if not result.cached:
                    raise SystemExit("an exact hit was not replayed")
            runs: list[float] = []
            for i in range(20):
                started = time.perf_counter()
                await cm.execute(code + f"\n# {i}", allow_networking=False, cache="off")
                runs.append((time.perf_counter() - started) * 1000)
    return {"hits": hits, "runs": runs}


async def measure(args: argparse.Namespace, section: Section) -> None:
    table = section.table(
        "Server-side times (in-process, no MCP round trip); p50 / p95 over every query × round.",
        ["what", "entries", "p50", "p95", "n", "first after opening", "set-up"],
    )
    scripts_p50: dict[int, float] = {}
    for count in args.sizes:
        found = search_scripts(count, args.rounds)
        scripts_p50[count] = median(found["times"])
        table.rows.append(
            [
                "`search_cached_scripts`",
                f"{count:,} scripts",
                ms(scripts_p50[count], 2),
                ms(percentile(found["times"], 0.95), 2),
                str(len(found["times"])),
                ms(found["first"], 0),
                f"fill {found['fill']:.0f} s",
            ]
        )
    for count in args.sizes:
        found = search_tools(count, args.rounds)
        table.rows.append(
            [
                "`search_tools`",
                f"{count:,} tools",
                ms(median(found["times"]), 2),
                ms(percentile(found["times"], 0.95), 2),
                str(len(found["times"])),
                ms(found["first"], 0) + " (builds the index)",
                "",
            ]
        )
    with quiet_logs():
        replays = await replay(args.replays)
    hit = median(replays["hits"])
    table.rows.append(
        [
            "exact-hit replay (`execute`)",
            "1 script",
            ms(hit, 3),
            ms(percentile(replays["hits"], 0.95), 3),
            str(len(replays["hits"])),
            "",
            f"the same script run for real: p50 {ms(median(replays['runs']))}",
        ]
    )
    largest = max(args.sizes)
    section.target(
        f"search_cached_scripts p50 <= {SEARCH_TARGET:g} ms at {largest:,} scripts",
        ms(scripts_p50[largest], 2),
        scripts_p50[largest] <= SEARCH_TARGET if largest >= 10_000 else None,
    )
    section.target(f"exact-hit replay <= {REPLAY_TARGET:g} ms inside the server", ms(hit, 3), hit <= REPLAY_TARGET)
    section.notes.append(
        "Search uses the default embedder (WordLlama static vectors) fused with SQLite FTS5; the quality set's "
        f"{len(QUERIES)} queries for scripts, {len(TOOL_QUERIES)} task phrasings for tools."
    )


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    cli.add_argument("--rounds", type=int, default=3, help="times each query is searched")
    cli.add_argument("--replays", type=int, default=300)
    section = Section("cache", "5. Cache and search", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
