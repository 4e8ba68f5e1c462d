"""``ScriptStore``: every successful script, and its search, in the stores' database (``database``).

- The database is the SQLite file ``<cache root>/scripts.db`` (``database._sqlite``: WAL, ``BEGIN IMMEDIATE``,
  a broken file moved aside) or PostgreSQL (``database._postgres``); the store is given a path (it opens a
  SQLite file of its own) or an open ``Database`` (shared; the store does not close it).
- Every row belongs to a tenant; every method takes ``tenant`` and reads or writes that tenant's rows only (a
  script's hash is unique per tenant; the counters are per tenant).
- Full text: SQLite FTS5 ranked by BM25 (weights 4, 2, 1 for description, tool names, code), or PostgreSQL's
  ``tsvector`` (weights A, B, C) ranked by ``ts_rank``; the embedding side and the fusion are the same for both.
- Vectors are stored as ``float32`` bytes with the model's name and loaded into a ``VectorIndex`` once per
  process; with PostgreSQL and pgvector (``vectors_in_sql``) they are also an ``embedding vector`` and the
  nearest are found in SQL (``<=>``), so no process holds them. Scripts stored without a vector (or with
  another model's, or before the model was loaded: storing never loads it) are embedded on the next search.
  Another process's writes show in ``Database.changes``.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from ..database import Database, Tx, open_database
from ..database._sqlite import BUSY_TIMEOUT_MS, SQLiteDatabase
from .describe import search_text
from .embed import Embedder, EmbedderUnavailable
from .keys import KEY_VERSION
from .models import NewScript, SearchResult, StoredScript, row_to_script

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy")
from .search import CANDIDATES, VectorIndex, fts_query, fuse, query_terms, selective_terms

logger = logging.getLogger(__name__)

__all__ = ["BUSY_TIMEOUT_MS", "ScriptStore"]

_FTS_WEIGHTS = "4.0, 2.0, 1.0"  # description, tool names, code
_TS_WEIGHTS = "'{0.1, 0.25, 0.5, 1.0}'"  # D, C (code), B (tool names), A (description): the same ratios
_COUNT = (
    "INSERT INTO counters(tenant, name, value) VALUES (?, ?, ?)"
    " ON CONFLICT(tenant, name) DO UPDATE SET value = counters.value + excluded.value"
)


def bump(tx: Tx, tenant: str, name: str, by: int = 1) -> None:
    """Add ``by`` to one of a tenant's counters (made at its first use)."""
    tx.execute(_COUNT, (tenant, name, by))


def ts_query(terms: Sequence[str]) -> str | None:
    """A ``to_tsquery`` text matching any of the words (only letters and digits reach it: no syntax leaks in)."""
    words = ["".join(c for c in t if c.isalnum()) for t in terms]
    kept = [w for w in words if w]
    return " | ".join(kept) if kept else None


