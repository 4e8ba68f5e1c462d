"""The SQLite cache database's numbered migrations (kept in ``database._sqlite_schema``; re-exported here)."""

from __future__ import annotations

from ..database._sqlite_schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]
