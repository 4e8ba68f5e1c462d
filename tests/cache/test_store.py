"""The SQLite store: rows, search, a damaged or newer file, concurrent writers and kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from mcp_code_mode.cache.embed import HashingEmbedder, Vectors
from mcp_code_mode.cache.keys import KEY_VERSION
from mcp_code_mode.cache.schema import MIGRATIONS, SCHEMA_VERSION
from mcp_code_mode.cache.store import ScriptStore

from .helpers import new_script

ROOT = Path(__file__).resolve().parents[2]


class CountingEmbedder(HashingEmbedder):
    """The hashing fake, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.texts.extend(texts)
        return super().embed(texts)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ScriptStore]:
    s = ScriptStore(tmp_path / "scripts.db", HashingEmbedder()).open()
    yield s
    s.close()


def test_a_stored_script_comes_back_whole_and_a_second_run_updates_it(store: ScriptStore) -> None:
    first = store.put(
        new_script("print(1)", description="print one", output="1\n", tools=["fs.read"]), tenant="default"
    )
    assert store.get(first.hash, tenant="default") == first
    assert store.get(first.hash[:8], tenant="default") == first
    assert first.run_count == 1 and first.description == "print one" and first.description_given
    assert [t.name for t in first.tools] == ["fs.read"] and first.return_value == {"ok": True}
    again = store.put(new_script("print(1)", output="changed\n", tools=["fs.read"]), tenant="default")
    assert again.id == first.id and again.run_count == 2 and again.output == "changed\n"
    assert again.description == "print one", "a given description is not replaced by a derived one"
    assert store.candidates(first.code_key, tenant="default") == [again]
    assert store.get("zz", tenant="default") is None and store.get("0000000000", tenant="default") is None


def test_side_effects_are_recorded(store: ScriptStore) -> None:
    assert store.put(new_script("print(1)"), tenant="default").side_effect_free
    assert not store.put(new_script("print(2)", tools=["fs.write"]), tenant="default").side_effect_free
    assert not store.put(new_script("print(3)", files=["out.txt"]), tenant="default").side_effect_free
    assert not store.put(new_script("print(4)", network=True), tenant="default").side_effect_free


def test_search_ranks_filters_by_language_and_reports_scores(store: ScriptStore) -> None:
    store.put(
        new_script("rows = read_csv()\ntotal = sum(rows)", description="sum a column of a CSV file"), tenant="default"
    )
    store.put(new_script("send_mail()", description="email the weekly report"), tenant="default")
    store.put(
        new_script("const t = sumCsv()", description="sum a column of a CSV file", language="javascript"),
        tenant="default",
    )
    results = store.search("add up a csv column", limit=5, tenant="default")
    assert results[0].script.description == "sum a column of a CSV file"
    assert results[0].hit.score > 0 and results[0].hit.text_rank == 1
    only_js = store.search("csv column", language="javascript", tenant="default")
    assert [r.script.language for r in only_js] == ["javascript"]
    payload = results[0].to_json()
    assert {"hash", "score", "textRank", "semanticRank", "similarity", "stale"} <= set(payload)


