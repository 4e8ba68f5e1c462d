"""``mcp-code-mode cache migrate --to postgresql://…`` on a cache filled by real runs, read back through the
PostgreSQL stores: every table copied once, a second run copies nothing, different data under the same keys is
refused unless --replace."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_code_mode.artifacts import ArtifactLimits, ArtifactStore
from mcp_code_mode.cache.audit import AuditLog
from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.cli import main
from mcp_code_mode.database import open_database
from mcp_code_mode.engine import CodeMode

from ..conftest import fixture_entry, make_config
from .conftest import fresh_database

T = "default"


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A cache directory after three real runs: a pure one, one calling a tool, one leaving a file."""
    import anyio

    base = tmp_path_factory.mktemp("migrate")
    config = make_config({"fixture": fixture_entry()}, workspace_dir=base / "runs", cache_dir=base / "cache")
    hashes: dict[str, str] = {}

    async def fill() -> None:
        async with CodeMode(config) as cm:
            for name, code in {
                "pure": "print(sum(range(10)))",
                "tool": "print('sum is', fixture.add(a=2, b=40)['result'])",
                "file": "open('notes.txt', 'w').write('alpha beta')\n'written'",
            }.items():
                result = await cm.execute(code)
                assert result.success, result.error
                hashes[name] = result.hash

    anyio.run(fill)
    return base / "cache", hashes


def test_migrate_copies_every_table_once_and_the_postgresql_stores_read_it_back(
    filled: tuple[Path, dict[str, str]],
    pg_server: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache, hashes = filled
    monkeypatch.setenv("CODE_MODE_CACHE_DIR", str(cache))
    url = fresh_database(pg_server)
    assert main(["cache", "migrate", "--to", url]) == 0
    first = capsys.readouterr().out
    assert "scripts: 3 copied, 0 already there" in first and "artifacts: 1 copied" in first, first.replace("\n", " | ")
    assert "audit: 1 copied" in first and "counters:" in first

    db = open_database(url)
    try:
        scripts = ScriptStore(db).open()
        pure = scripts.get(hashes["pure"], tenant=T)
        assert pure is not None and pure.output == "45\n"
        assert scripts.search("sum range", tenant=T)[0].script.hash == hashes["pure"]
        calls = AuditLog(db).query(tenant=T)
        assert [(c["server"], c["tool"], c["decision"]) for c in calls] == [("fixture", "add", "allowed")]
        (client,) = [r[0] for r in db.read("SELECT client FROM artifacts")]
        elsewhere = ArtifactStore(cache.parent / "another-replica", db, ArtifactLimits())
        found = elsewhere.find(client, hashes["file"], "notes.txt", tenant=T)
        assert found is not None and found.read_bytes() == b"alpha beta"

        assert main(["cache", "migrate", "--to", url]) == 0
        again = capsys.readouterr().out
        assert "scripts: 0 copied, 3 already there" in again and "audit: 0 copied, 1 already there" in again
        assert db.read("SELECT count(*) FROM scripts")[0][0] == 3

        db.write(lambda tx: tx.execute("UPDATE scripts SET output = 'tampered' WHERE hash = ?", (hashes["pure"],)))
        assert main(["cache", "migrate", "--to", url]) == 1
        refused = capsys.readouterr().err
        assert "refused" in refused and "nothing was copied" in refused and hashes["pure"][:12] in refused
        assert scripts.get(hashes["pure"], tenant=T).output == "tampered"  # pyright: ignore[reportOptionalMemberAccess]
        assert main(["cache", "migrate", "--to", url, "--replace"]) == 0
        assert "scripts: 0 copied, 2 already there, 1 replaced" in capsys.readouterr().out
        assert scripts.get(hashes["pure"], tenant=T).output == "45\n"  # pyright: ignore[reportOptionalMemberAccess]
    finally:
        db.close()


def test_migrate_refuses_what_is_not_a_postgresql_url_and_names_no_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CODE_MODE_CACHE_DIR", str(tmp_path))
    assert main(["cache", "migrate", "--to", "mysql://u:hunter2@db/x"]) == 2
    assert "hunter2" not in capsys.readouterr().err
    (tmp_path / "scripts.db").touch()
    assert main(["cache", "migrate", "--to", "postgresql://u:hunter2@127.0.0.1:1/x"]) == 1
    err = capsys.readouterr().err
    assert "127.0.0.1:1/x cannot be reached" in err and "hunter2" not in err
