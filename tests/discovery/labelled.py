"""The labelled set of ``search_tools`` (``data/tool_queries.jsonl``) over its catalogue, and how a ranking is
scored on it; shared by ``test_tool_search.py`` and ``bench/tool_search.py``.

The catalogue is the three npm servers' tools as they list them (``data/npm_tools.json``, saved from
``tools/list``) and a 200-tool business catalogue (``data/business_tools.json``: invoices, customers, tickets,
calendar, HR, commerce, projects, accounting, workspace), so no test needs a server process. The queries were
written as a user phrases a task before any ranking was tuned; ``heldout`` ones were never used to tune.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.stubs import StubIndex

DATA = Path(__file__).parent / "data"
CATALOGUES = ("npm_tools.json", "business_tools.json")
SERVER_DESCRIPTIONS = {"filesystem": "Project files", "memory": "Knowledge graph memory"}


@dataclass(frozen=True)
class Query:
    text: str
    expected: tuple[str, ...]
    """``server.tool`` names (the tools' own names); any of them counts as a hit."""
    split: str


@dataclass(frozen=True)
class Score:
    queries: int
    top1: float
    top3: float
    mrr: float
    misses: tuple[tuple[str, tuple[str, ...]], ...]
    """Queries whose expected tools are not in the top 3, with the top 3 found."""


def catalogue() -> list[ToolInfo]:
    tools: list[ToolInfo] = []
    for name in CATALOGUES:
        servers: dict[str, list[dict[str, Any]]] = json.loads((DATA / name).read_text(encoding="utf-8"))
        for server, listed in servers.items():
            tools += [ToolInfo(server, t["name"], t["description"], t["inputSchema"], None) for t in listed]
    return tools


def servers(tools: Sequence[ToolInfo]) -> list[tuple[str, str | None]]:
    return [(s, SERVER_DESCRIPTIONS.get(s)) for s in dict.fromkeys(t.server for t in tools)]


def stub_index(tools: Sequence[ToolInfo] | None = None) -> StubIndex:
    tools = catalogue() if tools is None else tools
    return StubIndex.build(servers(tools), tools)


def queries(split: str | None = None) -> list[Query]:
    rows = [json.loads(line) for line in (DATA / "tool_queries.jsonl").read_text(encoding="utf-8").splitlines()]
    found = [Query(r["query"], tuple(r["expected"]), r["split"]) for r in rows if r]
    return [q for q in found if split is None or q.split == split]


def score(rank: Callable[[str], Sequence[str]], cases: Sequence[Query]) -> Score:
    """Score ``rank`` (a query → ``server.tool`` names, best first) on ``cases``."""
    top1 = top3 = 0
    reciprocal = 0.0
    misses: list[tuple[str, tuple[str, ...]]] = []
    for case in cases:
        found = list(rank(case.text))
        ranks = [found.index(e) + 1 for e in case.expected if e in found]
        best = min(ranks, default=0)
        top1 += best == 1
        top3 += 0 < best <= 3
        reciprocal += 1.0 / best if best else 0.0
        if not 0 < best <= 3:
            misses.append((case.text, tuple(found[:3])))
    n = max(1, len(cases))
    return Score(len(cases), top1 / n, top3 / n, reciprocal / n, tuple(misses))
