"""A real PostgreSQL for the store tests (pgserver: PostgreSQL 16 with pgvector from a wheel, no root), and the
``database`` fixture that runs a test once on SQLite and once on PostgreSQL.

One server per test process (xdist worker), started on first use and stopped at the end of the session; a fresh
database per test module (``CREATE DATABASE``), emptied before each test."""

from __future__ import annotations

import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_code_mode.database import Database, open_database

from ..fixtures import pg

TABLES = "scripts, vectors, counters, audit, plans, pii_vault, pii_counters, skills, artifacts, sessions"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of this worker's PostgreSQL (its ``postgres`` database). Its data directory is not under pytest's
    temporary root: that one is private to the user (a server run as root drops to a user of its own) and is
    rotated by other pytest processes of the same user."""
    data = Path(tempfile.mkdtemp(prefix="mcp-code-mode-pg-"))
    data.chmod(0o755)
    server = pg.start(data / "data")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server; its URL."""
    import psycopg
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return re.sub(r"/postgres\?", f"/{name}?", server_url, count=1)


@pytest.fixture(scope="module")
def pg_url(pg_server: str) -> str:
    return fresh_database(pg_server)


@pytest.fixture(scope="module")
def pg_database(pg_url: str) -> Iterator[Database]:
    db = open_database(pg_url)
    yield db
    db.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """An open, empty database: the SQLite file of this test, or this module's PostgreSQL database emptied."""
    if request.param == "sqlite":
        db = open_database(tmp_path / "scripts.db")
        yield db
        db.close()
        return
    db = request.getfixturevalue("pg_database")
    db.write(lambda tx: tx.execute(f"TRUNCATE {TABLES} RESTART IDENTITY"))
    yield db
