"""The audit log and the plans: storage in the cache database, queries, redaction, retention, durability."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.cache import AuditEntry, AuditLog, Decision, arguments_digest, parse_since, preview
from mcp_code_mode.cache.audit import DECISIONS, ELLIPSIS, ERROR_LIMIT, REDACTED, is_secret_key
from mcp_code_mode.cache.schema import MIGRATIONS, SCHEMA_VERSION

NOW = 1_800_000_000.0
RUN_HASH = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"
CODE_HASH = "c0de" + "0" * 60


def entry(
    *,
    at: float = NOW,
    tool: str = "search",
    server: str = "github",
    decision: Decision = "allowed",
    run_id: str = "run-1",
    code_hash: str = CODE_HASH,
    client: str = "session-a",
    arguments: Any = None,
    ok: bool = True,
    error: str | None = None,
) -> AuditEntry:
    return AuditEntry.of_call(
        server=server,
        tool=tool,
        arguments={"q": "x"} if arguments is None else arguments,
        decision=decision,
        client=client,
        run_id=run_id,
        code_hash=code_hash,
        ms=1.5,
        ok=ok,
        error=error,
        at=at,
    )


@pytest.fixture
def log(tmp_path: Path) -> Iterator[AuditLog]:
    audit = AuditLog(tmp_path / "scripts.db")
    yield audit
    audit.close()


# ----- arguments -----------------------------------------------------------------------------------


def test_the_digest_does_not_depend_on_key_order_but_on_every_value() -> None:
    one = arguments_digest({"a": 1, "b": {"c": [1, 2], "d": "é"}})
    assert one == arguments_digest({"b": {"d": "é", "c": [1, 2]}, "a": 1})
    assert one != arguments_digest({"a": 1, "b": {"c": [2, 1], "d": "é"}})
    assert len(one) == 64 and set(one) <= set("0123456789abcdef")


def test_a_preview_redacts_secret_values_at_any_depth_and_keeps_the_rest() -> None:
    arguments = {
        "query": "open issues",
        "headers": [{"Authorization": "Bearer abc", "Accept": "json"}],
        "config": {"nested": {"githubToken": "ghp_1", "client_secret": {"deep": "s"}, "X-Api-Key": "k"}},
        "password": "hunter2",
    }
    text = preview(arguments, limit=1000)
    assert json.loads(text) == {
        "query": "open issues",
        "headers": [{"Authorization": REDACTED, "Accept": "json"}],
        "config": {"nested": {"githubToken": REDACTED, "client_secret": REDACTED, "X-Api-Key": REDACTED}},
        "password": REDACTED,
    }
    for secret in ("abc", "ghp_1", "hunter2", '"s"', '"k"'):
        assert secret not in text


def test_secret_keys_are_matched_case_insensitively_ignoring_separators() -> None:
    for key in ("PASSWORD", "passwd", "Api_Key", "apikey", "private-key", "Set-Cookie", "credentials", "auth"):
        assert is_secret_key(key), key
    for key in ("query", "owner", "path", "limit", "body"):
        assert not is_secret_key(key), key


def test_a_long_preview_is_cut_to_the_limit_with_an_ellipsis() -> None:
    text = preview({"body": "x" * 500}, limit=50)
    assert len(text) == 50 and text.endswith(ELLIPSIS) and text.startswith('{"body":"xxx')
    assert preview({"a": 1}) == '{"a":1}'


def test_an_entry_with_an_unknown_decision_is_refused() -> None:
    with pytest.raises(ValueError, match="decision must be one of"):
        entry(decision="maybe")  # pyright: ignore[reportArgumentType]
    assert DECISIONS == ("allowed", "approved", "denied", "planned", "over_cap", "refused")


# ----- recording and queries ---------------------------------------------------------------------


def test_a_recorded_entry_comes_back_as_camel_case_json(log: AuditLog) -> None:
    log.record(
        entry(arguments={"q": "bugs", "token": "t0k"}, ok=False, error="boom", decision="approved"), tenant="default"
    )
    (row,) = log.query(tenant="default")
    assert row == {
        "id": row["id"],
        "at": "2027-01-15T08:00:00.000Z",
        "client": "session-a",
        "runId": "run-1",
        "codeHash": CODE_HASH,
        "runHash": None,
        "server": "github",
        "tool": "search",
        "argumentsDigest": arguments_digest({"q": "bugs", "token": "t0k"}),
        "preview": '{"q":"bugs","token":"[REDACTED]"}',
        "decision": "approved",
        "ms": 1.5,
        "ok": False,
        "error": "boom",
    }
    json.dumps(row)


def test_entries_come_newest_first_and_limit_keeps_the_newest(log: AuditLog) -> None:
    log.record_many([entry(at=NOW + i, tool=f"t{i}") for i in range(5)], tenant="default")
    assert [r["tool"] for r in log.query(tenant="default")] == ["t4", "t3", "t2", "t1", "t0"]
    assert [r["tool"] for r in log.query(limit=2, tenant="default")] == ["t4", "t3"]
    with pytest.raises(ValueError, match="limit"):
        log.query(limit=0, tenant="default")


def test_the_run_filter_matches_a_run_id_code_hash_or_run_hash(log: AuditLog) -> None:
    log.record(entry(run_id="run-1", code_hash=CODE_HASH, tool="first"), tenant="default")
    log.record(entry(run_id="run-2", code_hash="f" * 64, tool="second"), tenant="default")
    assert log.set_run_hash("run-2", RUN_HASH, tenant="default") == 1
    assert [r["tool"] for r in log.query(run="run-1", tenant="default")] == ["first"]
    assert [r["tool"] for r in log.query(run=CODE_HASH, tenant="default")] == ["first"]
    assert [r["tool"] for r in log.query(run=RUN_HASH, tenant="default")] == ["second"]
    assert log.query(run=RUN_HASH, tenant="default")[0]["runHash"] == RUN_HASH
    assert log.query(run="run-3", tenant="default") == []


def test_the_run_filter_takes_a_hex_prefix_of_eight_or_more(log: AuditLog) -> None:
    log.record(entry(run_id="run-1", tool="first"), tenant="default")
    log.record(entry(run_id="run-2", code_hash="f" * 64, tool="second"), tenant="default")
    log.set_run_hash("run-1", RUN_HASH, tenant="default")
    assert [r["tool"] for r in log.query(run=RUN_HASH[:8], tenant="default")] == ["first"]
    assert [r["tool"] for r in log.query(run=RUN_HASH[:12].upper(), tenant="default")] == ["first"]
    assert [r["tool"] for r in log.query(run="ffffffff", tenant="default")] == ["second"]
    assert log.query(run=RUN_HASH[:7], tenant="default") == []  # too short to be a prefix
    assert log.query(run="c0de0000z", tenant="default") == []  # not hex: exact matches only


def test_the_tool_filter_is_a_glob_over_server_dot_tool_or_the_tool(log: AuditLog) -> None:
    log.record(entry(server="github", tool="search_issues"), tenant="default")
    log.record(entry(server="github", tool="create_issue"), tenant="default")
    log.record(entry(server="slack", tool="search_messages"), tenant="default")
    assert {r["tool"] for r in log.query(tool="github.*", tenant="default")} == {"search_issues", "create_issue"}
    assert {r["tool"] for r in log.query(tool="search_*", tenant="default")} == {"search_issues", "search_messages"}
    assert [r["tool"] for r in log.query(tool="slack.search_messages", tenant="default")] == ["search_messages"]
    assert [r["tool"] for r in log.query(tool="create_issue", tenant="default")] == ["create_issue"]
    assert log.query(tool="gitlab.*", tenant="default") == []


def test_the_since_and_client_filters(log: AuditLog) -> None:
    log.record(entry(at=NOW - 7200, client="session-a", tool="old"), tenant="default")
    log.record(entry(at=NOW - 60, client="session-a", tool="recent"), tenant="default")
    log.record(entry(at=NOW - 30, client="session-b", tool="other"), tenant="default")
    assert [r["tool"] for r in log.query(since=NOW - 3600, tenant="default")] == ["other", "recent"]
    assert [r["tool"] for r in log.query(client="session-a", tenant="default")] == ["recent", "old"]
    assert [r["tool"] for r in log.query(client="session-a", since=NOW - 3600, tenant="default")] == ["recent"]


def test_a_long_error_is_stored_cut(log: AuditLog) -> None:
    log.record(entry(ok=False, error="e" * 5000), tenant="default")
    (row,) = log.query(tenant="default")
    assert len(row["error"]) == ERROR_LIMIT and row["error"].endswith(ELLIPSIS)


def test_prune_deletes_entries_older_than_the_retention(log: AuditLog) -> None:
    log.record_many([entry(at=NOW - days * 86_400, tool=f"d{days}") for days in (40, 31, 29, 1)], tenant="default")
    assert log.prune(30, now=NOW, tenant="default") == 2
    assert [r["tool"] for r in log.query(tenant="default")] == ["d1", "d29"]
    assert log.prune(30, now=NOW, tenant="default") == 0
    with pytest.raises(ValueError, match="positive"):
        log.prune(0, tenant="default")


def test_since_parses_iso_times_and_ages() -> None:
    assert parse_since("15m", now=NOW) == NOW - 900
    assert parse_since("2h", now=NOW) == NOW - 7200
    assert parse_since("3d", now=NOW) == NOW - 3 * 86_400
    assert parse_since("1.5h", now=NOW) == NOW - 5400
    assert parse_since("2026-12-01T10:00") == parse_since("2026-12-01T10:00:00Z") == 1_796_119_200.0
    assert parse_since("2026-12-01T11:00+01:00") == 1_796_119_200.0
    assert parse_since("2026-12-01") == 1_796_083_200.0
    with pytest.raises(ValueError, match="'yesterday'"):
        parse_since("yesterday")


# ----- plans -------------------------------------------------------------------------------------


def test_a_plan_is_kept_until_it_expires(log: AuditLog) -> None:
    calls = [{"server": "github", "tool": "create_issue", "arguments": {"title": "t"}}]
    log.save_plan("plan-1", CODE_HASH, "session-a", 60, calls, now=NOW, tenant="default")
    plan = log.load_plan("plan-1", now=NOW + 59, tenant="default")
    assert plan == {
        "id": "plan-1",
        "codeHash": CODE_HASH,
        "client": "session-a",
        "createdAt": NOW,
        "expiresAt": NOW + 60,
        "calls": calls,
        "usedAt": None,
    }
    assert log.load_plan("plan-1", now=NOW + 60, tenant="default") is None
    assert log.load_plan("plan-2", now=NOW, tenant="default") is None


def test_a_plan_is_used_once_and_never_replaced(log: AuditLog) -> None:
    log.save_plan("plan-1", CODE_HASH, "session-a", 60, [], now=NOW, tenant="default")
    assert log.mark_plan_used("plan-1", now=NOW + 1, tenant="default")
    assert not log.mark_plan_used("plan-1", now=NOW + 2, tenant="default")
    plan = log.load_plan("plan-1", now=NOW + 3, tenant="default")
    assert plan is not None and plan["usedAt"] == NOW + 1
    with pytest.raises(sqlite3.IntegrityError):
        log.save_plan("plan-1", "other", "session-b", 60, [], now=NOW, tenant="default")
    assert not log.mark_plan_used("unknown", now=NOW, tenant="default")
    log.save_plan("plan-2", CODE_HASH, "session-a", 60, [], now=NOW, tenant="default")
    assert not log.mark_plan_used("plan-2", now=NOW + 61, tenant="default")  # expired
    with pytest.raises(ValueError, match="ttl_s"):
        log.save_plan("plan-3", CODE_HASH, "session-a", 0, [], tenant="default")


def test_prune_deletes_expired_plans_too(log: AuditLog) -> None:
    log.save_plan("gone", CODE_HASH, "session-a", 60, [], now=NOW - 120, tenant="default")
    log.save_plan("kept", CODE_HASH, "session-a", 60, [], now=NOW, tenant="default")
    log.prune(30, now=NOW + 1, tenant="default")
    rows = sqlite3.connect(log.path).execute("SELECT id FROM plans").fetchall()
    assert rows == [("kept",)]


# ----- the file ----------------------------------------------------------------------------------


def test_two_logs_on_one_file_lose_no_write_from_many_threads(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    logs = [AuditLog(path), AuditLog(path)]
    errors: list[BaseException] = []

    def write(number: int) -> None:
        try:
            for i in range(25):
                logs[number % 2].record(entry(run_id=f"thread-{number}", tool=f"t{i}"), tenant="default")
        except BaseException as exc:  # the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert not errors and not any(t.is_alive() for t in threads)
        rows = logs[0].query(limit=1000, tenant="default")
        assert len(rows) == 150 and len({r["id"] for r in rows}) == 150
        assert {len(logs[1].query(run=f"thread-{n}", limit=1000, tenant="default")) for n in range(6)} == {25}
    finally:
        for audit in logs:
            audit.close()


KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from mcp_code_mode.cache import AuditEntry, AuditLog
log = AuditLog(Path(sys.argv[1]))
for i in range(int(sys.argv[2])):
    log.record(AuditEntry.of_call(server="s", tool=f"t{i}", arguments={"i": i}, decision="allowed",
                                  client="c", run_id="killed", code_hash="h", ok=True), tenant="default")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_every_recorded_entry_survives_kill_9_of_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(path), "50"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert path.with_name("scripts.db-wal").exists()  # the rows are in the WAL, never checkpointed
    with AuditLog(path) as audit:
        rows = audit.query(run="killed", limit=100, tenant="default")
    assert sorted(r["tool"] for r in rows) == sorted(f"t{i}" for i in range(50))


def test_a_version_3_database_gains_the_audit_and_plan_tables(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    conn = sqlite3.connect(path)
    conn.executescript("".join(MIGRATIONS[:3]) + "PRAGMA user_version = 3;")
    conn.execute(
        "INSERT INTO scripts(hash, code_key, language, runner, code, created_at, last_run_at, last_used_at)"
        " VALUES ('abc123', 'k', 'python', 'local', 'print(1)', 1, 1, 1)"
    )
    conn.commit()
    conn.close()
    assert SCHEMA_VERSION >= 4
    with AuditLog(path) as audit:
        audit.record(entry(), tenant="default")
        audit.save_plan("p", CODE_HASH, "c", 60, [], tenant="default")
        assert len(audit.query(tenant="default")) == 1 and audit.problems == []
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"audit_at", "audit_run_id", "audit_code_hash", "audit_run_hash", "audit_server_tool"} <= indexes
        assert conn.execute("SELECT hash FROM scripts").fetchall() == [("abc123",)]
    finally:
        conn.close()
