"""The local runner: LocalPythonExecutor in a killable worker, with stubs over the bridge."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.engine import CodeMode

from ..conftest import alive, make_config

pytestmark = pytest.mark.anyio


async def test_prints_are_captured_and_the_last_expression_is_returned(engine: CodeMode) -> None:
    result = await engine.execute("print('hello', 1)\nx = [1, 2]\n{'sum': sum(x)}")
    assert result.success, result.error
    assert result.output == "hello 1\n"
    assert result.return_value == {"sum": 3}
    assert result.runner == "local" and result.language == "python"


async def test_a_trailing_statement_returns_nothing_and_final_answer_returns_early(engine: CodeMode) -> None:
    assert (await engine.execute("y = 5")).return_value is None
    result = await engine.execute("final_answer({'done': True})\nprint('not reached')")
    assert result.return_value == {"done": True}
    assert result.output == ""


async def test_values_that_are_not_json_come_back_as_their_repr(engine: CodeMode) -> None:
    result = await engine.execute("{1, 2}")
    assert result.return_value == "{1, 2}"


async def test_user_functions_and_classes_work(engine: CodeMode) -> None:
    code = (
        "def double(v):\n    return 2 * v\n\n"
        "class Box:\n    def __init__(self, v):\n        self.v = v\n\n"
        "double(Box(21).v)"
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.return_value == 42


async def test_errors_carry_type_message_and_the_line_in_the_users_code(engine: CodeMode) -> None:
    code = "a = 1\nb = 2\n\ndef f(x):\n    return 10 / x\n\nprint('before')\nf(0)\n"
    result = await engine.execute(code)
    assert not result.success
    assert result.error is not None
    assert result.error.type == "ZeroDivisionError"
    assert result.error.message == "division by zero"
    assert result.error.line == 5
    assert result.output == "before\n"


async def test_syntax_errors_report_line_and_column(engine: CodeMode) -> None:
    result = await engine.execute("x = 1\nif x\n    pass\n")
    assert result.error is not None
    assert result.error.type == "SyntaxError"
    assert result.error.line == 2
    assert "column" in result.error.message


async def test_forbidden_imports_are_refused(engine: CodeMode) -> None:
    result = await engine.execute("import os\nos.listdir('/')")
    assert not result.success
    assert result.error is not None and "Import of os is not allowed" in result.error.message
    assert (await engine.execute("import json, re, math, datetime, collections\njson.dumps([1])")).return_value == "[1]"


@pytest.mark.parametrize("code", ["while True:\n    pass", "import time\ntime.sleep(10**6)"])
async def test_runaway_scripts_are_killed_at_the_timeout_and_the_next_run_works(engine: CodeMode, code: str) -> None:
    started = time.monotonic()
    result = await engine.execute(code, timeout_ms=1000)
    elapsed = time.monotonic() - started
    assert not result.success
    assert result.error is not None and result.error.type == "TimeoutError"
    assert elapsed < 1.5
    after = await engine.execute("print('alive')")
    assert after.success and after.output == "alive\n"


async def test_output_is_capped_and_marked_truncated(engine: CodeMode) -> None:
    cap = engine.config.settings.max_output_chars
    result = await engine.execute(f"for i in range(20):\n    print('x' * {cap // 10})")
    assert result.success
    assert result.truncated
    assert len(result.output) == cap
    small = await engine.execute("print('ok')")
    assert not small.truncated


async def test_open_works_inside_the_workspace_and_files_are_listed(engine: CodeMode) -> None:
    code = (
        "with open('results.txt', 'w') as f:\n"
        "    f.write('Processing complete!\\n')\n"
        "    f.write('Total: 42\\n')\n"
        "with open('results.txt', 'r') as f:\n"
        "    print(f.read())\n"
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.output == "Processing complete!\nTotal: 42\n\n"
    assert [(f.path, f.size) for f in result.files] == [("results.txt", 31)]


@pytest.mark.parametrize("path", ["/etc/passwd", "../../etc/passwd", "/proc/self/environ"])
async def test_open_outside_the_workspace_is_refused(engine: CodeMode, path: str) -> None:
    result = await engine.execute(f"open({path!r}).read()")
    assert not result.success
    assert result.error is not None and result.error.type == "PermissionError"


async def test_each_run_starts_fresh_with_an_empty_workspace(engine: CodeMode) -> None:
    first = await engine.execute("secret = 'left behind'\nwith open('left.txt', 'w') as f:\n    f.write('x')")
    assert first.success
    second = await engine.execute("secret")
    assert not second.success
    third = await engine.execute("open('left.txt').read()")
    assert not third.success and third.error is not None and third.error.type == "FileNotFoundError"


async def test_code_runs_in_a_worker_process_not_in_the_server(engine: CodeMode) -> None:
    runner = engine.runners["local"]
    await engine.execute("print(1)")
    pids = {w.process.pid for w in runner.pool._live}  # type: ignore[attr-defined]
    assert pids and os.getpid() not in pids


async def test_closing_the_engine_kills_every_worker_and_removes_workspaces(tmp_path: Path) -> None:
    config = make_config({}, workspace_dir=tmp_path / "runs", pool_size=3)
    async with CodeMode(config) as cm:
        result = await cm.execute("print('x')")
        assert result.success
        with anyio.fail_after(30):
            while cm.runners["local"].pool.warm < 3:  # type: ignore[attr-defined]
                await anyio.sleep(0.05)
        pids = [w.process.pid for w in cm.runners["local"].pool._ready]  # type: ignore[attr-defined]
    with anyio.fail_after(10):
        while any(alive(pid) for pid in pids):
            await anyio.sleep(0.05)
    runs = tmp_path / "runs"  # only process-mode workers have a workspace on the host
    assert not runs.exists() or list(runs.iterdir()) == []
