"""Kept artifacts: each client reads only its own, within the total cap (oldest removed first) and the TTL."""

from __future__ import annotations

from pathlib import Path

from mcp_code_mode.artifacts import ArtifactLimits, ArtifactStore, RunFiles
from mcp_code_mode.bridge import FileEntry


def keep(store: ArtifactStore, client: str, run_hash: str, content: dict[str, bytes]) -> list[FileEntry]:
    run = RunFiles(store.staging(), store.limits)
    for path, data in content.items():
        run.write(path, data, end=True)
    pairs = run.entries([])
    store.keep(client, run_hash, pairs, tenant="default")
    return [entry for entry, _ in pairs]


def test_each_client_finds_only_its_own_artifacts_by_run_and_path(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", tmp_path / "scripts.db", ArtifactLimits())
    (entry,) = keep(store, "alice", "h1", {"out.txt": b"hers"})
    assert entry.uri == "code-mode://runs/h1/files/out.txt"
    found = store.find("alice", "h1", "out.txt", tenant="default")
    assert found is not None and found.read_bytes() == b"hers" and found.size == 4
    assert store.find("bob", "h1", "out.txt", tenant="default") is None
    assert store.find("alice", "h2", "out.txt", tenant="default") is None
    # one directory per run, named by the host
    assert found.file is not None and found.file.parent.parent == tmp_path / "artifacts"


def test_past_the_total_cap_the_oldest_artifacts_are_removed_first(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", tmp_path / "scripts.db", ArtifactLimits(max_total=10))
    keep(store, "alice", "old", {"a": b"x" * 6})
    keep(store, "bob", "new", {"b": b"y" * 6})
    assert store.find("alice", "old", "a", tenant="default") is None
    kept = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file() and ".staging" not in p.parts]
    assert [p.read_bytes() for p in kept] == [b"y" * 6]  # the old one's file went with its row
    found = store.find("bob", "new", "b", tenant="default")
    assert found is not None and found.read_bytes() == b"y" * 6
    (too_big,) = keep(store, "bob", "huge", {"c": b"z" * 11})
    assert too_big.uri is None and too_big.dropped == "CODE_MODE_ARTIFACT_MAX_TOTAL_MB"


def test_a_new_run_with_the_same_hash_replaces_that_client_s_artifacts(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", tmp_path / "scripts.db", ArtifactLimits())
    keep(store, "alice", "h", {"a.txt": b"one", "b.txt": b"two"})
    keep(store, "alice", "h", {"a.txt": b"three"})
    found = store.find("alice", "h", "a.txt", tenant="default")
    assert found is not None and found.read_bytes() == b"three"
    assert store.find("alice", "h", "b.txt", tenant="default") is None
    assert sum(1 for p in (tmp_path / "artifacts").rglob("*") if p.is_file() and ".staging" not in p.parts) == 1
