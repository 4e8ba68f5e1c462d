"""Hybrid search machinery shared by the script cache and ``search_tools``.

Full text (SQLite FTS5, BM25) and embeddings (cosine over a numpy matrix) each rank the documents;
reciprocal rank fusion (``rrf``) merges the two lists. ``fts_query`` turns what a user typed into a
safe FTS5 expression; ``VectorIndex`` holds vectors in memory; ``MemoryIndex`` puts both in memory
for small, fast-changing collections such as the downstream tools.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from .._lazy import LazyModule
from .embed import Embedder

if TYPE_CHECKING:
    import numpy as np

    from .embed import Vectors
else:
    np = LazyModule("numpy")

K = TypeVar("K", bound=Hashable)

RRF_K = 60
"""The constant of reciprocal rank fusion: score = sum of 1 / (RRF_K + rank)."""
CANDIDATES = 100
"""How many documents each ranking contributes to the fusion."""

STOPWORDS = frozenset(
    """a an the of to in on for and or is are be with by from at it its this that these those what which how
    my our your me i we you do does did can could should would will please get some any all using use via into
    as than then there here about""".split()
)
FTS_TOKENIZER = "porter unicode61"
"""Porter stemming over Unicode words; ``_`` and ``.`` separate words, so ``read_text_file`` is three."""


def query_terms(text: str) -> list[str]:
    """The words of a query worth matching: lower case, without stop words (all words if only stop words)."""
    words = [w for w in re.findall(r"\w+", text.lower().replace("_", " ")) if w]
    kept = [w for w in words if w not in STOPWORDS]
    return list(dict.fromkeys(kept or words))


def fts_query(text: str | Sequence[str]) -> str | None:
    """An FTS5 expression matching any of the query's words (each quoted, so no syntax leaks in)."""
    terms = query_terms(text) if isinstance(text, str) else list(text)
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


MATCH_BUDGET = 1500
"""Documents BM25 ranks per query, about: ranking costs time per matching document. When the query's
words match more, the most common words (lowest IDF, least telling) are left out of the full-text
query, keeping at least the rarest word; the embedding side still sees the whole query."""


def selective_terms(terms: Sequence[str], count: Callable[[str], int], budget: int = MATCH_BUDGET) -> list[str]:
    """The rarest terms whose match counts (from ``count``) add up to at most ``budget`` (at least one)."""
    if len(terms) < 2:
        return list(terms)
    counts = {t: count(t) for t in terms}
    if sum(counts.values()) <= budget:
        return list(terms)
    kept: set[str] = set()
    used = 0
    for term in sorted(terms, key=lambda t: counts[t]):
        if kept and used + counts[term] > budget:
            break
        kept.add(term)
        used += counts[term]
    return [t for t in terms if t in kept]


