"""SQLite migration 8 on a file of schema 7 with rows in every table: each row goes to tenant ``default`` with its
id, the full-text index still finds the scripts, and the keys are per tenant from then on."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mcp_code_mode.cache.audit import AuditLog
from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.database._sqlite_schema import MIGRATIONS, SCHEMA_VERSION
from mcp_code_mode.skills import SkillStore

from ..cache.helpers import new_script


def test_a_schema_7_file_moves_to_tenants_with_its_rows_and_ids(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    conn = sqlite3.connect(path)
    conn.executescript("".join(MIGRATIONS[:7]) + "PRAGMA user_version = 7;")
    script = new_script("print('kept')", description="count the kept rows")
    conn.execute(
        "INSERT INTO scripts(id, hash, code_key, language, runner, code, description, created_at, last_run_at,"
        " last_used_at, key_version) VALUES (41, ?, ?, 'python', 'local', ?, ?, 1, 1, 1, ?)",
        (script.hash, script.code_key, script.code, script.description, script.key_version),
    )
    conn.execute("UPDATE counters SET value = 9 WHERE name = 'lookups'")
    conn.execute(
        "INSERT INTO audit(at, client, run_id, code_hash, server, tool, arguments_digest, preview, decision, ms, ok)"
        " VALUES (5, 'c', 'r', 'h', 'fs', 'read', 'd', '{}', 'allowed', 1, 1)"
    )
    conn.execute(
        "INSERT INTO skills(name, version, language, code, created_at) VALUES ('tally', 3, 'python', 'return 1', 1)"
    )
    conn.execute(
        "INSERT INTO artifacts(run_hash, client, path, file, size, mime, created_at, expires_at)"
        " VALUES ('h', 'c', 'a.txt', 'd/a.txt', 1, 'text/plain', 1, 9e12)"
    )
    conn.commit()
    conn.close()

    store = ScriptStore(path).open()
    try:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        kept = store.get(script.hash, tenant="default")
        assert kept is not None and kept.id == 41
        assert [r.script.id for r in store.search("kept rows", tenant="default")] == [41]
        assert store.stats(tenant="default")["lookups"] == 9
        again = store.put(new_script("print('kept')"), tenant="other")
        assert again.id != 41 and store.get(script.hash, tenant="other") == again
        tables = {r[0]: r[1] for r in store.conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")}
        assert all("tenant" in tables[t] for t in ("scripts", "counters", "audit", "plans", "skills", "artifacts"))
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()
    with AuditLog(path) as log:
        assert [e["tool"] for e in log.query(tenant="default")] == ["read"]
    skills = SkillStore(path)
    assert [s.version for s in skills.latest(tenant="default")] == [3]
    skills.close()
    rows = sqlite3.connect(path).execute("SELECT tenant, path FROM artifacts").fetchall()
    assert rows == [("default", "a.txt")]