def test_vectors_are_stored_so_reopening_embeds_only_the_query(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    first = ScriptStore(path, HashingEmbedder()).open()
    for i in range(20):
        first.put(new_script(f"print({i})", description=f"script number {i}"), tenant="default")
    first.close()
    counting = CountingEmbedder()
    second = ScriptStore(path, counting).open()
    try:
        assert second.search("script number 3", tenant="default")
        assert counting.texts == ["script number 3"]
    finally:
        second.close()


def test_scripts_stored_without_vectors_are_embedded_once_on_search(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    plain = ScriptStore(path, None).open()
    plain.put(new_script("print(1)", description="alpha task"), tenant="default")
    plain.put(new_script("print(2)", description="beta task"), tenant="default")
    plain.close()
    counting = CountingEmbedder()
    store = ScriptStore(path, counting).open()
    try:
        assert store.search("alpha", tenant="default")[0].script.description == "alpha task"
        assert len(counting.texts) == 3  # two backfilled scripts and the query
        store.search("beta", tenant="default")
        assert len(counting.texts) == 4
    finally:
        store.close()


def test_prune_deletes_scripts_unused_for_longer_than_asked(store: ScriptStore) -> None:
    old = store.put(new_script("print('old')"), tenant="default")
    store.conn.execute("UPDATE scripts SET last_used_at = ? WHERE id = ?", (time.time() - 3600, old.id))
    store.put(new_script("print('new')"), tenant="default")
    assert store.prune(older_than=60, tenant="default") == 1
    assert [s.code for s in store.list(tenant="default")] == ["print('new')"]
    assert store.search("old", tenant="default") == [] or all(
        r.script.code != "print('old')" for r in store.search("old", tenant="default")
    )


def test_a_corrupt_file_is_moved_aside_reported_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    garbage = b"this is not a database" * 100
    path.write_bytes(garbage)
    store = ScriptStore(path, None).open()
    try:
        assert len(store.problems) == 1 and "corrupt" in store.problems[0]
        moved = [p for p in tmp_path.iterdir() if p.name.startswith("scripts.db.corrupt-")]
        assert len(moved) == 1 and moved[0].read_bytes() == garbage
        assert store.put(new_script("print(1)"), tenant="default").run_count == 1
        assert store.stats(tenant="default")["problems"] == store.problems
    finally:
        store.close()


def test_a_database_from_a_newer_schema_is_moved_aside_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    newer = sqlite3.connect(path)
    newer.execute("CREATE TABLE future (x)")
    newer.execute("INSERT INTO future VALUES ('keep me')")
    newer.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    newer.commit()
    newer.close()
    store = ScriptStore(path, None).open()
    store.close()
    assert "newer schema" in store.problems[0]
    (moved,) = [p for p in tmp_path.iterdir() if p.name.startswith(f"scripts.db.newer-schema-v{SCHEMA_VERSION + 5}")]
    check = sqlite3.connect(moved)
    assert check.execute("SELECT x FROM future").fetchall() == [("keep me",)]
    check.close()


def test_an_empty_database_is_migrated_to_the_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    sqlite3.connect(path).close()
    store = ScriptStore(path, None).open()
    try:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.problems == []
    finally:
        store.close()


def test_rows_keyed_before_key_version_2_stay_readable_but_never_answer_a_lookup(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
    conn.execute(
        "INSERT INTO scripts(hash, code_key, language, runner, code, output, created_at, last_run_at, last_used_at)"
        " VALUES ('ab' || printf('%062d', 0), 'old-code-key', 'python', 'local', 'print(1)', '1\n', 1, 1, 1)"
    )
    conn.commit()
    conn.close()
    store = ScriptStore(path, None).open()
    try:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        [old] = store.list(tenant="default")
        assert (old.code, old.output, old.key_version) == ("print(1)", "1\n", 1)
        assert store.get(old.hash, tenant="default") == old
        assert store.candidates("old-code-key", tenant="default") == []
        new = store.put(new_script("print(1)"), tenant="default")
        assert new.key_version == KEY_VERSION and store.candidates(new.code_key, tenant="default") == [new]
    finally:
        store.close()


def _writer(path: Path, prefix: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.cache.writer", str(path), prefix, str(count)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_several_processes_write_one_file_and_every_script_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    writers = [_writer(path, f"w{n}", 40) for n in range(3)]
    hashes: set[str] = set()
    for proc in writers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        hashes |= {line.split()[1] for line in out.splitlines()}
    assert len(hashes) == 120
    store = ScriptStore(path, None).open()
    try:
        assert store.stats(tenant="default")["scripts"] == 120
        assert all(store.get(h, tenant="default") is not None for h in hashes)
    finally:
        store.close()


def test_kill_9_in_the_middle_of_writes_loses_no_committed_script(tmp_path: Path) -> None:
    path = tmp_path / "scripts.db"
    proc = _writer(path, "killed", 100_000)
    assert proc.stdout is not None
    committed: list[str] = []
    try:
        for line in proc.stdout:
            committed.append(line.split()[1])
            if len(committed) == 60:
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    check.close()
    store = ScriptStore(path, None).open()
    try:
        assert store.problems == []
        missing = [h for h in committed if store.get(h, tenant="default") is None]
        assert missing == []
    finally:
        store.close()


def test_kill_9_of_an_engine_process_between_and_during_runs_keeps_every_returned_run(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.cache.engine_writer", str(tmp_path / "cache"), str(tmp_path / "runs")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    returned: list[str] = []
    try:
        for line in proc.stdout:
            returned.append(line.split()[1])
            if len(returned) == 25:
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert len(returned) == 25, err
    store = ScriptStore(tmp_path / "cache" / "scripts.db", None).open()
    try:
        assert store.problems == []
        assert [h for h in returned if store.get(h, tenant="default") is None] == []
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        store.close()
