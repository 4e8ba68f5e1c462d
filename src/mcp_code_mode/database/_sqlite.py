"""``SQLiteDatabase``: one SQLite file, one connection behind a lock (the stores' embedded default).

- WAL mode, ``synchronous=NORMAL``: a committed transaction survives ``kill -9`` of the process (it is in the
  WAL file); several processes read and write one file, each write a short ``BEGIN IMMEDIATE`` transaction,
  waiting up to ``BUSY_TIMEOUT_MS`` for another writer.
- Opening checks the file: one that is not a database, fails ``PRAGMA quick_check`` or has a schema newer than
  this build knows is renamed to ``<name>.<reason>-<time>`` (with its WAL), reported in ``problems`` and the
  log, and a new file is started. Nothing is overwritten.
- Migrations (``_sqlite_schema.MIGRATIONS``) are applied in one ``BEGIN IMMEDIATE`` transaction and recorded in
  ``PRAGMA user_version``.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from . import Dialect, Tx
from ._sqlite_schema import MIGRATIONS, SCHEMA_VERSION

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
T = TypeVar("T")


class _Tx:
    dialect: Dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Sequence[Any] = (), /) -> sqlite3.Cursor:
        return self._conn.execute(sql, tuple(args))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]], /) -> None:
        self._conn.executemany(sql, rows)


class SQLiteDatabase:
    """One file. Thread-safe (one connection behind a lock); ``open`` before use, ``close`` after."""

    dialect: Dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)
        self.problems: list[str] = []
        self._conn: sqlite3.Connection | None = None
        self.lock = threading.RLock()

    # ----- opening -------------------------------------------------------------------------

    def open(self) -> SQLiteDatabase:
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
                for statement in statements(MIGRATIONS[number - 1]):
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
        with self.lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise sqlite3.ProgrammingError("the cache database is not open")
        return self._conn

    # ----- use -----------------------------------------------------------------------------

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self.lock:
            return self.conn.execute(sql, tuple(args)).fetchall()

    def write(self, body: Callable[[Tx], T], *, scope: str = "") -> T:
        del scope  # one writer per file at a time, whatever it writes
        with self.lock:
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(_Tx(conn))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return result

    def changes(self, name: str = "scripts") -> int:
        """``PRAGMA data_version``: moves when another connection committed (this one's own writes do not)."""
        del name  # whatever changed
        with self.lock:
            return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def note_change(self, tx: Tx, name: str = "scripts") -> None:
        """Nothing to do: SQLite counts other connections' commits itself."""

    def size_bytes(self) -> int:
        with self.lock:
            pages = (
                self.conn.execute("PRAGMA page_count").fetchone()[0]
                * self.conn.execute("PRAGMA page_size").fetchone()[0]
            )
        wal = self.path.with_name(self.path.name + "-wal")
        return int(pages) + (wal.stat().st_size if wal.exists() else 0)


def statements(script: str) -> list[str]:
    """Split a migration into statements (``sqlite3.complete_statement`` keeps triggers whole)."""
    out: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out
