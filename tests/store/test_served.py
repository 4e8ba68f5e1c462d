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


async def test_an_open_sessions_place_is_in_the_shared_database_until_it_closes(tmp_path: Path, pg_server: str) -> None:
    # Another replica reading the shared database can tell where a session lives, and that it is gone once closed.
    from mcp_code_mode.cache.sessions import SessionPlaces

    url = fresh_database(pg_server)
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(home / "mcp_servers.json", {})
    env = desktop_env(home, url) | {"CODE_MODE_REPLICA_ID": "r7"}
    params = StdioServerParameters(command=SERVER, args=["serve", "--config", str(config)], env=env, cwd="/")
    db = open_database(url)
    places = SessionPlaces(db)
    try:
        with anyio.fail_after(300):
            async with Client(params, mode="legacy") as client:
                opened = await client.call_tool(
                    "execute_code", {"language": "python", "code": "x = 1", "session": "new", "cache": "off"}
                )
                assert opened.structured_content is not None and opened.structured_content["success"], opened
                session = opened.structured_content["sessionId"]
                place = places.where(session, tenant="default")
                assert place is not None and place.replica == "r7", place
                assert places.where(session, tenant="other") is None  # another tenant's lookup finds nothing
                first_use = place.last_used_at
                await client.call_tool("execute_code", {"language": "python", "code": "x", "session": session})
                used = places.where(session, tenant="default")
                assert used is not None and used.last_used_at >= first_use
                closed = await client.call_tool("close_session", {"sessionId": session})
                assert not closed.is_error
                with anyio.fail_after(10):
                    while places.where(session, tenant="default") is not None:
                        await anyio.sleep(0.05)
    finally:
        db.close()
