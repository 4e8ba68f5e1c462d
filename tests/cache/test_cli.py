"""`mcp-code-mode cache …`: search, list, show, stats, prune and export, without any servers file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.cli import main
from mcp_code_mode.packages.envs import COMPLETE

from .helpers import new_script


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv("CODE_MODE_CACHE_DIR", str(directory))
    monkeypatch.setenv("CODE_MODE_CACHE_EMBEDDER", "hashing")
    monkeypatch.chdir(tmp_path)  # no mcp_servers.json here: the cache commands must not need one
    store = ScriptStore(directory / "scripts.db").open()
    store.put(
        new_script("rows = read()\nsum(rows)", description="sum a column of a CSV file", output="42\n"),
        tenant="default",
    )
    old = store.put(new_script("send()", description="email the weekly report", tools=["email.send"]), tenant="default")
    store.conn.execute("UPDATE scripts SET last_used_at = ? WHERE id = ?", (time.time() - 40 * 86400, old.id))
    store.close()
    return directory


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["cache", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_search_and_list_print_one_line_per_script(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "search", "add up a csv column")
    assert status == 0 and out.splitlines()[0].endswith("sum a column of a CSV file")
    status, out, _ = run(capsys, "list")
    assert status == 0 and [line.split()[-1] for line in out.splitlines()] == ["file", "report"]
    status, out, _ = run(capsys, "search", "csv", "--json")
    assert json.loads(out)[0]["description"] == "sum a column of a CSV file"


def test_show_prints_code_and_output_by_hash_prefix(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "list", "--json")
    first = json.loads(out)[0]["hash"]
    status, out, _ = run(capsys, "show", first[:8])
    assert status == 0 and "--- code ---\nrows = read()\nsum(rows)" in out and "--- output ---\n42" in out
    status, _, err = run(capsys, "show", "abcdef123")
    assert status == 1 and "no cached script" in err


def test_stats_prune_and_export(cache_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, _ = run(capsys, "stats")
    stats = json.loads(out)
    assert status == 0 and stats["scripts"] == 2 and stats["path"] == str(cache_dir / "scripts.db")
    assert stats["environments"]["count"] == 0
    status, out, _ = run(capsys, "prune", "--older-than", "30")
    assert status == 0 and "pruned 1 script(s)" in out
    assert "pruned 0 package environment(s)" in out
    target = tmp_path / "export.jsonl"
    status, _, err = run(capsys, "export", "--output", str(target))
    lines = target.read_text(encoding="utf-8").splitlines()
    assert status == 0 and "exported 1 script(s)" in err
    assert [json.loads(line)["description"] for line in lines] == ["sum a column of a CSV file"]


def test_prune_removes_package_environments_unused_for_that_long(
    cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    envs = cache_dir / "envs"
    for name, age_days in (("old", 40), ("recent", 1)):
        marker = envs / name / COMPLETE
        marker.parent.mkdir(parents=True)
        marker.write_text(json.dumps({"requirements": [f"{name}-pkg"]}), encoding="utf-8")
        (envs / name / "module.py").write_text("x = 1\n", encoding="utf-8")
        then = time.time() - age_days * 86400
        os.utime(marker, (then, then))
    status, out, _ = run(capsys, "stats")
    assert json.loads(out)["environments"]["count"] == 2
    status, out, _ = run(capsys, "prune", "--older-than", "30")
    assert status == 0 and "pruned 1 package environment(s)" in out and "old-pkg" in out
    assert not (envs / "old").exists() and (envs / "recent" / "module.py").exists()


def test_prune_removes_pyodide_snapshots_of_other_versions_unused_for_that_long(
    cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshots = cache_dir / "pyodide"
    snapshots.mkdir(parents=True)
    for name, age_days in (("snapshot-1-a.bin", 100), ("snapshot-1-b.bin", 90), ("snapshot-2-c.bin", 10)):
        path = snapshots / name
        path.write_bytes(b"memory")
        then = time.time() - age_days * 86400
        os.utime(path, (then, then))
    (snapshots / "wheels").mkdir()
    status, out, _ = run(capsys, "prune", "--older-than", "30")
    assert status == 0 and "pruned 2 Pyodide snapshot(s)" in out and "snapshot-1-a.bin" in out
    assert sorted(p.name for p in snapshots.iterdir()) == ["snapshot-2-c.bin", "wheels"]
    # the newest stays even when it is old: it is the one a server starts from
    status, out, _ = run(capsys, "prune", "--older-than", "1")
    assert status == 0 and "pruned 0 Pyodide snapshot(s)" in out
    assert (snapshots / "snapshot-2-c.bin").exists()


def test_help_names_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["cache", "--help"])
    out = capsys.readouterr().out
    for command in ("search", "list", "show", "stats", "prune", "export"):
        assert f"    {command} " in out


def test_every_command_reads_only_the_tenant_it_is_given(cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ScriptStore(cache_dir / "scripts.db").open()
    theirs = store.put(new_script("print('b')", description="beta's own report"), tenant="beta")
    store.close()
    assert run(capsys, "list", "--json")[1].count('"hash"') == 2
    status, out, _ = run(capsys, "list", "--tenant", "beta", "--json")
    assert status == 0 and out.count('"hash"') == 1 and theirs.hash in out
    assert run(capsys, "show", theirs.hash)[0] == 1, "another tenant's script is unknown to default"
    assert run(capsys, "show", theirs.hash, "--tenant", "beta")[0] == 0
    assert "beta's own report" not in run(capsys, "search", "beta report")[1]
    status, _, err = run(capsys, "list", "--tenant", "Not A Tenant")
    assert status == 2 and "tenant" in err
