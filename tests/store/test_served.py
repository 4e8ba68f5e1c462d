"""The server as a desktop client starts it (only HOME, PATH, USER, SHELL, TERM) plus CODE_MODE_DATABASE_URL: a run
is stored in PostgreSQL and replayed from it; a server that cannot be reached stops the start, naming its host and
not its password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.database import open_database

from ..conftest import fixture_entry, write_config
from .conftest import fresh_database

pytestmark = pytest.mark.anyio

SERVER = str(Path(sys.executable).with_name("mcp-code-mode"))


def desktop_env(home: Path, url: str) -> dict[str, str]:
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/sh",
        "TERM": "dumb",
        "CODE_MODE_DATABASE_URL": url,
    }


async def test_a_run_is_stored_in_postgresql_and_replayed_from_it(tmp_path: Path, pg_server: str) -> None:
    url = fresh_database(pg_server)
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(home / "mcp_servers.json", {"fixture": fixture_entry()})
    params = StdioServerParameters(
        command=SERVER, args=["serve", "--config", str(config)], env=desktop_env(home, url), cwd="/"
    )
    code = "total = sum(i * i for i in range(100))\nprint('total', total)\ntotal"
    with anyio.fail_after(300):
        async with Client(params, mode="legacy") as client:
            first = (await client.call_tool("execute_code", {"language": "python", "code": code})).structured_content
            again = (await client.call_tool("execute_code", {"language": "python", "code": code})).structured_content
            stats = (await client.call_tool("get_cache_stats", {})).structured_content
    assert first is not None and again is not None and stats is not None
    assert first["success"] and not first["cached"], first
    assert again["cached"] and again["returnValue"] == 328350 and again["hash"] == first["hash"]
    assert stats["backend"] == "postgresql" and "t_" in stats["path"] and stats["hits"] == 1
    db = open_database(url)
    try:
        stored = ScriptStore(db).open().get(first["hash"], tenant="default")
        assert stored is not None and stored.output == "total 328350\n" and stored.hit_count == 1
    finally:
        db.close()
    assert not list(home.rglob("scripts.db")), "no SQLite file beside PostgreSQL"


def test_an_unreachable_database_stops_the_start_naming_its_host_not_its_password(tmp_path: Path) -> None:
    config = write_config(tmp_path / "mcp_servers.json", {})
    done = subprocess.run(
        [SERVER, "serve", "--config", str(config)],
        env=desktop_env(tmp_path, "postgresql://app:hunter2@127.0.0.1:1/codemode"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "PostgreSQL at 127.0.0.1:1/codemode cannot be reached" in done.stderr, done.stderr[-2000:]
    assert "hunter2" not in done.stderr + done.stdout
