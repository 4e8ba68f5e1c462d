"""``PostgresDatabase``: the stores in a PostgreSQL server (``CODE_MODE_DATABASE_URL``), psycopg 3 and a pool.

Imported only when the URL is set (psycopg is the ``postgres`` extra). The stores' SQL is written with ``?``
placeholders; here they become psycopg's ``%s`` (a literal ``%`` is doubled). Connections are in autocommit:
a read is one statement; a write (``write``) is one transaction that first takes the advisory lock of its
scope, so that the writers of one store's tables run one at a time across every replica, as SQLite's
``BEGIN IMMEDIATE`` runs them across processes (a read-then-insert, such as a skill's next version, stays
correct without retries). psycopg's errors are translated to ``StoreError`` here; no message names the
password.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg import sql as pgsql
from psycopg.rows import RowMaker
from psycopg_pool import ConnectionPool

from . import Dialect, StoreError, StoreIntegrityError, Tx, redact_url
from ._postgres_schema import MIGRATION_LOCK, MIGRATIONS, SCHEMA_VERSION

logger = logging.getLogger(__name__)

T = TypeVar("T")
CONNECT_TIMEOUT_S = 10.0
POOL_MAX = 8


class PgRow:
    """A row by position (``row[0]``) or by column name (``row["id"]``), as ``sqlite3.Row``."""

    __slots__ = ("_names", "_values")

    def __init__(self, values: Sequence[Any], names: dict[str, int]) -> None:
        self._values = values
        self._names = names

    def __getitem__(self, key: int | str, /) -> Any:
        return self._values[self._names[key]] if isinstance(key, str) else self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def keys(self) -> list[str]:
        return list(self._names)


def _rows(cursor: psycopg.Cursor[Any]) -> RowMaker[PgRow]:
    names = {d.name: i for i, d in enumerate(cursor.description or [])}

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(values, names)

    return make


def placeholders(sql: str) -> str:
    """``?`` → ``%s`` (the stores' SQL has no ``?`` inside a literal)."""
    return sql.replace("%", "%%").replace("?", "%s")


class _Result:
    def __init__(self, cursor: psycopg.Cursor[PgRow]) -> None:
        self._cursor = cursor
        self.rowcount = cursor.rowcount

    def fetchone(self) -> PgRow | None:
        return self._cursor.fetchone() if self._cursor.description else None

    def fetchall(self) -> list[PgRow]:
        return self._cursor.fetchall() if self._cursor.description else []

    def __iter__(self) -> Iterator[PgRow]:
        return iter(self.fetchall())


class _Tx:
    dialect: Dialect = "postgresql"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Sequence[Any] = (), /) -> _Result:
        cursor = self._conn.cursor(row_factory=_rows)
        cursor.execute(placeholders(sql), tuple(args))  # pyright: ignore[reportArgumentType]
        return _Result(cursor)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]], /) -> None:
        with self._conn.cursor() as cursor:
            cursor.executemany(placeholders(sql), [tuple(r) for r in rows])  # pyright: ignore[reportArgumentType]


def _scope_key(scope: str) -> int:
    return zlib.crc32(f"mcp-code-mode:{scope}".encode()) - 2**31


def _translate(exc: psycopg.Error, where: str) -> StoreError:
    kind = StoreIntegrityError if isinstance(exc, psycopg.IntegrityError) else StoreError
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return kind(f"PostgreSQL at {where}: {text}")


def _host(url: str) -> str:
    """Where the URL points (host and port, or the socket directory), for messages: never the password."""
    from urllib.parse import parse_qs

    parts = urlsplit(url)
    host = parts.hostname or (parse_qs(parts.query).get("host") or ["localhost"])[0]
    try:
        port = parts.port
    except ValueError:
        port = None
    database = parts.path.lstrip("/") or "(default database)"
    return f"{host}{f':{port}' if port else ''}/{database}"


class PostgresDatabase:
    """The pool of connections to one server. Thread-safe; ``open`` before use (connects and migrates)."""

    dialect: Dialect = "postgresql"

    def __init__(self, url: str, *, max_size: int = POOL_MAX) -> None:
        self._url = url
        self.where = _host(url)
        self.url = redact_url(url)
        self.problems: list[str] = []
        self._max = max_size
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self.vectors_in_sql = False
        """Whether pgvector's ``embedding`` column is there: the nearest vectors are found in SQL."""

    def open(self) -> PostgresDatabase:
        try:  # one connection first: its error says why (refused, unknown host, authentication), the pool's not
            psycopg.connect(self._url, connect_timeout=int(CONNECT_TIMEOUT_S)).close()
        except psycopg.Error as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StoreError(f"PostgreSQL at {self.where} cannot be reached: {reason}") from None
        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            self._url,
            min_size=1,
            max_size=self._max,
            kwargs={"autocommit": True, "connect_timeout": int(CONNECT_TIMEOUT_S)},
            open=False,
            name="mcp-code-mode",
        )
        try:
            pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:  # psycopg_pool.PoolTimeout, or a psycopg.Error from the first connection
            pool.close()
            raise StoreError(f"PostgreSQL at {self.where} cannot be reached: {type(exc).__name__}") from None
        self._pool = pool
        try:
            self._migrate()
            self.vectors_in_sql = bool(
                self.read(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()"
                    " AND table_name = 'vectors' AND column_name = 'embedding'"
                )
            )
        except psycopg.Error as exc:
            self.close()
            raise _translate(exc, self.where) from None
        return self

    def _migrate(self) -> None:
        with self.pool.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at"
                    " TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
                row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
                version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise StoreError(
                        f"PostgreSQL at {self.where} has schema version {version}; this build knows up to "
                        f"{SCHEMA_VERSION} (upgrade it, or point CODE_MODE_DATABASE_URL at another database)"
                    )
                for number in range(version + 1, SCHEMA_VERSION + 1):
                    with conn.transaction():
                        conn.execute(pgsql.SQL(MIGRATIONS[number - 1]))  # pyright: ignore[reportArgumentType]
                        conn.execute("INSERT INTO schema_version(version) VALUES (%s)", (number,))
                    logger.info("PostgreSQL at %s migrated to schema version %d", self.where, number)
            finally:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))

    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # ----- use -----------------------------------------------------------------------------

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        try:
            with self.pool.connection() as conn, conn.cursor(row_factory=_rows) as cursor:
                cursor.execute(placeholders(sql), tuple(args))  # pyright: ignore[reportArgumentType]
                return cursor.fetchall() if cursor.description else []
        except psycopg.Error as exc:
            raise _translate(exc, self.where) from None

    def write(self, body: Callable[[Tx], T], *, scope: str = "") -> T:
        try:
            with self.pool.connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_scope_key(scope),))
                return body(_Tx(conn))
        except psycopg.Error as exc:
            raise _translate(exc, self.where) from None

    def changes(self, name: str = "scripts") -> int:
        rows = self.read("SELECT value FROM changes WHERE name = ?", (name,))
        return int(rows[0][0]) if rows else 0

    def note_change(self, tx: Tx, name: str = "scripts") -> None:
        tx.execute(
            "INSERT INTO changes(name, value) VALUES (?, 1) ON CONFLICT(name) DO UPDATE SET value = changes.value + 1",
            (name,),
        )

    def size_bytes(self) -> int:
        rows = self.read("SELECT pg_database_size(current_database())")
        return int(rows[0][0]) if rows else 0

    def has_extension(self, name: str) -> bool:
        return bool(self.read("SELECT 1 FROM pg_extension WHERE extname = ?", (name,)))
