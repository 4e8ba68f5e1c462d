"""doctor says where the stores are: the SQLite file, or the PostgreSQL server reached (never its password)."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from mcp_code_mode.config import Settings
from mcp_code_mode.doctor import check_database


def test_doctor_names_the_sqlite_file_or_the_server_it_reached(tmp_path: Path, pg_url: str) -> None:
    sqlite = check_database(Settings(cache_dir=tmp_path))
    assert sqlite.status == "ok" and str(tmp_path / "scripts.db") in sqlite.detail
    reached = check_database(Settings(database_url=SecretStr(pg_url)))
    assert reached.status == "ok" and reached.detail.startswith("PostgreSQL at ")
    failed = check_database(Settings(database_url=SecretStr("postgresql://app:hunter2@127.0.0.1:1/db")))
    assert failed.status == "FAIL" and "127.0.0.1:1/db" in failed.detail and "hunter2" not in failed.detail
    assert failed.fix == "check CODE_MODE_DATABASE_URL"
