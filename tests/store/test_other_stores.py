"""Audit and plans, skills, artifacts and the PII vault: the same behaviour on SQLite and on PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from mcp_code_mode.artifacts import ArtifactLimits, ArtifactStore, RunFiles
from mcp_code_mode.cache.audit import AuditEntry, AuditLog
from mcp_code_mode.database import Database
from mcp_code_mode.privacy.seal import Sealer
from mcp_code_mode.privacy.store import DatabaseVault
from mcp_code_mode.skills import SkillStore, SkillVersion

T = "default"


def entry(tool: str, run_id: str = "run-1", at: float = 1000.0, client: str = "c") -> AuditEntry:
    return AuditEntry.of_call(
        server="fs",
        tool=tool,
        arguments={"path": "x", "token": "s3cret"},
        decision="allowed",
        client=client,
        run_id=run_id,
        code_hash="ab" * 16,
        at=at,
        ok=True,
        pii={"restored": ["email"]},
    )


def test_audit_entries_are_queried_by_run_tool_glob_time_and_client(database: Database) -> None:
    log = AuditLog(database)
    log.record_many([entry("read_file", at=1000), entry("write_file", at=2000, client="d")], tenant=T)
    log.record(entry("list_directory", run_id="run-2", at=3000), tenant=T)
    assert log.set_run_hash("run-1", "cd" * 16, tenant=T) == 2
    assert [e["tool"] for e in log.query(tenant=T)] == ["list_directory", "write_file", "read_file"]
    assert [e["tool"] for e in log.query(tool="fs.*_file", tenant=T)] == ["write_file", "read_file"]
    assert [e["tool"] for e in log.query(tool="[rw]*", tenant=T)] == ["write_file", "read_file"]
    assert [e["tool"] for e in log.query(run="cdcdcdcd", tenant=T)] == ["write_file", "read_file"]
    assert [e["tool"] for e in log.query(since=1500, client="d", tenant=T)] == ["write_file"]
    first = log.query(tenant=T)[-1]
    assert '"token":"[REDACTED]"' in first["preview"] and first["pii"] == {"restored": ["email"]} and first["ok"]
    assert log.prune(1, tenant=T, now=2500 + 86_400) == 2


def test_a_plan_is_used_once_even_by_racing_callers(database: Database) -> None:
    log = AuditLog(database)
    log.save_plan("plan-x", "h", "c", 60, [{"tool": "fs.read"}], tenant=T)
    with pytest.raises(sqlite3.IntegrityError):
        log.save_plan("plan-x", "h", "c", 60, [], tenant=T)
    plan = log.load_plan("plan-x", tenant=T)
    assert plan is not None and plan["calls"] == [{"tool": "fs.read"}] and plan["usedAt"] is None
    wins: list[bool] = []
    threads = [threading.Thread(target=lambda: wins.append(log.mark_plan_used("plan-x", tenant=T))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 5 + [True]
    assert log.load_plan("plan-x", tenant=T, now=10**12) is None, "expired"


def skill(code: str) -> SkillVersion:
    return SkillVersion(name="tally", version=0, language="python", description="d", code=code, parameters={"a": 1})


def test_skills_get_versions_in_order_and_changes_show_to_other_connections(database: Database) -> None:
    store = SkillStore(database)
    seen = store.data_version()
    assert store.save(skill("return 1"), tenant=T).version == 1
    assert store.save(skill("return 2"), tenant=T).version == 2
    assert [s.code for s in store.latest(tenant=T)] == ["return 2"]
    assert [s.version for s in store.versions("tally", tenant=T)] == [2, 1]
    if database.dialect == "postgresql":
        assert store.data_version() != seen, "another replica's listing knows to read again"
    assert store.delete("tally", tenant=T) == 2 and store.latest(tenant=T) == []


def test_racing_saves_of_one_skill_get_distinct_versions(database: Database) -> None:
    store = SkillStore(database)
    threads = [threading.Thread(target=lambda i=i: store.save(skill(f"return {i}"), tenant=T)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(s.version for s in store.versions("tally", tenant=T)) == [1, 2, 3, 4, 5, 6]


def test_an_artifact_is_read_back_from_another_replica_s_store(database: Database, tmp_path: Path) -> None:
    here = ArtifactStore(tmp_path / "here", database, ArtifactLimits())
    run = RunFiles(here.staging(), here.limits)
    run.write("out/report.txt", b"the report", end=True)
    pairs = run.entries([])
    here.keep("c", "run-h", pairs, tenant=T)
    assert pairs[0][0].uri == "code-mode://runs/run-h/files/out/report.txt"
    there = ArtifactStore(tmp_path / "there", database, ArtifactLimits())  # no shared disk with "here"
    found = there.find("c", "run-h", "out/report.txt", tenant=T)
    if database.dialect == "postgresql":
        assert found is not None and found.read_bytes() == b"the report" and found.file is None
        assert not [p for p in (tmp_path / "here").rglob("*") if p.is_file()], "no copy on this replica's disk"
    else:
        assert found is None, "SQLite keeps the bytes beside the file: another root does not have them"
    assert [uri for uri, _ in here.recent("c", tenant=T)] == ["code-mode://runs/run-h/files/out/report.txt"]


def test_the_vault_gives_one_token_per_value_to_concurrent_vaults(database: Database) -> None:
    vaults = [DatabaseVault(database, Sealer(b"k" * 32)) for _ in range(3)]
    tokens: list[str | None] = []
    threads = [
        threading.Thread(target=lambda v=v: tokens.append(v.token_for("c", "email", "a@b.example", "crm", tenant=T)))
        for v in vaults
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(tokens)) == 1 and tokens[0] == "[EMAIL_1]"
    found = vaults[1].lookup("c", "[EMAIL_1]", tenant=T)
    assert found is not None and found.value == "a@b.example" and found.origins == {"crm"}
    assert vaults[2].token_for("c", "email", "z@b.example", tenant=T) == "[EMAIL_2]"
    assert vaults[0].size("c", tenant=T) == 2
    vaults[0].forget("c", tenant=T)
    assert vaults[1].lookup("c", "[EMAIL_1]", tenant=T) is None


def test_another_replica_can_say_where_a_session_lives(database: Database) -> None:
    from mcp_code_mode.cache.sessions import SessionPlaces

    here, there = SessionPlaces(database), SessionPlaces(database)
    here.opened("s-1", tenant=T, client="c", replica="replica-a", now=100)
    place = there.where("s-1", tenant=T)
    assert place is not None and place.replica == "replica-a" and place.client == "c" and place.opened_at == 100
    assert there.where("s-1", tenant="other") is None and not there.touched("s-1", tenant="other")
    assert there.touched("s-1", tenant=T, now=150)
    assert there.prune_idle(60, now=200) == 0 and there.prune_idle(10, now=200) == 1
    here.opened("s-2", tenant=T, client="c", replica="replica-a")
    here.closed("s-2", tenant=T)
    assert there.where("s-2", tenant=T) is None
