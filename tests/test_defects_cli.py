"""`run` runs (a replay is asked for and said), `--packages`, and `--config` on every command with its `.env`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_code_mode.cli import main, split_packages

from .conftest import write_config

RANDOM = "import random\nprint(random.random())\n"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["run", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("CODE_MODE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CODE_MODE_CACHE_EMBEDDER", "hashing")
    config = write_config(tmp_path / "servers.json", {})
    script = tmp_path / "random_number.py"
    script.write_text(RANDOM, encoding="utf-8")
    return config, script


def test_run_runs_the_script_every_time_by_default(
    setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, script = setup
    first = _run(capsys, str(script), "--config", str(config))
    second = _run(capsys, str(script), "--config", str(config))
    assert first[0] == second[0] == 0
    assert first[1] != second[1], "the same random number twice: a stored result was replayed"
    assert "replayed" not in first[2] + second[2]


def test_a_replay_is_asked_for_with_cache_reuse_and_said_on_stderr(
    setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config, script = setup
    _, stored, _ = _run(capsys, str(script), "--config", str(config))  # runs and stores
    status, replayed, err = _run(capsys, str(script), "--config", str(config), "--cache", "reuse")
    assert status == 0 and replayed == stored
    assert "[replayed from the cache (--cache reuse): the script did not run" in err
    status, fresh, err = _run(capsys, str(script), "--config", str(config), "--cache", "off")
    assert status == 0 and fresh != stored and "replayed" not in err


def test_run_json_says_cached(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, script = setup
    _run(capsys, str(script), "--config", str(config))
    _, out, err = _run(capsys, str(script), "--config", str(config), "--cache", "reuse", "--json")
    assert json.loads(out)["cached"] is True and "replayed" in err


def test_an_unknown_cache_mode_is_refused_by_the_parser(setup: tuple[Path, Path]) -> None:
    config, script = setup
    with pytest.raises(SystemExit) as exited:
        main(["run", str(script), "--config", str(config), "--cache", "sometimes"])
    assert exited.value.code == 2


def test_packages_are_repeatable_or_comma_lists_and_version_ranges_stay_whole() -> None:
    assert split_packages(["requests", "pyyaml,python-dateutil", "numpy>=1.26,<2", " attrs , "]) == [
        "requests",
        "pyyaml",
        "python-dateutil",
        "numpy>=1.26,<2",
        "attrs",
    ]


def test_packages_reach_the_run(setup: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    config, script = setup
    status, _, err = _run(capsys, str(script), "--config", str(config), "--packages", "surely-not-whitelisted-pkg")
    assert status == 1
    assert "surely-not-whitelisted-pkg" in err


def test_run_help_explains_cache_and_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for fragment in ("--cache {auto,reuse,refresh,off}", "default: refresh", "--packages REQ", "runs every time"):
        assert fragment in out, fragment


@pytest.mark.parametrize(
    "sub", [["list"], ["search", "anything"], ["show", "abcdef"], ["stats"], ["prune"], ["export"]]
)
def test_every_cache_subcommand_takes_config_and_reads_the_env_beside_it(
    sub: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODE_MODE_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text(
        f"CODE_MODE_CACHE_DIR={tmp_path / 'beside'}\nCODE_MODE_CACHE_EMBEDDER=hashing\n", encoding="utf-8"
    )
    main(["cache", *sub, "--config", str(project / "mcp_servers.json")])  # the servers file need not exist
    captured = capsys.readouterr()
    assert "unrecognized arguments" not in captured.err
    assert (tmp_path / "beside" / "scripts.db").exists(), "the cache of the .env beside the servers file"


def test_the_env_beside_the_config_wins_over_the_one_in_the_working_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODE_MODE_CACHE_DIR", raising=False)
    monkeypatch.delenv("CODE_MODE_ENV_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(f"CODE_MODE_CACHE_DIR={tmp_path / 'here'}\nGREETING=here\n", encoding="utf-8")
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text(f"CODE_MODE_CACHE_DIR={tmp_path / 'beside'}\n", encoding="utf-8")
    main(["cache", "stats", "--config", str(project / "mcp_servers.json")])
    assert json.loads(capsys.readouterr().out)["scripts"] == 0
    assert (tmp_path / "beside" / "scripts.db").exists() and not (tmp_path / "here").exists()
