"""Search quality on the query set: recall@3 and MRR with the real model (target recall@3 >= 0.9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_code_mode.cache.embed import Embedder, StaticEmbedder
from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.database import Database

from .helpers import new_script
from .quality_set import QUERIES, SCRIPTS


def measure(tmp_path: Path | Database, embedder: Embedder | None) -> tuple[float, float]:
    """Recall@3 and MRR of the query set in a new SQLite file under ``tmp_path``, or in an empty ``Database``."""
    target = tmp_path / f"{embedder.name if embedder else 'fts'}.db" if isinstance(tmp_path, Path) else tmp_path
    store = ScriptStore(target, embedder).open()
    try:
        ids = {
            store.put(new_script(s.code, tools=s.tools, description=s.description), tenant="default").hash: s.id
            for s in SCRIPTS
        }
        hits, reciprocal = 0, 0.0
        for query in QUERIES:
            ranked = [ids[r.script.hash] for r in store.search(query.text, limit=10, tenant="default")]
            rank = next((i for i, sid in enumerate(ranked) if sid in query.expected), None)
            hits += rank is not None and rank < 3
            reciprocal += 1 / (rank + 1) if rank is not None else 0.0
        return hits / len(QUERIES), reciprocal / len(QUERIES)
    finally:
        store.close()


def test_the_query_set_is_big_enough_and_consistent() -> None:
    ids = [s.id for s in SCRIPTS]
    assert len(SCRIPTS) >= 60 and len(QUERIES) >= 30 and len(set(ids)) == len(ids)
    assert all(e in ids for q in QUERIES for e in q.expected)


def test_hybrid_search_finds_the_right_script_in_the_top_three(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recall, mrr = measure(tmp_path, StaticEmbedder())
    text_recall, text_mrr = measure(tmp_path, None)
    with capsys.disabled():
        print(
            f"\nquality set: hybrid recall@3={recall:.3f} MRR={mrr:.3f}; "
            f"FTS5 alone recall@3={text_recall:.3f} MRR={text_mrr:.3f}"
        )
    assert recall >= 0.9
    assert mrr >= 0.8
    assert recall >= text_recall