def rrf(rankings: Iterable[Sequence[K]], k: int = RRF_K) -> list[tuple[K, float]]:
    """Reciprocal rank fusion of several rankings (best first) → ``(key, score)``, best first."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores.items(), key=lambda item: -item[1])


@dataclass
class VectorIndex(Generic[K]):
    """Unit vectors by key, searched by cosine similarity (one matrix product)."""

    dim: int
    keys: list[K] = field(default_factory=list)
    _rows: dict[K, int] = field(default_factory=dict)
    _matrix: Vectors = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    _size: int = 0

    def __post_init__(self) -> None:
        self._matrix = np.zeros((64, self.dim), dtype=np.float32)

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def add(self, keys: Sequence[K], vectors: Vectors) -> None:
        """Add or replace vectors (rows of ``vectors``, already normalised)."""
        for key, vector in zip(keys, vectors, strict=True):
            row = self._rows.get(key)
            if row is None:
                if self._size == len(self._matrix):
                    grown = np.zeros((max(64, 2 * self._size), self.dim), dtype=np.float32)
                    grown[: self._size] = self._matrix[: self._size]
                    self._matrix = grown
                row = self._size
                self._rows[key] = row
                self.keys.append(key)
                self._size += 1
            self._matrix[row] = vector

    def search(self, query: Vectors, limit: int, allowed: Callable[[K], bool] | None = None) -> list[tuple[K, float]]:
        """The ``limit`` nearest keys with their cosine similarity, best first."""
        if not self._size:
            return []
        # einsum runs in this thread: a BLAS matrix-vector product spreads over threads that a busy host slows down
        scores = np.einsum("ij,j->i", self._matrix[: self._size], np.asarray(query, dtype=np.float32).reshape(-1))
        if allowed is None:
            count = min(limit, self._size)
            top = np.argpartition(-scores, count - 1)[:count]
            top = top[np.argsort(-scores[top])]
            return [(self.keys[i], float(scores[i])) for i in top]
        order = np.argsort(-scores)
        out: list[tuple[K, float]] = []
        for i in order:
            key = self.keys[int(i)]
            if allowed(key):
                out.append((key, float(scores[i])))
                if len(out) >= limit:
                    break
        return out


@dataclass(frozen=True)
class Hit(Generic[K]):
    """One fused result: its key, the RRF score, and where each ranking put it (1-based, or None)."""

    key: K
    score: float
    text_rank: int | None
    semantic_rank: int | None
    similarity: float | None


def fuse(text: Sequence[K], semantic: Sequence[tuple[K, float]], limit: int, k: int = RRF_K) -> list[Hit[K]]:
    """Fuse a full-text ranking and a semantic ranking (with similarities) into ``limit`` hits."""
    text_rank = {key: i + 1 for i, key in enumerate(text)}
    semantic_rank = {key: i + 1 for i, (key, _) in enumerate(semantic)}
    similarity = dict(semantic)
    fused = rrf([list(text), [key for key, _ in semantic]], k)
    # equal fused scores (one list's first is the other's second) are settled by the embedding's similarity
    fused.sort(key=lambda item: (-round(item[1], 12), -similarity.get(item[0], -1.0)))
    return [
        Hit(key, score, text_rank.get(key), semantic_rank.get(key), similarity.get(key)) for key, score in fused[:limit]
    ]


class MemoryIndex(Generic[K]):
    """An in-memory hybrid index over a few thousand documents with named text fields.

    ``weights`` gives each field's BM25 weight. Rebuild it (it is cheap) when the documents change.
    """

    def __init__(self, fields: Mapping[str, float], embedder: Embedder | None) -> None:
        self._fields = list(fields)
        self._weights = ", ".join(str(float(w)) for w in fields.values())
        self._embedder = embedder
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        columns = ", ".join(self._fields)
        self._db.execute(f"CREATE VIRTUAL TABLE docs USING fts5({columns}, tokenize='{FTS_TOKENIZER}')")
        self._keys: list[K] = []
        self._vectors: VectorIndex[K] | None = VectorIndex(embedder.dim) if embedder else None

    def close(self) -> None:
        self._db.close()

    def add(self, documents: Sequence[tuple[K, Mapping[str, str], str]]) -> None:
        """Add ``(key, {field: text}, text to embed)`` documents."""
        with self._db:
            for key, values, _ in documents:
                self._keys.append(key)
                row = [values.get(f, "") for f in self._fields]
                placeholders = ", ".join("?" for _ in self._fields)
                self._db.execute(
                    f"INSERT INTO docs(rowid, {', '.join(self._fields)}) VALUES (?, {placeholders})",
                    [len(self._keys), *row],
                )
        if self._vectors is not None and self._embedder is not None and documents:
            self._vectors.add([key for key, _, _ in documents], self._embedder.embed([t for _, _, t in documents]))

    def search(self, query: str, limit: int, allowed: Callable[[K], bool] | None = None) -> list[Hit[K]]:
        text_ranking: list[K] = []
        expression = fts_query(query)
        if expression is not None:
            rows = self._db.execute(
                f"SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs, {self._weights}) LIMIT ?",
                (expression, CANDIDATES * 4),
            ).fetchall()
            text_ranking = [self._keys[rowid - 1] for (rowid,) in rows]
            if allowed is not None:
                text_ranking = [k for k in text_ranking if allowed(k)]
            text_ranking = text_ranking[:CANDIDATES]
        semantic: list[tuple[K, float]] = []
        if self._vectors is not None and self._embedder is not None and query.strip():
            semantic = self._vectors.search(self._embedder.embed([query])[0], CANDIDATES, allowed)
        return fuse(text_ranking, semantic, limit)
