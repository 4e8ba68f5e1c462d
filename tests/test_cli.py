"""The command line: bad configs, `run` and `stubs`, and the stdio entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_code_mode.cli import main

from .conftest import filesystem_entry, fixture_entry, write_config

pytestmark = pytest.mark.usefixtures("entered_as_served")  # the commands' engines are not waited for by the suite

ROOT = Path(__file__).resolve().parent.parent

BAD_CONFIGS = {
    "invalid JSON": ('{"servers": {"fs": {"command": "x",}}}', ["invalid JSON at line 1"]),
    "unknown transport": ('{"servers": {"fs": {"type": "carrier-pigeon"}}}', ["server 'fs'", "field 'type'"]),
    "missing command": ('{"mcpServers": {"fs": {"args": ["a"]}}}', ["server 'fs'", "'command'"]),
    "wrong types": ('{"servers": {"fs": {"command": "x", "args": {"a": 1}}}}', ["server 'fs', field 'args'"]),
}


@pytest.mark.parametrize("case", BAD_CONFIGS)
def test_a_bad_config_gets_one_clear_message_and_a_non_zero_exit(case: str, tmp_path: Path) -> None:
    text, expected = BAD_CONFIGS[case]
    path = tmp_path / "servers.json"
    path.write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_code_mode.executor_server", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr
    for fragment in expected:
        assert fragment in proc.stderr


def test_a_missing_config_file_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stubs", "--config", str(tmp_path / "nope.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_run_prints_output_and_return_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"servers": {"fixture": fixture_entry()}}), encoding="utf-8")
    script = tmp_path / "script.py"
    script.write_text("print('sum is', fixture.add(a=2, b=40)['result'])\n{'ok': True}\n", encoding="utf-8")
    assert main(["run", str(script), "--config", str(config)]) == 0
    captured = capsys.readouterr()
    assert "sum is 42" in captured.out
    assert '"ok": true' in captured.out

    script.write_text("1/0\n", encoding="utf-8")
    assert main(["run", str(script), "--config", str(config)]) == 1
    assert "ZeroDivisionError at line 1" in capsys.readouterr().err


def test_stubs_prints_the_python_stubs_of_one_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "servers.json"
    files = tmp_path / "files"
    files.mkdir()
    config.write_text(
        json.dumps({"servers": {"fixture": fixture_entry(), "filesystem": filesystem_entry(files)}}), encoding="utf-8"
    )
    assert main(["stubs", "filesystem", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "class filesystem:" in out and "def read_text_file(path: str" in out
    assert "class fixture" not in out
    compile(out, "stubs", "exec")


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("serve", "run", "stubs", "doctor"):
        assert command in out


def test_run_streams_printed_output_while_the_script_is_still_running(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('first')\ntime.sleep(3)\nprint('second')\n", encoding="utf-8")
    argv = [sys.executable, "-m", "mcp_code_mode.cli", "run", str(script), "--config", str(config)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"first\n"
        assert proc.poll() is None, "the first line came only when the run was over"
        rest, err = proc.communicate(timeout=120)
    assert rest == b"second\n"
    assert proc.returncode == 0
    assert b"[ok:" in err


def test_run_takes_the_language_from_the_extension_unless_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    script = tmp_path / "hello.ts"
    script.write_text("console.log('hi')\n", encoding="utf-8")
    assert main(["run", str(script), "--config", str(config), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # The .ts extension picks TypeScript (the deno runner ships with the package): never run as Python.
    assert (result["language"], result["runner"], result["output"]) == ("typescript", "deno", "hi\n")
    script.write_text("print('as python')\n", encoding="utf-8")
    assert main(["run", str(script), "--language", "python", "--config", str(config)]) == 0
    assert capsys.readouterr().out == "as python\n"


@pytest.mark.parametrize("command", ["serve", "run", "stubs", "doctor"])
def test_every_help_lists_the_options_the_command_takes(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    expected = {
        "serve": ["--config", "--http", "--host", "--port", "--path", "--stateless", "CODE_MODE_AUTH_TOKEN"],
        "run": ["script", "--language", "--runner", "--timeout", "--json", ".ts typescript", "--cache", "--packages"],
        "stubs": ["server", "--language", "--config"],
        "doctor": ["--config", "Deno", "bubblewrap", "fix"],
    }[command]
    for fragment in expected:
        assert fragment in out, fragment


def test_run_and_stubs_speak_typescript(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "servers.json"
    config.write_text(json.dumps({"servers": {"fixture": fixture_entry()}}), encoding="utf-8")
    script = tmp_path / "script.ts"
    script.write_text(
        "const n: number = (await fixture.add({ a: 2, b: 40 })).result;\nconsole.log('sum is', n);\n"
        "export default { ok: true };\n",
        encoding="utf-8",
    )
    assert main(["run", str(script), "--config", str(config), "--language", "ts"]) == 0
    captured = capsys.readouterr()
    assert "sum is 42" in captured.out and '"ok": true' in captured.out
    assert main(["stubs", "fixture", "--config", str(config), "--language", "typescript"]) == 0
    out = capsys.readouterr().out
    assert "declare const fixture: ServerExtras & {" in out and "  add(args: AddArgs): Promise<AddResult>;" in out


@pytest.mark.parametrize("command", [["serve"], ["cache", "list"]])
def test_a_misspelled_setting_is_named_on_stderr(command: list[str], tmp_path: Path) -> None:
    # A desktop client's environment: a typo in a CODE_MODE_* name must not pass without a word.
    config = write_config(tmp_path / "servers.json", {})
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "CODE_MODE_CACHE_DIR": str(tmp_path / "cache")}
    env["CODE_MODE_MAX_CONCURENT_CALLS"] = "4"
    proc = subprocess.run(
        [sys.executable, "-m", "mcp_code_mode.cli", *command, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert "ignoring unknown setting(s) CODE_MODE_MAX_CONCURENT_CALLS" in proc.stderr, proc.stderr
