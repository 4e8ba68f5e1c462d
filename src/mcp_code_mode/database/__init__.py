"""The database seam every store speaks through: SQLite (embedded, the default) or PostgreSQL (replicas).

A store writes its SQL once with ``?`` placeholders; where the dialects differ it asks ``Database.dialect``.
``open_database`` gives the SQLite file ``<cache root>/scripts.db`` unless ``CODE_MODE_DATABASE_URL`` names a
PostgreSQL server (then ``_postgres`` and psycopg are imported, and only then).

- ``read(sql, args)``: the rows of one statement (each row indexable by position and by column name).
- ``write(body, scope=…)``: ``body(tx)`` in one short transaction, committed before it returns, rolled back
  when it raises. SQLite: ``BEGIN IMMEDIATE`` (writers wait up to ``BUSY_TIMEOUT_MS`` for each other);
  PostgreSQL: a transaction holding the advisory lock of ``scope`` (the writers of one store's tables are
  serialised across replicas as SQLite serialises them across processes; different scopes do not wait).
- ``changes(name)``: a number that moves when another connection changed ``name`` (``scripts``, ``skills``):
  SQLite's ``PRAGMA data_version`` (any change to the file); PostgreSQL: the row of ``changes`` that
  ``note_change(tx, name)`` bumps in the writing transaction.

Errors: SQLite's are ``sqlite3.Error``; PostgreSQL's are translated to ``StoreError`` (and
``StoreIntegrityError`` for a broken constraint), which subclass ``sqlite3.DatabaseError`` and
``sqlite3.IntegrityError`` (so that the stores and their callers catch one family whichever backend runs) and
``CodeModeError`` (so that the command line prints one that stops the start as a message, not a traceback).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from ..errors import CodeModeError

Dialect = Literal["sqlite", "postgresql"]
T = TypeVar("T")


class StoreError(CodeModeError, sqlite3.DatabaseError):
    """A PostgreSQL error, translated at the seam (its message never holds the URL's password)."""


class StoreIntegrityError(StoreError, sqlite3.IntegrityError):
    """A PostgreSQL constraint was broken (a key already used)."""


class Row(Protocol):
    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...


class Result(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Tx(Protocol):
    """One open transaction."""

    @property
    def dialect(self) -> Dialect: ...

    def execute(self, sql: str, args: Sequence[Any] = (), /) -> Result: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]], /) -> None: ...


class Database(Protocol):
    @property
    def dialect(self) -> Dialect: ...

    where: str
    """The file's path, or the server's URL without its password: what messages name."""
    problems: list[str]
    """What was wrong when it was opened (a SQLite file moved aside)."""

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]: ...

    def write(self, body: Callable[[Tx], T], *, scope: str = "") -> T: ...

    def changes(self, name: str = "scripts") -> int: ...

    def note_change(self, tx: Tx, name: str = "scripts") -> None: ...

    def size_bytes(self) -> int: ...

    def close(self) -> None: ...


def is_url(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def open_database(target: Path | str) -> Database:
    """The SQLite file at ``target``, or the PostgreSQL server a ``postgresql://`` URL names (opened, migrated).

    A server that cannot be reached raises ``StoreError`` naming its host, never its password."""
    if isinstance(target, str) and is_url(target):
        from ._postgres import PostgresDatabase

        return PostgresDatabase(target).open()
    from ._sqlite import SQLiteDatabase

    return SQLiteDatabase(Path(target)).open()


def redact_url(url: str) -> str:
    """The URL with its password (if any) replaced by ``***``."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an unparsable database URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, f"{user}:***@{host}{port}", parts.path, parts.query, parts.fragment))


__all__ = [
    "Database",
    "Dialect",
    "Result",
    "Row",
    "StoreError",
    "StoreIntegrityError",
    "Tx",
    "is_url",
    "open_database",
    "redact_url",
]
