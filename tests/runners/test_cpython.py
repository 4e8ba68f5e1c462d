"""The cpython runner: plain CPython in the same sandboxed workers, with the same stubs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mcp_code_mode.engine import CodeMode

from ..conftest import make_config

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
    code = "s = 0\nfor i in range(100000):\n    s += i * i\ns"
    expected = sum(i * i for i in range(100000))
    timings = {}
    for runner in ("local", "cpython"):
        await engine.execute("1", runner=runner)
        started = time.monotonic()
        result = await engine.execute(code, runner=runner, timeout_ms=60000)
        timings[runner] = time.monotonic() - started
        assert result.success and result.return_value == expected, result.error
    assert timings["cpython"] * 3 < timings["local"], timings


SUMS = [{"result": i + 10} for i in range(5)]


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(
            "import asyncio\nawait asyncio.gather(*(fixture.add(a=i, b=10) for i in range(5)))",
            id="top-level-generator",
        ),
        pytest.param(
            "import asyncio\nrs = await asyncio.gather(*[fixture.add(a=i, b=10) for i in range(5)])\nrs",
            id="top-level-list-comprehension",
        ),
        pytest.param(
            "import asyncio\n"
            "async def main():\n"
            "    return await asyncio.gather(*(fixture.add(a=i, b=10) for i in range(5)))\n"
            "asyncio.run(main())",
            id="async-def",
        ),
        pytest.param(
            "import asyncio\n"
            "async def main():\n"
            "    calls = [call_tool('fixture', 'add', {'a': i, 'b': 10}) for i in range(5)]\n"
            "    return list(await asyncio.gather(*calls))\n"
            "await main()",
            id="call_tool-in-async-def",
        ),
        pytest.param("[await fixture.add(a=i, b=10) for i in range(5)]", id="awaited-one-by-one"),
    ],
)
async def test_stub_calls_are_awaitable_in_async_code_and_give_results_in_order(engine: CodeMode, code: str) -> None:
    result = await run(engine, code)
    assert result.success, result.error
    assert result.return_value == SUMS
    assert result.tool_calls == 5


async def test_plain_calls_return_their_results_at_the_top_level_and_in_a_def(engine: CodeMode) -> None:
    code = (
        "import asyncio\n"
        "def plain(i):\n    return fixture.add(a=i, b=10)\n"
        "async def later():\n    return plain(2)\n"  # a plain def called from async code: still the result
        "r = fixture.add(a=0, b=10)\n"
        "rs = [fixture.add(a=1, b=10)['result'], (lambda: fixture.add(a=3, b=10))()['result']]\n"
        "a = await asyncio.sleep(0, result=plain(4))\n"  # written in the await, but in a def: the result
        "[r, rs, plain(5), asyncio.run(later()), a]"
    )
    result = await run(engine, code)
    assert result.success, result.error
    assert result.return_value == [{"result": 10}, [11, 13], {"result": 15}, {"result": 12}, {"result": 14}]


async def test_an_awaitable_call_checks_its_arguments_where_it_is_written(engine: CodeMode) -> None:
    code = "async def main():\n    c = fixture.add(a={1, 2}, b=10)\n    return 1\nawait main()"
    result = await run(engine, code)
    assert result.error is not None and result.error.type == "TypeError" and result.error.line == 2
    assert result.tool_calls == 0


async def test_an_unknown_tool_raises_tool_error_naming_the_servers_tools(engine: CodeMode) -> None:
    code = (
        "try:\n    fixture.nope(x=1)\nexcept ToolError as e:\n    caught = [e.server, e.tool, str(e)]\n"
        "caught + [hasattr(fixture, '_private')]"
    )
    result = await run(engine, code)
    assert result.success, result.error
    server, tool, message, private = result.return_value
    assert (server, tool, private) == ("fixture", "nope", False)
    assert message.startswith("server 'fixture' has no tool 'nope' (its tools: ") and "add, echo" in message


async def test_a_script_that_replaces_json_still_reports_its_output_calls_and_value(engine: CodeMode) -> None:
    """The worker's runtime keeps its own references to json: a script that patches the module in its
    interpreter changes what it computes, not what its run reports or how its tool calls travel."""
    code = (
        "import json\n"
        "json.dumps = lambda *a, **k: 'patched'\n"
        "json.loads = lambda *a, **k: {'patched': True}\n"
        "total = fixture.add(a=2, b=3)\n"
        "total = total['result'] if isinstance(total, dict) else total\n"
        "print('sum', total)\n"
        "{'total': total, 'dumped': json.dumps([1])}"
    )
    result = await run(engine, code, cache="off")
    assert result.success, result.error
    assert result.output == "sum 5\n"
    assert result.return_value == {"total": 5, "dumped": "patched"}


async def test_no_directory_the_zygote_imports_from_is_writable_by_a_run(tmp_path: Path) -> None:
    """A zygote imports its preloaded modules while its first run runs (they are a cache for the later runs'
    children): that is safe because no directory on its import path is one a run can write. A run starts
    with the zygote's ``sys.path`` (its process is a fork of the zygote), and finds none of it writable.
    Without namespaces the run is the server's own user, and the claim is not made."""
    config = make_config({}, workspace_dir=tmp_path / "runs", eager_runners="cpython", pool_size=1)
    async with CodeMode(config) as cm:
        if cm.sandbox.isolation != "namespaces":
            pytest.skip("process isolation: a run is the server's user and may write what the server may")
        code = (
            "import os, sys\n"
            "print(repr([p for p in sys.path if not p or not os.path.isabs(p)]))\n"
            "print(repr([p for p in sys.path if os.path.isdir(p) and os.access(p, os.W_OK)]))\n"
        )
        # The first run's process was forked before the zygote preloaded, the second's after.
        results = [await cm.execute(code, runner="cpython", cache="off") for _ in range(2)]
    for result in results:
        assert result.success, result.error
        relative, writable = result.output.splitlines()
        assert relative == "[]", f"relative entries on the zygote's sys.path: {relative}"
        assert writable == "[]", f"a run can write where the zygote imports from: {writable}"
