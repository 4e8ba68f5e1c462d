"""Tenant A never reads, replays, searches, lists, prunes or deletes tenant B's rows: one test per store
operation, on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_code_mode.artifacts import ArtifactLimits, ArtifactStore, RunFiles
from mcp_code_mode.cache.audit import AuditEntry, AuditLog
from mcp_code_mode.cache.embed import HashingEmbedder
from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.database import Database
from mcp_code_mode.privacy.seal import Sealer
from mcp_code_mode.privacy.store import DatabaseVault
from mcp_code_mode.skills import SkillStore, SkillVersion

from ..cache.helpers import new_script

A, B = "alpha", "beta"


@pytest.fixture
def scripts(database: Database) -> ScriptStore:
    return ScriptStore(database, HashingEmbedder()).open()


def test_scripts_get_and_candidates(scripts: ScriptStore) -> None:
    theirs = scripts.put(new_script("print(1)"), tenant=B)
    assert scripts.get(theirs.hash, tenant=A) is None and scripts.get(theirs.hash[:8], tenant=A) is None
    assert scripts.get_by_id(theirs.id, tenant=A) is None
    assert scripts.candidates(theirs.code_key, tenant=A) == [], "no replay of another tenant's run"


def test_scripts_same_code_is_two_rows(scripts: ScriptStore) -> None:
    mine = scripts.put(new_script("print(1)", output="mine"), tenant=A)
    theirs = scripts.put(new_script("print(1)", output="theirs"), tenant=B)
    assert mine.hash == theirs.hash and mine.id != theirs.id and mine.run_count == theirs.run_count == 1
    assert scripts.get(mine.hash, tenant=A).output == "mine"  # pyright: ignore[reportOptionalMemberAccess]


def test_scripts_record_lookup(scripts: ScriptStore) -> None:
    theirs = scripts.put(new_script("print(1)"), tenant=B)
    scripts.record_lookup(theirs.id, tenant=A)
    assert scripts.get(theirs.hash, tenant=B).hit_count == 0  # pyright: ignore[reportOptionalMemberAccess]
    assert scripts.stats(tenant=A)["hits"] == 0 and scripts.stats(tenant=A)["lookups"] == 1


def test_scripts_list_export_stats(scripts: ScriptStore) -> None:
    scripts.put(new_script("print(1)"), tenant=B)
    assert scripts.list(tenant=A) == [] and list(scripts.iter_all(tenant=A)) == []
    assert scripts.stats(tenant=A)["scripts"] == 0 and scripts.stats(tenant=B)["scripts"] == 1


def test_scripts_search(scripts: ScriptStore) -> None:
    scripts.put(new_script("print(1)", description="count the sheep"), tenant=B)
    assert scripts.search("count the sheep", tenant=A) == []


def test_scripts_prune(scripts: ScriptStore) -> None:
    scripts.put(new_script("print(1)"), tenant=B)
    assert scripts.prune(-10, tenant=A) == 0 and scripts.stats(tenant=B)["scripts"] == 1


def entry(run_id: str = "r1") -> AuditEntry:
    return AuditEntry.of_call(
        server="fs", tool="read", arguments={}, decision="allowed", client="c", run_id=run_id, code_hash="h" * 16
    )


def test_audit_query(database: Database) -> None:
    log = AuditLog(database)
    log.record(entry(), tenant=B)
    assert log.query(tenant=A) == [] and len(log.query(tenant=B)) == 1
    assert log.query(run="r1", tool="fs.*", tenant=A) == []


def test_audit_set_run_hash_and_prune(database: Database) -> None:
    log = AuditLog(database)
    log.record(entry(), tenant=B)
    assert log.set_run_hash("r1", "f" * 16, tenant=A) == 0
    assert log.prune(0.000001, tenant=A, now=10**10) == 0 and len(log.query(tenant=B)) == 1


def test_plans(database: Database) -> None:
    log = AuditLog(database)
    log.save_plan("plan-1", "h", "c", 60, [], tenant=B)
    assert log.load_plan("plan-1", tenant=A) is None
    assert not log.mark_plan_used("plan-1", tenant=A)
    assert log.mark_plan_used("plan-1", tenant=B)


def skill(code: str = "return 1") -> SkillVersion:
    return SkillVersion(name="tally", version=0, language="python", description="", code=code, parameters={})


def test_skills_latest_versions_delete(database: Database) -> None:
    store = SkillStore(database)
    store.save(skill(), tenant=B)
    assert store.latest(tenant=A) == [] and store.versions("tally", tenant=A) == []
    assert store.save(skill("return 2"), tenant=A).version == 1, "versions are counted per tenant"
    assert store.delete("tally", tenant=A) == 1
    assert [s.version for s in store.versions("tally", tenant=B)] == [1]


def keep(store: ArtifactStore, tenant: str, client: str, run_hash: str, data: bytes) -> None:
    run = RunFiles(store.staging(), store.limits)
    run.write("out.txt", data, end=True)
    store.keep(client, run_hash, run.entries([]), tenant=tenant)


def test_artifacts_find_recent_and_the_total_cap(database: Database, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", database, ArtifactLimits(max_total=10))
    keep(store, B, "c", "h", b"theirs")
    assert store.find("c", "h", "out.txt", tenant=A) is None and store.recent("c", tenant=A) == []
    keep(store, A, "c", "h2", b"mine!!")  # 6 + 6 > 10: only this tenant's oldest may go, and there are none
    found = store.find("c", "h", "out.txt", tenant=B)
    assert found is not None and found.read_bytes() == b"theirs"


def test_vault(database: Database) -> None:
    vault = DatabaseVault(database, Sealer(b"k" * 32))
    token = vault.token_for("c", "email", "a@b.example", tenant=B)
    assert token is not None and vault.lookup("c", token, tenant=A) is None
    assert vault.size("c", tenant=A) == 0
    assert vault.token_for("c", "email", "a@b.example", tenant=A) == token, "numbered apart: the same first number"
    vault.forget("c", tenant=A)
    assert vault.lookup("c", token, tenant=B) is not None


def test_scripts_search_of_a_small_tenant_is_not_crowded_out_by_a_big_one(database: Database) -> None:
    words_only = ScriptStore(database).open()  # no embeddings: the full-text ranking alone must find it
    words_only.put_many(
        [new_script(f"print({i})", description=f"invoice report number {i}") for i in range(450)], tenant=B
    )
    mine = words_only.put(new_script("print('mine')", description="invoice report of alpha"), tenant=A)
    assert [r.script.id for r in words_only.search("invoice report", tenant=A)] == [mine.id]
