"""`mcp-code-mode audit`: the audit log as a table or JSON lines, its filters, and pruning, without any servers file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mcp_code_mode.cache import AuditEntry, AuditLog, Decision
from mcp_code_mode.cli import main

RUN_HASH = "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("CODE_MODE_CACHE_DIR", str(directory))
    monkeypatch.delenv("CODE_MODE_AUDIT_DAYS", raising=False)
    monkeypatch.chdir(tmp_path)  # no mcp_servers.json here: the audit command must not need one
    return directory


def call(
    tool: str, *, age_s: float, decision: Decision = "allowed", client: str = "session-a", ok: bool = True
) -> AuditEntry:
    return AuditEntry.of_call(
        server="github",
        tool=tool,
        arguments={"query": f"{tool} args", "token": "ghp_secret"},
        decision=decision,
        client=client,
        run_id=f"run-{tool}",
        code_hash="c0de" + "0" * 60,
        ms=12.25,
        ok=ok,
        error=None if ok else "tool failed: rate limited",
        at=time.time() - age_s,
    )


@pytest.fixture
def filled(cache_dir: Path) -> Path:
    with AuditLog(cache_dir / "scripts.db") as log:
        log.record(call("old_search", age_s=40 * 86_400), tenant="default")
        log.record(
            call("create_issue", age_s=3 * 3600, decision="approved", client="session-b", ok=False), tenant="default"
        )
        log.record(call("delete_repo", age_s=600, decision="denied", ok=False), tenant="default")
        log.record(call("search_issues", age_s=60), tenant="default")
        log.set_run_hash("run-search_issues", RUN_HASH, tenant="default")
    return cache_dir


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["audit", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_table_shows_every_call_newest_first_with_secrets_redacted(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(capsys)
    header, *lines = out.splitlines()
    assert status == 0 and header.split() == ["TIME", "CLIENT", "RUN", "TOOL", "DECISION", "MS", "OK", "PREVIEW"]
    assert [line.split()[3] for line in lines] == [
        "github.search_issues",
        "github.delete_repo",
        "github.create_issue",
        "github.old_search",
    ]
    newest = lines[0].split()
    assert newest[1:3] == ["session-a", RUN_HASH[:12]] and newest[4:7] == ["allowed", "12.2", "ok"]
    assert lines[1].split()[4:7] == ["denied", "12.2", "-"] and lines[2].split()[6] == "fail"
    assert "! tool failed: rate limited" in lines[2]
    assert '"token":"[REDACTED]"' in out and "ghp_secret" not in out


def test_json_prints_one_object_per_line_newest_first(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and [r["tool"] for r in rows] == ["search_issues", "delete_repo", "create_issue", "old_search"]
    assert rows[0]["runHash"] == RUN_HASH and rows[0]["at"].endswith("Z") and rows[1]["decision"] == "denied"


def test_the_filters_narrow_the_log(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def tools(*argv: str) -> list[str]:
        status, out, _ = run(capsys, "--json", *argv)
        assert status == 0
        return [json.loads(line)["tool"] for line in out.splitlines()]

    assert tools("--run", RUN_HASH[:8]) == ["search_issues"]
    assert tools("--run", "run-delete_repo") == ["delete_repo"]
    assert tools("--tool", "github.*_issue*") == ["search_issues", "create_issue"]
    assert tools("--tool", "delete_repo") == ["delete_repo"]
    assert tools("--since", "1h") == ["search_issues", "delete_repo"]
    assert tools("--since", time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 86_400))) == [
        "search_issues",
        "delete_repo",
        "create_issue",
    ]
    assert tools("--client", "session-b") == ["create_issue"]
    assert tools("--limit", "2") == ["search_issues", "delete_repo"]


def test_a_bad_since_is_an_error_naming_it(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "--since", "last tuesday")
    assert status == 2 and out == "" and "--since" in err and "'last tuesday'" in err


def test_an_empty_log_says_so(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys)
    assert status == 0 and out.startswith("the audit log is empty (no cache database at")
    assert not cache_dir.exists()  # reading an absent log creates nothing
    AuditLog(cache_dir / "scripts.db").close()
    status, out, _ = run(capsys)
    assert status == 0 and out == "the audit log is empty\n"
    status, out, err = run(capsys, "--json")
    assert status == 0 and out == "" and err == "the audit log is empty\n"


def test_no_match_names_the_filters(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "--tool", "slack.*", "--client", "nobody")
    assert status == 0 and out == "no audit entries match --tool slack.* --client nobody\n"


def test_prune_removes_entries_older_than_the_audit_days(
    filled: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, out, _ = run(capsys, "--prune")
    assert status == 0 and out.startswith("pruned 1 audit entry older than 30 days")
    monkeypatch.setenv("CODE_MODE_AUDIT_DAYS", "0.01")  # 14.4 minutes
    status, out, _ = run(capsys, "--prune")
    assert status == 0 and out.startswith("pruned 1 audit entry older than 0.01 days")
    _, out, _ = run(capsys, "--json")
    assert [json.loads(line)["tool"] for line in out.splitlines()] == ["search_issues", "delete_repo"]
    status, _, err = run(capsys, "--prune", "--tool", "x")
    assert status == 2 and "--prune takes none of --tool" in err


def test_the_cache_dir_comes_from_the_env_file_beside_config(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODE_MODE_CACHE_DIR")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / ".env").write_text(f"CODE_MODE_CACHE_DIR={filled}\n", encoding="utf-8")
    status, out, _ = run(capsys, "--config", str(folder / "mcp_servers.json"), "--limit", "1")
    assert status == 0 and "github.search_issues" in out and len(out.splitlines()) == 2


def test_the_log_of_another_tenant_is_not_shown(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with AuditLog(cache_dir / "scripts.db") as log:
        log.record(
            AuditEntry.of_call(
                server="fs", tool="read", arguments={}, decision="allowed", client="c", run_id="r", code_hash="h"
            ),
            tenant="beta",
        )
    assert main(["audit", "--json"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["audit", "--json", "--tenant", "beta"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["tool"] == "read"
