"""The script cache: successful runs kept in the stores' database, exact hits replayed when safe, hybrid search.

``ScriptCache`` is what the engine holds: it opens the store under ``cache_dir``, decides whether a
stored run may answer a request (the ``cache`` modes), remembers new runs and serves the discovery
tools. It never fails a run: a broken cache file is moved aside (see ``store``), and a database
error during a run is logged and treated as a miss.

Modes of ``execute_code``'s ``cache`` parameter:

- ``auto`` (default): replay an exact hit only if the host saw that run have no side effects (it
  made no tool call, left no file, and opened no connection through the egress proxy, whatever the runner) and it
  ran less than ``cache_ttl`` seconds ago; otherwise run and store.
- ``reuse``: replay any exact hit.
- ``refresh``: run again and overwrite the stored result.
- ``off``: neither read nor write.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, get_args

from ..database import Database
from ..errors import UnsupportedError
from .audit import DECISIONS, AuditEntry, AuditLog, Decision, arguments_digest, parse_since, preview
from .describe import ToolUse, derive_description
from .embed import Embedder, HashingEmbedder, StaticEmbedder, make_embedder
from .keys import KEY_VERSION, KeyContext, code_key, full_key, keyed_code, runner_identity, stubs_digest
from .models import NewScript, SearchResult, StoredScript
from .store import ScriptStore

logger = logging.getLogger(__name__)

CacheMode = Literal["auto", "reuse", "refresh", "off"]
CACHE_MODES: tuple[str, ...] = get_args(CacheMode)
DB_NAME = "scripts.db"

CurrentSchema = Callable[[str, str], str | None]
"""``(server, tool)`` → the tool's schema hash now, or None when the tool is gone."""

ONE_DAY = 86_400.0


def check_mode(mode: str) -> CacheMode:
    if mode not in CACHE_MODES:
        raise UnsupportedError(f"cache must be one of {', '.join(CACHE_MODES)}, got {mode!r}")
    return mode  # pyright: ignore[reportReturnType]


class ScriptCache:
    """The engine's view of the store: lookups with the replay rules, storing runs, discovery."""

    def __init__(
        self,
        directory: Path,
        *,
        ttl: float,
        embedder: Embedder | None,
        current_schema: CurrentSchema | None,
        database: Database | None = None,
    ) -> None:
        """``current_schema`` is None where no servers are connected (the CLI): nothing is known to be stale.
        ``database``: an open database to keep the scripts in (PostgreSQL); None: the SQLite file ``path``."""
        self.directory = directory
        self.ttl = ttl
        self.current_schema = current_schema
        self.store: ScriptStore | None = None
        self._embedder = embedder
        self._database = database
        self.problems: list[str] = []

    @property
    def path(self) -> Path:
        return self.directory / DB_NAME

    def use(self, database: Database) -> None:
        """Keep the scripts in ``database`` (opened by the caller, who closes it) instead of the SQLite file."""
        self._database = database

    def open(self) -> None:
        """Open (or create) the database; a failure leaves the cache off and says why in ``problems``."""
        store = ScriptStore(self.path if self._database is None else self._database, self._embedder)
        try:
            store.open()
        except (OSError, sqlite3.Error) as exc:
            message = f"the script cache is off: {self.path} cannot be used: {exc}"
            logger.warning(message)
            self.problems.append(message)
            return
        self.problems.extend(store.problems)
        self.store = store

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    # ----- execution -------------------------------------------------------------------------

    def is_current(self, script: StoredScript) -> bool:
        """Every tool the script used still exists with the schema it had."""
        current = self.current_schema
        if current is None:
            return False
        return all(current(t.server, t.tool) == t.schema_hash for t in script.tools)

    def reads(self, mode: CacheMode) -> bool:
        """Whether ``lookup`` in ``mode`` consults the store (else it is None at once)."""
        return self.store is not None and mode not in ("off", "refresh")

    def writes(self, mode: CacheMode) -> bool:
        """Whether ``after_run`` in ``mode`` writes to the store (else it does nothing)."""
        return self.store is not None and mode != "off"

    def lookup(self, mode: CacheMode, key: str, *, tenant: str) -> StoredScript | None:
        """The stored run that answers a request in ``mode``, or None (run it).

        A hit is counted here; a miss is counted by ``after_run``, so that nothing is written
        before a script runs.
        """
        if self.store is None or not self.reads(mode):
            return None
        try:
            for script in self.store.candidates(key, tenant=tenant):
                if not self.is_current(script):
                    continue
                fresh = time.time() - script.last_run_at < self.ttl
                if mode == "reuse" or (script.side_effect_free and fresh):
                    self.store.record_lookup(script.id, tenant=tenant)
                    return script
        except sqlite3.Error:
            logger.exception("cache lookup failed; running the script")
        return None

    def after_run(self, mode: CacheMode, script: NewScript | None, *, tenant: str) -> StoredScript | None:
        """Count the missed lookup and store a successful run (blocking: call it in a worker thread)."""
        if self.store is None or not self.writes(mode):
            return None
        counted = mode in ("auto", "reuse")
        try:
            if script is not None:
                return self.store.put(script, tenant=tenant, count_lookup=counted)
            if counted:
                self.store.record_lookup(None, tenant=tenant)
        except sqlite3.Error:
            logger.exception("storing the run in the cache failed")
        return None

    # ----- discovery ---------------------------------------------------------------------------

    def _require(self) -> ScriptStore:
        if self.store is None:
            raise UnsupportedError(
                "the script cache is not available" + (f": {'; '.join(self.problems)}" if self.problems else "")
            )
        return self.store

    def search(self, query: str, language: str | None = None, limit: int = 5, *, tenant: str) -> list[SearchResult]:
        is_stale = None if self.current_schema is None else (lambda s: not self.is_current(s))
        return self._require().search(query, tenant=tenant, language=language, limit=limit, is_stale=is_stale)

    def list(self, language: str | None = None, limit: int = 20, *, tenant: str) -> list[StoredScript]:
        return self._require().list(language, limit, tenant=tenant)

    def get(self, hash_or_prefix: str, *, tenant: str) -> StoredScript | None:
        return self._require().get(hash_or_prefix, tenant=tenant)

    def stats(self, *, tenant: str) -> dict[str, Any]:
        if self.store is None:
            where = str(self.path) if self._database is None else self._database.where
            return {"path": where, "enabled": False, "problems": list(self.problems)}
        stats = self.store.stats(tenant=tenant)
        stats["problems"] = list(dict.fromkeys([*self.problems, *stats["problems"]]))
        return {"enabled": True, **stats, "ttlSeconds": self.ttl}

    def prune(self, older_than: float, *, tenant: str) -> int:
        return self._require().prune(older_than, tenant=tenant)

    def iter_all(self, *, tenant: str) -> Iterator[StoredScript]:
        return self._require().iter_all(tenant=tenant)


__all__ = [
    "CACHE_MODES",
    "DECISIONS",
    "AuditEntry",
    "AuditLog",
    "CacheMode",
    "Decision",
    "Embedder",
    "HashingEmbedder",
    "KEY_VERSION",
    "KeyContext",
    "NewScript",
    "ScriptCache",
    "ScriptStore",
    "SearchResult",
    "StaticEmbedder",
    "StoredScript",
    "ToolUse",
    "arguments_digest",
    "check_mode",
    "code_key",
    "derive_description",
    "full_key",
    "keyed_code",
    "make_embedder",
    "parse_since",
    "preview",
    "runner_identity",
    "stubs_digest",
]
