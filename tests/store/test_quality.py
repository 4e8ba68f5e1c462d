"""The search quality set on PostgreSQL (tsvector and ts_rank for the words; the same embeddings and fusion):
no worse than the targets SQLite is held to (tests/cache/test_quality.py)."""

from __future__ import annotations

import time

import pytest

from mcp_code_mode.cache.embed import StaticEmbedder
from mcp_code_mode.database import Database

from ..cache.test_quality import measure
from .conftest import TABLES


def test_hybrid_search_on_postgresql_finds_the_right_script_in_the_top_three(
    pg_database: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.perf_counter()
    recall, mrr = measure(pg_database, StaticEmbedder())
    hybrid_s = time.perf_counter() - started
    pg_database.write(lambda tx: tx.execute(f"TRUNCATE {TABLES} RESTART IDENTITY"))
    text_recall, text_mrr = measure(pg_database, None)
    with capsys.disabled():
        print(
            f"\nquality set on PostgreSQL: hybrid recall@3={recall:.3f} MRR={mrr:.3f} ({hybrid_s:.1f} s to store and "
            f"query); tsvector alone recall@3={text_recall:.3f} MRR={text_mrr:.3f}"
        )
    assert recall >= 0.9
    assert mrr >= 0.8
    assert recall >= text_recall
