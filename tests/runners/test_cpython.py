"""The cpython runner: plain CPython in the same sandboxed workers, with the same stubs."""

from __future__ import annotations

import time

import pytest

from mcp_code_mode.engine import CodeMode

pytestmark = pytest.mark.anyio


async def run(engine: CodeMode, code: str, **kw: object):  # type: ignore[no-untyped-def]
    return await engine.execute(code, runner="cpython", **kw)  # type: ignore[arg-type]


async def test_full_python_runs_with_the_same_stubs(engine: CodeMode) -> None:
    code = (
        "import os, sys, json, collections\n"
        "class Acc:\n"
        "    def __init__(self): self.n = 0\n"
        "    def __iadd__(self, v): self.n += v; return self\n"
        "a = Acc()\n"
        "for i in range(100000):\n"
        "    a += i\n"
        "total = fixture.add(a=a.n, b=1)['result']\n"
        "print('cwd', os.getcwd())\n"
        "{'total': total, 'stats': call_tool('fixture', 'stats', {'values': [1, 2]})}"
    )
    result = await run(engine, code)
    assert result.success, result.error
    assert result.runner == "cpython"
    assert result.return_value == {"total": 4999950001, "stats": {"count": 2, "total": 3.0, "mean": 1.5}}
    assert result.output.startswith("cwd /")
    assert result.tool_calls == 2


async def test_tool_errors_raise_tool_error_and_tracebacks_point_into_the_script(engine: CodeMode) -> None:
    code = (
        "def inner():\n    fixture.fail(message='no way')\n\n"
        "try:\n    inner()\nexcept ToolError as e:\n    print(e.server, e)\nx = 1\ninner()\n"
    )
    result = await run(engine, code)
    assert not result.success
    assert result.output.startswith("fixture ")
    assert result.error is not None
    assert result.error.type == "ToolError" and "no way" in result.error.message
    assert result.error.line == 2
    assert (
        result.error.traceback is not None
        and "line 9" in result.error.traceback
        and "in inner" in result.error.traceback
    )


async def test_stderr_prints_and_final_answer_and_top_level_await(engine: CodeMode) -> None:
    code = (
        "import sys, asyncio\nprint('out')\nprint('err', file=sys.stderr)\n"
        "await asyncio.sleep(0)\nfinal_answer([1, 2])\n"
    )
    result = await run(engine, code)
    assert result.success, result.error
    assert result.output == "out\nerr\n"
    assert result.return_value == [1, 2]


async def test_sys_exit_zero_is_success_and_nonzero_is_an_error(engine: CodeMode) -> None:
    assert (await run(engine, "import sys\nprint('bye')\nsys.exit(0)")).success
    failed = await run(engine, "import sys\nsys.exit(3)")
    assert not failed.success and failed.error is not None and failed.error.type == "SystemExit"


async def test_syntax_errors_carry_the_line(engine: CodeMode) -> None:
    result = await run(engine, "x = (\n")
    assert result.error is not None and result.error.type == "SyntaxError" and result.error.line == 1


async def test_it_is_much_faster_than_the_interpreter_on_loops(engine: CodeMode) -> None:
    code = "s = 0\nfor i in range(300000):\n    s += i * i\ns"
    started = time.monotonic()
    fast = await run(engine, code, timeout_ms=20000)
    assert fast.success and fast.return_value == sum(i * i for i in range(300000))
    assert time.monotonic() - started < 5
