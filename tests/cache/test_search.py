"""The hybrid search machinery: query parsing, fusion, vectors and the in-memory index."""

from __future__ import annotations

import numpy as np

from mcp_code_mode.cache.embed import HashingEmbedder
from mcp_code_mode.cache.search import MemoryIndex, VectorIndex, fts_query, fuse, rrf


def test_fts_query_quotes_every_word_so_no_fts_syntax_leaks_through() -> None:
    assert fts_query('read the "file" NEAR(a b) OR*') == '"read" OR "file" OR "near" OR "b"'
    assert fts_query("the of") == '"the" OR "of"'
    assert fts_query("  ?! ") is None


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    fused = rrf([["a", "b", "c"], ["c", "b", "d"]])
    assert {key for key, _ in fused[:2]} == {"b", "c"}
    scores = dict(fused)
    assert min(scores["b"], scores["c"]) > max(scores["a"], scores["d"])
    hits = fuse(["a", "b"], [("b", 0.9), ("z", 0.5)], limit=2)
    assert hits[0].key == "b" and hits[0].text_rank == 2 and hits[0].semantic_rank == 1 and hits[0].similarity == 0.9
    assert len(hits) == 2


def test_the_vector_index_grows_replaces_and_filters() -> None:
    index: VectorIndex[int] = VectorIndex(dim=3)
    eye = np.eye(3, dtype=np.float32)
    index.add(list(range(100)), np.tile(eye[0], (100, 1)))
    index.add([7], eye[1:2])
    assert len(index) == 100
    assert index.search(eye[1], 1)[0] == (7, 1.0)
    odd = index.search(eye[1], 3, allowed=lambda k: k % 2 == 0)
    assert all(k % 2 == 0 for k, _ in odd) and len(odd) == 3


def test_the_memory_index_ranks_by_text_and_meaning_and_filters() -> None:
    index: MemoryIndex[str] = MemoryIndex({"name": 3.0, "body": 1.0}, HashingEmbedder())
    try:
        index.add(
            [
                ("read", {"name": "read file", "body": "Read the contents of a file"}, "read file contents"),
                ("write", {"name": "write file", "body": "Write text to a file"}, "write text to a file"),
                ("graph", {"name": "read graph", "body": "The whole knowledge graph"}, "knowledge graph"),
            ]
        )
        assert index.search("read the file contents", 3)[0].key == "read"
        assert [h.key for h in index.search("read", 3, allowed=lambda k: k != "read")][0] == "graph"
        assert index.search("", 3) == []
    finally:
        index.close()
