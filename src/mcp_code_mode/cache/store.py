"""``ScriptStore``: the SQLite file that keeps every successful script, and its search.

- WAL mode, ``synchronous=NORMAL``: a committed transaction survives ``kill -9`` of the process (it
  is in the WAL file); several processes read and write one file, each write a short
  ``BEGIN IMMEDIATE`` transaction, waiting up to ``busy_timeout`` for another writer.
- Opening checks the file: one that is not a database, fails ``PRAGMA quick_check`` or has a schema
  newer than this build knows is renamed to ``<name>.<reason>-<time>`` (with its WAL), reported in
  ``problems`` and the log, and a new file is started. Nothing is overwritten.
- Vectors are stored as ``float32`` BLOBs with the model's name and loaded into a ``VectorIndex``
  once per process; scripts stored without a vector (or with another model's, or before the model was
  loaded: storing never loads it) are embedded on the next search.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import LazyModule
from .describe import search_text
from .embed import Embedder, EmbedderUnavailable
from .keys import KEY_VERSION
from .models import NewScript, SearchResult, StoredScript, row_to_script
from .schema import MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    import numpy as np
else:
    np = LazyModule("numpy")
from .search import CANDIDATES, VectorIndex, fts_query, fuse, query_terms, selective_terms

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
_FTS_WEIGHTS = "4.0, 2.0, 1.0"  # description, tool names, code


@dataclass
class ScriptStore:
    """One cache file. Thread-safe (one connection behind a lock); open it before use, close it after."""

    path: Path
    embedder: Embedder | None = None
    problems: list[str] = field(default_factory=list)
    """What was wrong with the file when it was opened (and where it was moved)."""
    _conn: sqlite3.Connection | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _vectors: VectorIndex[int] | None = None
    _vector_max_id: int = 0
    _languages: dict[int, str] = field(default_factory=dict)
    _writes: int = 0
    _synced: tuple[int, int] | None = None
    """``(PRAGMA data_version, own writes)`` when the vectors were last synced: unchanged means no sync."""

    # ----- opening -------------------------------------------------------------------------

    def open(self) -> ScriptStore:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            reason = self._try_open()
            if reason is None:
                return self
            self._move_aside(reason)
        raise sqlite3.DatabaseError(f"{self.path}: could not open a usable cache database")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn

    def _try_open(self) -> str | None:
        """Open and migrate; the reason to move the file aside, or None when it is ready."""
        conn = self._connect()
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                conn.close()
                return f"newer-schema-v{version}"
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                conn.close()
                return "corrupt"
            self._migrate(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            logger.warning("cache database %s cannot be used: %s", self.path, exc)
            return "corrupt"
        self._conn = conn
        return None

    def _migrate(self, conn: sqlite3.Connection) -> None:
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have migrated
            for number in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _statements(MIGRATIONS[number - 1]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _move_aside(self, reason: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{self.path.name}.{reason}-{stamp}")
        n = 2
        while target.exists():
            target = self.path.with_name(f"{self.path.name}.{reason}-{stamp}-{n}")
            n += 1
        try:
            self.path.rename(target)
        except FileNotFoundError:  # another process moved it first
            return
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.rename(target.with_name(target.name + suffix))
        message = f"the cache database {self.path} was {reason.replace('-', ' ')}; moved to {target} and started anew"
        logger.warning(message)
        self.problems.append(message)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise sqlite3.ProgrammingError("the script store is not open")
        return self._conn

    def _write(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        with self._lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(conn)
                conn.execute("COMMIT")
                self._writes += 1
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return result

    # ----- scripts -------------------------------------------------------------------------

    def _embed(self, texts: Sequence[str]) -> np.ndarray | None:
        if self.embedder is None or not texts:
            return None
        try:
            return self.embedder.embed(texts)
        except EmbedderUnavailable:
            logger.exception("embedding failed; the script is stored for full-text search only")
            return None

    def put(self, script: NewScript, *, count_lookup: bool = False) -> StoredScript:
        """Store a successful run: a new row, or the same key's row updated with this run's results.

        ``count_lookup`` also counts the cache lookup that missed before this run (same transaction).
        """
        return self.put_many([script], count_lookups=int(count_lookup))[0]

    def put_many(self, scripts: Sequence[NewScript], *, count_lookups: int = 0) -> list[StoredScript]:
        """Store several runs in one transaction (embedded in one batch once the model is loaded; until the first
        search loads it, they are stored without a vector and that search embeds them)."""
        loaded = getattr(self.embedder, "loaded", True)
        texts = [search_text(s.description, s.code, [t.name for t in s.tools]) for s in scripts] if loaded else []
        vectors = self._embed(texts)
        now = time.time()

        def body(conn: sqlite3.Connection) -> list[int]:
            ids: list[int] = []
            for i, script in enumerate(scripts):
                ids.append(self._upsert(conn, script, None if vectors is None else vectors[i], now))
            if count_lookups:
                conn.execute("UPDATE counters SET value = value + ? WHERE name = 'lookups'", (count_lookups,))
            return ids

        ids: list[int] = self._write(body)
        stored = [self.get_by_id(i) for i in ids]
        return [s for s in stored if s is not None]

    def _upsert(self, conn: sqlite3.Connection, script: NewScript, vector: np.ndarray | None, now: float) -> int:
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
        row = conn.execute("SELECT id, description_given FROM scripts WHERE hash = ?", (script.hash,)).fetchone()
        if row is None:
            tools = [{"server": t.server, "tool": t.tool, "schema_hash": t.schema_hash} for t in script.tools]
            cursor = conn.execute(
                "INSERT INTO scripts(hash, code_key, key_version, language, runner, code, packages, description,"
                " description_given, tools, tool_names, created_at, last_run_at, last_used_at,"
                f" {', '.join(values)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                f" {', '.join('?' for _ in values)})",
                (
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
            )
            script_id = int(cursor.lastrowid or 0)
            described = True
        else:
            script_id = int(row["id"])
            # a description the caller gave is not replaced by one derived from the code
            described = not (bool(row["description_given"]) and not script.description_given)
            updates = dict(values)
            if described:
                updates |= {"description": script.description, "description_given": int(script.description_given)}
            assignments = ", ".join(f"{k} = ?" for k in updates)
            conn.execute(
                f"UPDATE scripts SET {assignments}, run_count = run_count + 1, last_run_at = ?, last_used_at = ?"
                " WHERE id = ?",
                (*updates.values(), now, now, script_id),
            )
        if described and vector is not None and self.embedder is not None:
            conn.execute(
                "INSERT OR REPLACE INTO vectors(script_id, model, vector) VALUES (?, ?, ?)",
                (script_id, self.embedder.name, vector.astype(np.float32).tobytes()),
            )
        conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'stores'")
        return script_id

    def get_by_id(self, script_id: int) -> StoredScript | None:
        with self._lock:
            row = self.conn.execute("SELECT * FROM scripts WHERE id = ?", (script_id,)).fetchone()
        return row_to_script(row) if row else None

    def get(self, hash_or_prefix: str) -> StoredScript | None:
        """A script by its hash, or by a unique prefix of at least 6 characters."""
        key = hash_or_prefix.strip().lower()
        if len(key) < 6 or not all(c in "0123456789abcdef" for c in key):
            return None
        with self._lock:
            rows = self.conn.execute(
                "SELECT * FROM scripts WHERE hash >= ? AND hash < ? LIMIT 2", (key, key + "g")
            ).fetchall()
        return row_to_script(rows[0]) if len(rows) == 1 else None

    def candidates(self, code_key: str) -> list[StoredScript]:
        """The stored runs of one code key (usually one), most recently run first; only rows keyed
        with the current ``KEY_VERSION`` (older rows are kept, but never answer a request)."""
        with self._lock:
            rows = self.conn.execute(
                "SELECT * FROM scripts WHERE code_key = ? AND key_version = ? ORDER BY last_run_at DESC",
                (code_key, KEY_VERSION),
            ).fetchall()
        return [row_to_script(r) for r in rows]

    def record_lookup(self, script_id: int | None) -> None:
        """Count one cache lookup; with ``script_id``, a replay of that script."""

        def body(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'lookups'")
            if script_id is not None:
                conn.execute("UPDATE counters SET value = value + 1 WHERE name IN ('hits', 'replays')")
                conn.execute(
                    "UPDATE scripts SET hit_count = hit_count + 1, last_used_at = ? WHERE id = ?",
                    (time.time(), script_id),
                )

        self._write(body)

    def list(self, language: str | None = None, limit: int = 20, offset: int = 0) -> list[StoredScript]:
        """Scripts, most recently used first."""
        where, args = ("WHERE language = ?", [language]) if language else ("", [])
        with self._lock:
            rows = self.conn.execute(
                f"SELECT * FROM scripts {where} ORDER BY last_used_at DESC, id DESC LIMIT ? OFFSET ?",
                (*args, limit, offset),
            ).fetchall()
        return [row_to_script(r) for r in rows]

    def iter_all(self) -> Iterator[StoredScript]:
        """Every script, oldest first (for export)."""
        last = 0
        while True:
            with self._lock:
                rows = self.conn.execute("SELECT * FROM scripts WHERE id > ? ORDER BY id LIMIT 500", (last,)).fetchall()
            if not rows:
                return
            for row in rows:
                yield row_to_script(row)
            last = rows[-1]["id"]

    def prune(self, older_than: float) -> int:
        """Delete scripts not used for ``older_than`` seconds; returns how many went."""
        cutoff = time.time() - older_than
        deleted: int = self._write(
            lambda conn: conn.execute("DELETE FROM scripts WHERE last_used_at < ?", (cutoff,)).rowcount
        )
        if deleted:
            with self._lock:
                self._vectors, self._synced = None, None  # rebuilt on the next search
        return deleted

    def stats(self) -> dict[str, Any]:
        with self._lock:
            conn = self.conn
            total = conn.execute("SELECT count(*) FROM scripts").fetchone()[0]
            per_language = {
                r[0]: {"scripts": r[1], "runs": r[2], "hits": r[3]}
                for r in conn.execute(
                    "SELECT language, count(*), sum(run_count), sum(hit_count) FROM scripts GROUP BY language"
                )
            }
            counters = {r[0]: r[1] for r in conn.execute("SELECT name, value FROM counters")}
            pages = conn.execute("PRAGMA page_count").fetchone()[0] * conn.execute("PRAGMA page_size").fetchone()[0]
            vectors = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
        wal = self.path.with_name(self.path.name + "-wal")
        lookups = counters.get("lookups", 0)
        return {
            "path": str(self.path),
            "scripts": total,
            "sizeBytes": pages + (wal.stat().st_size if wal.exists() else 0),
            "perLanguage": per_language,
            "lookups": lookups,
            "hits": counters.get("hits", 0),
            "hitRate": round(counters.get("hits", 0) / lookups, 4) if lookups else None,
            "stored": counters.get("stores", 0),
            "vectors": vectors,
            "embedder": self.embedder.name if self.embedder else None,
            "problems": list(self.problems),
        }

    # ----- search --------------------------------------------------------------------------

    def _sync_vectors(self) -> VectorIndex[int] | None:
        """Bring the in-memory vectors up to date with the file (new rows, other processes, backfill)."""
        embedder = self.embedder
        if embedder is None:
            return None
        conn = self.conn
        state = (conn.execute("PRAGMA data_version").fetchone()[0], self._writes)
        if self._vectors is not None and state == self._synced:
            return self._vectors
        head = conn.execute("SELECT coalesce(max(id), 0), count(*) FROM vectors WHERE model = ?", (embedder.name,))
        max_id, count = head.fetchone()
        if self._vectors is None or max_id < self._vector_max_id or count < len(self._vectors):
            self._vectors, self._vector_max_id = VectorIndex(embedder.dim), 0
            self._languages.clear()
        index = self._vectors
        if max_id > self._vector_max_id:
            rows = conn.execute(
                "SELECT v.id, v.script_id, v.vector, s.language FROM vectors v JOIN scripts s ON s.id = v.script_id"
                " WHERE v.model = ? AND v.id > ?",
                (embedder.name, self._vector_max_id),
            ).fetchall()
            if rows:
                matrix = np.frombuffer(b"".join(r["vector"] for r in rows), dtype=np.float32).reshape(len(rows), -1)
                index.add([r["script_id"] for r in rows], matrix)
                self._languages.update({r["script_id"]: r["language"] for r in rows})
            self._vector_max_id = max_id
        scripts = conn.execute("SELECT count(*) FROM scripts").fetchone()[0]
        if scripts > len(index):
            self._backfill(index)
        self._synced = (conn.execute("PRAGMA data_version").fetchone()[0], self._writes)
        return index

    def _backfill(self, index: VectorIndex[int]) -> None:
        """Embed scripts that have no vector from the current model (new model, or stored without one)."""
        assert self.embedder is not None
        missing = self.conn.execute(
            "SELECT id, language, description, code, tool_names FROM scripts"
            " WHERE id NOT IN (SELECT script_id FROM vectors WHERE model = ?)",
            (self.embedder.name,),
        ).fetchall()
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            vectors = self._embed([search_text(r["description"], r["code"], r["tool_names"].split()) for r in chunk])
            if vectors is None:
                return
            model = self.embedder.name
            rows = [(r["id"], model, v.astype(np.float32).tobytes()) for r, v in zip(chunk, vectors, strict=True)]
            self._write(
                lambda conn, rows=rows: conn.executemany(
                    "INSERT OR REPLACE INTO vectors(script_id, model, vector) VALUES (?, ?, ?)", rows
                )
            )
            index.add([r["id"] for r in chunk], vectors)
            self._languages.update({r["id"]: r["language"] for r in chunk})
        self._vector_max_id = self.conn.execute("SELECT coalesce(max(id), 0) FROM vectors").fetchone()[0]

    def _matches(self, term: str) -> int:
        return self.conn.execute(
            "SELECT count(*) FROM scripts_fts WHERE scripts_fts MATCH ?", (f'"{term}"',)
        ).fetchone()[0]

    def search(
        self,
        query: str,
        *,
        language: str | None = None,
        limit: int = 5,
        is_stale: Callable[[StoredScript], bool] | None = None,
    ) -> list[SearchResult]:
        """Hybrid search: FTS5 (BM25) and embeddings fused by reciprocal rank; ``language`` filters."""
        with self._lock:
            conn = self.conn
            text_ranking: list[int] = []
            terms = selective_terms(query_terms(query), self._matches)
            expression = fts_query(terms)
            if expression is not None:
                # rank inside the FTS index first: joining every match to its row is slow
                rows = conn.execute(
                    "SELECT rowid FROM scripts_fts WHERE scripts_fts MATCH ?"
                    f" ORDER BY bm25(scripts_fts, {_FTS_WEIGHTS}) LIMIT ?",
                    (expression, CANDIDATES * (4 if language else 1)),
                ).fetchall()
                text_ranking = [r[0] for r in rows]
                if language and text_ranking:
                    marks = ", ".join("?" for _ in text_ranking)
                    same = {
                        r[0]
                        for r in conn.execute(
                            f"SELECT id FROM scripts WHERE language = ? AND id IN ({marks})", (language, *text_ranking)
                        )
                    }
                    text_ranking = [i for i in text_ranking if i in same]
                text_ranking = text_ranking[:CANDIDATES]
            semantic: list[tuple[int, float]] = []
            index = self._sync_vectors()
            if index is not None and self.embedder is not None and query.strip():
                vector = self._embed([query])
                if vector is not None:
                    languages = self._languages
                    allowed = (lambda key: languages.get(key) == language) if language else None
                    semantic = index.search(vector[0], CANDIDATES, allowed)
            hits = fuse(text_ranking, semantic, limit)
            results: list[SearchResult] = []
            for hit in hits:
                script = self.get_by_id(hit.key)
                if script is not None:
                    results.append(SearchResult(script, hit, None if is_stale is None else is_stale(script)))
        return results


def _statements(script: str) -> list[str]:
    """Split a migration into statements (``sqlite3.complete_statement`` keeps triggers whole)."""
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                statements.append(current.strip())
            current = ""
    if current.strip():
        statements.append(current.strip())
    return statements