@dataclass
class ScriptStore:
    """The scripts of every tenant. Thread-safe; open it before use, close it after."""

    target: Path | Database
    """A SQLite file (opened by ``open``, closed by ``close``), or an open database (shared, left open)."""
    embedder: Embedder | None = None
    problems: list[str] = field(default_factory=list)
    """What was wrong with the file when it was opened (and where it was moved)."""
    _db: Database | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _vectors: VectorIndex[int] | None = None
    _vector_max_id: int = 0
    _owners: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Script id → (tenant, language), for the vectors in ``_vectors``."""
    _match_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    """(tenant, word) → how many of its scripts match, as counted by the last search (PostgreSQL's IDF)."""
    _writes: int = 0
    _synced: tuple[int, int] | None = None
    """``(Database.changes(), own writes)`` when the vectors were last synced: unchanged means no sync."""

    # ----- opening -------------------------------------------------------------------------

    def open(self) -> ScriptStore:
        if isinstance(self.target, Path):
            self._db = open_database(self.target)
        else:
            self._db = self.target
        self.problems.extend(self._db.problems)
        return self

    def close(self) -> None:
        with self._lock:
            if self._db is not None and isinstance(self.target, Path):
                self._db.close()
            self._db = None

    @property
    def db(self) -> Database:
        if self._db is None:
            raise sqlite3.ProgrammingError("the script store is not open")
        return self._db

    @property
    def path(self) -> str:
        """Where the scripts are: the file's path, or the server (without its password)."""
        return str(self.target) if isinstance(self.target, Path) else self.target.where

    @property
    def _in_sql(self) -> bool:
        """Whether the nearest vectors are found in SQL (pgvector) rather than in ``_vectors``."""
        return bool(getattr(self.db, "vectors_in_sql", False))

    @property
    def conn(self) -> sqlite3.Connection:
        """The SQLite connection (tests and tools that speak SQLite directly)."""
        db = self.db
        if not isinstance(db, SQLiteDatabase):
            raise sqlite3.ProgrammingError("the script store is not a SQLite file")
        return db.conn

    def _write(self, body: Callable[[Tx], Any], *, changes: bool = True) -> Any:
        def wrapped(tx: Tx) -> Any:
            result = body(tx)
            if changes:
                self.db.note_change(tx)
            return result

        with self._lock:
            result = self.db.write(wrapped, scope="scripts")
            self._writes += 1
            return result

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        return self.db.read(sql, args)

    # ----- scripts -------------------------------------------------------------------------

    def _embed(self, texts: Sequence[str]) -> np.ndarray | None:
        if self.embedder is None or not texts:
            return None
        try:
            return self.embedder.embed(texts)
        except EmbedderUnavailable:
            logger.exception("embedding failed; the script is stored for full-text search only")
            return None

    def put(self, script: NewScript, *, tenant: str, count_lookup: bool = False) -> StoredScript:
        """Store a successful run: a new row, or the same key's row updated with this run's results.

        ``count_lookup`` also counts the cache lookup that missed before this run (same transaction).
        """
        return self.put_many([script], tenant=tenant, count_lookups=int(count_lookup))[0]

    def put_many(self, scripts: Sequence[NewScript], *, tenant: str, count_lookups: int = 0) -> list[StoredScript]:
        """Store several runs in one transaction (embedded in one batch once the model is loaded; until the first
        search loads it, they are stored without a vector and that search embeds them)."""
        loaded = getattr(self.embedder, "loaded", True)
        texts = [search_text(s.description, s.code, [t.name for t in s.tools]) for s in scripts] if loaded else []
        vectors = self._embed(texts)
        now = time.time()

        def body(tx: Tx) -> list[int]:
            ids: list[int] = []
            for i, script in enumerate(scripts):
                ids.append(self._upsert(tx, tenant, script, None if vectors is None else vectors[i], now))
            if count_lookups:
                bump(tx, tenant, "lookups", count_lookups)
            return ids

        ids: list[int] = self._write(body)
        stored = [self.get_by_id(i, tenant=tenant) for i in ids]
        return [s for s in stored if s is not None]

    def _upsert(self, tx: Tx, tenant: str, script: NewScript, vector: np.ndarray | None, now: float) -> int:
        values = {
            "output": script.output,
            "return_value": json.dumps(script.return_value, default=repr),
            "truncated": int(script.truncated),
            "files": json.dumps(script.files),
            "tool_calls": script.tool_calls,
            "network": int(script.network),
            "network_use": json.dumps(script.network_use) if script.network_use is not None else None,
            "pii_tokens": script.pii_tokens,
            "execution_ms": script.execution_ms,
        }
        row = tx.execute(
            "SELECT id, description_given FROM scripts WHERE tenant = ? AND hash = ?", (tenant, script.hash)
        ).fetchone()
        if row is None:
            tools = [{"server": t.server, "tool": t.tool, "schema_hash": t.schema_hash} for t in script.tools]
            inserted = tx.execute(
                "INSERT INTO scripts(tenant, hash, code_key, key_version, language, runner, code, packages,"
                " description, description_given, tools, tool_names, created_at, last_run_at, last_used_at,"
                f" {', '.join(values)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                f" {', '.join('?' for _ in values)}) RETURNING id",
                (
                    tenant,
                    script.hash,
                    script.code_key,
                    script.key_version,
                    script.language,
                    script.runner,
                    script.code,
                    json.dumps(sorted(script.packages)),
                    script.description,
                    int(script.description_given),
                    json.dumps(tools),
                    " ".join(t.name for t in script.tools),
                    now,
                    now,
                    now,
                    *values.values(),
                ),
            ).fetchall()
            script_id = int(inserted[0][0])
            described = True
        else:
            script_id = int(row["id"])
            # a description the caller gave is not replaced by one derived from the code
            described = not (bool(row["description_given"]) and not script.description_given)
            updates = dict(values)
            if described:
                updates |= {"description": script.description, "description_given": int(script.description_given)}
            assignments = ", ".join(f"{k} = ?" for k in updates)
            tx.execute(
                f"UPDATE scripts SET {assignments}, run_count = run_count + 1, last_run_at = ?, last_used_at = ?"
                " WHERE id = ?",
                (*updates.values(), now, now, script_id),
            )
        if described and vector is not None and self.embedder is not None:
            _put_vectors(tx, [(script_id, self.embedder.name, vector.astype(np.float32).tobytes())], self._in_sql)
        bump(tx, tenant, "stores")
        return script_id

    def get_by_id(self, script_id: int, *, tenant: str) -> StoredScript | None:
        rows = self._read("SELECT * FROM scripts WHERE tenant = ? AND id = ?", (tenant, script_id))
        return row_to_script(rows[0]) if rows else None

    def get(self, hash_or_prefix: str, *, tenant: str) -> StoredScript | None:
        """A script by its hash, or by a unique prefix of at least 6 characters."""
        key = hash_or_prefix.strip().lower()
        if len(key) < 6 or not all(c in "0123456789abcdef" for c in key):
            return None
        rows = self._read(
            "SELECT * FROM scripts WHERE tenant = ? AND hash >= ? AND hash < ? LIMIT 2", (tenant, key, key + "g")
        )
        return row_to_script(rows[0]) if len(rows) == 1 else None

    def candidates(self, code_key: str, *, tenant: str) -> list[StoredScript]:
        """The stored runs of one code key (usually one), most recently run first; only rows keyed
        with the current ``KEY_VERSION`` (older rows are kept, but never answer a request)."""
        rows = self._read(
            "SELECT * FROM scripts WHERE tenant = ? AND code_key = ? AND key_version = ? ORDER BY last_run_at DESC",
            (tenant, code_key, KEY_VERSION),
        )
        return [row_to_script(r) for r in rows]

    def record_lookup(self, script_id: int | None, *, tenant: str) -> None:
        """Count one cache lookup; with ``script_id`` (of this tenant), a replay of that script."""

        def body(tx: Tx) -> None:
            bump(tx, tenant, "lookups")
            if script_id is not None:
                changed = tx.execute(
                    "UPDATE scripts SET hit_count = hit_count + 1, last_used_at = ? WHERE tenant = ? AND id = ?",
                    (time.time(), tenant, script_id),
                ).rowcount
                if changed:
                    bump(tx, tenant, "hits")
                    bump(tx, tenant, "replays")

        self._write(body, changes=False)

    def list(self, language: str | None = None, limit: int = 20, offset: int = 0, *, tenant: str) -> list[StoredScript]:
        """Scripts, most recently used first."""
        where, args = ("AND language = ?", [language]) if language else ("", [])
        rows = self._read(
            f"SELECT * FROM scripts WHERE tenant = ? {where} ORDER BY last_used_at DESC, id DESC LIMIT ? OFFSET ?",
            (tenant, *args, limit, offset),
        )
        return [row_to_script(r) for r in rows]

    def iter_all(self, *, tenant: str) -> Iterator[StoredScript]:
        """Every script of the tenant, oldest first (for export)."""
        last = 0
        while True:
            rows = self._read("SELECT * FROM scripts WHERE tenant = ? AND id > ? ORDER BY id LIMIT 500", (tenant, last))
            if not rows:
                return
            for row in rows:
                yield row_to_script(row)
            last = rows[-1]["id"]

    def prune(self, older_than: float, *, tenant: str) -> int:
        """Delete the tenant's scripts not used for ``older_than`` seconds; returns how many went."""
        cutoff = time.time() - older_than
        deleted: int = self._write(
            lambda tx: (
                tx.execute("DELETE FROM scripts WHERE tenant = ? AND last_used_at < ?", (tenant, cutoff)).rowcount
            )
        )
        if deleted:
            with self._lock:
                self._vectors, self._synced = None, None  # rebuilt on the next search
        return deleted

    def stats(self, *, tenant: str) -> dict[str, Any]:
        db = self.db
        total = db.read("SELECT count(*) FROM scripts WHERE tenant = ?", (tenant,))[0][0]
        per_language = {
            r[0]: {"scripts": int(r[1]), "runs": int(r[2]), "hits": int(r[3])}
            for r in db.read(
                "SELECT language, count(*), sum(run_count), sum(hit_count) FROM scripts WHERE tenant = ?"
                " GROUP BY language",
                (tenant,),
            )
        }
        counters = {r[0]: int(r[1]) for r in db.read("SELECT name, value FROM counters WHERE tenant = ?", (tenant,))}
        vectors = db.read(
            "SELECT count(*) FROM vectors v JOIN scripts s ON s.id = v.script_id WHERE s.tenant = ?", (tenant,)
        )[0][0]
        lookups = counters.get("lookups", 0)
        return {
            "path": self.path,
            "backend": db.dialect,
            "scripts": int(total),
            "sizeBytes": db.size_bytes(),
            "perLanguage": per_language,
            "lookups": lookups,
            "hits": counters.get("hits", 0),
            "hitRate": round(counters.get("hits", 0) / lookups, 4) if lookups else None,
            "stored": counters.get("stores", 0),
            "vectors": int(vectors),
            "embedder": self.embedder.name if self.embedder else None,
            "problems": list(self.problems),
        }

    # ----- search --------------------------------------------------------------------------

    def _sync_vectors(self) -> VectorIndex[int] | None:
        """Bring the in-memory vectors (of every tenant) up to date with the database (new rows, other
        processes, backfill)."""
        embedder = self.embedder
        if embedder is None:
            return None
        db = self.db
        state = (db.changes(), self._writes)
        if self._vectors is not None and state == self._synced:
            return self._vectors
        max_id, count = db.read("SELECT coalesce(max(id), 0), count(*) FROM vectors WHERE model = ?", (embedder.name,))[
            0
        ]
        if self._vectors is None or max_id < self._vector_max_id or count < len(self._vectors):
            self._vectors, self._vector_max_id = VectorIndex(embedder.dim), 0
            self._owners.clear()
        index = self._vectors
        if max_id > self._vector_max_id:
            rows = db.read(
                "SELECT v.id, v.script_id, v.vector, s.tenant, s.language FROM vectors v"
                " JOIN scripts s ON s.id = v.script_id WHERE v.model = ? AND v.id > ?",
                (embedder.name, self._vector_max_id),
            )
            if rows:
                matrix = np.frombuffer(b"".join(bytes(r["vector"]) for r in rows), dtype=np.float32).reshape(
                    len(rows), -1
                )
                index.add([int(r["script_id"]) for r in rows], matrix)
                self._owners.update({int(r["script_id"]): (r["tenant"], r["language"]) for r in rows})
            self._vector_max_id = int(max_id)
        scripts = db.read("SELECT count(*) FROM scripts")[0][0]
        if scripts > len(index):
            self._backfill(index)
        self._synced = (db.changes(), self._writes)
        return index

    def _backfill(self, index: VectorIndex[int] | None) -> None:
        """Embed scripts that have no vector from the current model (new model, or stored without one; with
        pgvector, also one copied without its ``embedding``)."""
        assert self.embedder is not None
        complete = " AND embedding IS NOT NULL" if self._in_sql else ""
        missing = self.db.read(
            "SELECT id, tenant, language, description, code, tool_names FROM scripts"
            f" WHERE id NOT IN (SELECT script_id FROM vectors WHERE model = ?{complete})",
            (self.embedder.name,),
        )
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            vectors = self._embed([search_text(r["description"], r["code"], r["tool_names"].split()) for r in chunk])
            if vectors is None:
                return
            model = self.embedder.name
            rows = [(int(r["id"]), model, v.astype(np.float32).tobytes()) for r, v in zip(chunk, vectors, strict=True)]
            self._write(lambda tx, rows=rows: _put_vectors(tx, rows, self._in_sql))
            if index is None:
                continue
            index.add([int(r["id"]) for r in chunk], vectors)
            self._owners.update({int(r["id"]): (r["tenant"], r["language"]) for r in chunk})
        self._vector_max_id = int(self.db.read("SELECT coalesce(max(id), 0) FROM vectors")[0][0])

    def _matches(self, tenant: str, term: str) -> int:
        if self.db.dialect == "postgresql":
            query = ts_query([term])
            if query is None:
                return 0
            known = self._match_counts.get((tenant, query))
            if known is not None:
                return known
            sql = "SELECT count(*) FROM scripts WHERE tenant = ? AND search @@ to_tsquery('english', ?)"
            count = int(self.db.read(sql, (tenant, query))[0][0])
            self._match_counts[(tenant, query)] = count
            return count
        return int(self.db.read("SELECT count(*) FROM scripts_fts WHERE scripts_fts MATCH ?", (f'"{term}"',))[0][0])

    def _text_ranking(self, tenant: str, terms: Sequence[str], language: str | None) -> list[int]:
        """The tenant's scripts by full-text rank (best first, at most ``CANDIDATES``)."""
        db = self.db
        lang, args = ("AND language = ?", [language]) if language else ("", [])
        if db.dialect == "postgresql":
            return self._ts_ranking(tenant, terms, lang, args)
        expression = fts_query(terms)
        if expression is None:
            return []
        # rank inside the FTS index first: joining every match to its row is slow; the matches of other tenants
        # and languages are filtered after (a few more are ranked for that)
        rows = db.read(
            "SELECT rowid FROM scripts_fts WHERE scripts_fts MATCH ?"
            f" ORDER BY bm25(scripts_fts, {_FTS_WEIGHTS}) LIMIT ?",
            (expression, CANDIDATES * 4),
        )
        ranking = [int(r[0]) for r in rows]
        if ranking:
            marks = ", ".join("?" for _ in ranking)
            same = {
                int(r[0])
                for r in db.read(
                    f"SELECT id FROM scripts WHERE tenant = ? {lang} AND id IN ({marks})", (tenant, *args, *ranking)
                )
            }
            ranking = [i for i in ranking if i in same]
        if len(rows) == CANDIDATES * 4 and len(ranking) < CANDIDATES:
            # other tenants' (or languages') matches crowded the window: rank this tenant's matches alone
            rows = db.read(
                "SELECT f.rowid FROM scripts_fts f JOIN scripts s ON s.id = f.rowid WHERE scripts_fts MATCH ?"
                f" AND s.tenant = ? {lang.replace('language', 's.language')}"
                f" ORDER BY bm25(scripts_fts, {_FTS_WEIGHTS}) LIMIT ?",
                (expression, tenant, *args, CANDIDATES),
            )
            ranking = [int(r[0]) for r in rows]
        return ranking[:CANDIDATES]

    def _ts_ranking(self, tenant: str, terms: Sequence[str], lang: str, args: list[Any]) -> list[int]:
        """PostgreSQL's ranking: each word's ``ts_rank`` (weights A/B/C) times its inverse document frequency among
        the tenant's scripts, summed: ``ts_rank`` alone has no IDF, and BM25's preference for the rarer words of a
        query is what the fusion was tuned with."""
        words = [w for w in (ts_query([t]) for t in terms) if w is not None]
        query = ts_query(words)
        if query is None:
            return []
        total = max(1, int(self.db.read("SELECT count(*) FROM scripts WHERE tenant = ?", (tenant,))[0][0]))
        counts = {w: self._match_counts.get((tenant, w)) for w in words}
        weights = [math.log(1 + (total - (c or 0) + 0.5) / ((c or 0) + 0.5)) for c in counts.values()]
        score = " + ".join(f"? * ts_rank({_TS_WEIGHTS}, search, to_tsquery('english', ?))" for _ in words)
        score_args = [x for pair in zip(weights, words, strict=True) for x in pair]
        rows = self.db.read(
            f"SELECT id FROM scripts WHERE tenant = ? {lang} AND search @@ to_tsquery('english', ?)"
            f" ORDER BY ({score}) DESC, id LIMIT ?",
            (tenant, *args, query, *score_args, CANDIDATES),
        )
        return [int(r[0]) for r in rows]

    def search(
        self,
        query: str,
        *,
        tenant: str,
        language: str | None = None,
        limit: int = 5,
        is_stale: Callable[[StoredScript], bool] | None = None,
    ) -> list[SearchResult]:
        """Hybrid search of the tenant's scripts: full text and embeddings fused by reciprocal rank; ``language``
        filters."""
        with self._lock:
            self._match_counts.clear()
            words = query_terms(query)
            if self.db.dialect == "postgresql" and len(words) > 1:
                self._count_all(tenant, words)  # one statement for every word's count
            terms = selective_terms(words, lambda term: self._matches(tenant, term))
            text_ranking = self._text_ranking(tenant, terms, language)
            semantic: list[tuple[int, float]] = []
            if self._in_sql:
                semantic = self._nearest(query, tenant, language)
                index = None
            else:
                index = self._sync_vectors()
            if index is not None and self.embedder is not None and query.strip():
                vector = self._embed([query])
                if vector is not None:
                    owners = self._owners
                    wanted = (tenant, language)

                    def allowed(key: int) -> bool:
                        owner = owners.get(key)
                        return owner is not None and owner[0] == tenant and (language is None or owner == wanted)

                    semantic = index.search(vector[0], CANDIDATES, allowed)
            hits = fuse(text_ranking, semantic, limit)
            found = self._by_ids([hit.key for hit in hits], tenant)
            results: list[SearchResult] = []
            for hit in hits:
                script = found.get(hit.key)
                if script is not None:
                    results.append(SearchResult(script, hit, None if is_stale is None else is_stale(script)))
        return results

    def _nearest(self, query: str, tenant: str, language: str | None) -> list[tuple[int, float]]:
        """pgvector: the tenant's ``CANDIDATES`` nearest scripts by cosine similarity, found in SQL (scripts
        without a vector are embedded first, when another process's writes show)."""
        embedder = self.embedder
        if embedder is None or not query.strip():
            return []
        state = (self.db.changes(), self._writes)
        if state != self._synced:
            self._backfill(None)
            self._synced = (self.db.changes(), self._writes)
        vector = self._embed([query])
        if vector is None:
            return []
        text = _vector_text(vector[0].astype(np.float32).tobytes())
        lang, args = ("AND s.language = ?", [language]) if language else ("", [])
        rows = self._read(
            "SELECT v.script_id, 1 - (v.embedding <=> ?::vector) FROM vectors v JOIN scripts s ON s.id = v.script_id"
            f" WHERE s.tenant = ? {lang} AND v.model = ? AND v.embedding IS NOT NULL"
            " ORDER BY v.embedding <=> ?::vector, v.script_id LIMIT ?",
            (text, tenant, *args, embedder.name, text, CANDIDATES),
        )
        return [(int(r[0]), float(r[1])) for r in rows]

    def _by_ids(self, ids: Sequence[int], tenant: str) -> dict[int, StoredScript]:
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        rows = self._read(f"SELECT * FROM scripts WHERE tenant = ? AND id IN ({marks})", (tenant, *ids))
        return {int(r["id"]): row_to_script(r) for r in rows}

    def _count_all(self, tenant: str, terms: Sequence[str]) -> None:
        """PostgreSQL: how many of the tenant's scripts match each word, in one statement (``_match_counts``)."""
        words = list(dict.fromkeys(w for w in (ts_query([t]) for t in terms) if w is not None))
        if not words:
            return
        counts = ", ".join("count(*) FILTER (WHERE search @@ to_tsquery('english', ?))" for _ in words)
        row = self._read(f"SELECT {counts} FROM scripts WHERE tenant = ?", (*words, tenant))[0]
        self._match_counts.update({(tenant, w): int(row[i]) for i, w in enumerate(words)})


def _put_vectors(tx: Tx, rows: Sequence[tuple[int, str, bytes]], in_sql: bool = False) -> None:
    """Replace scripts' vectors (a replaced vector gets a new id, so that other processes load it again); with
    ``in_sql``, pgvector's ``embedding`` too."""
    for script_id, _, _ in rows:
        tx.execute("DELETE FROM vectors WHERE script_id = ?", (script_id,))
    if in_sql:
        tx.executemany(
            "INSERT INTO vectors(script_id, model, vector, embedding) VALUES (?, ?, ?, ?::vector)",
            [(*row, _vector_text(row[2])) for row in rows],
        )
        return
    tx.executemany("INSERT INTO vectors(script_id, model, vector) VALUES (?, ?, ?)", rows)


def _vector_text(data: bytes) -> str:
    """pgvector's text form of float32 bytes (``[0.1,0.2,…]``)."""
    return "[" + ",".join(repr(float(x)) for x in np.frombuffer(data, dtype=np.float32)) + "]"
