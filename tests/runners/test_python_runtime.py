"""The sandbox side's shared Python runtime (``runners/sandboxed/cm_runtime.py``), on the host's CPython.

The zygote's run child and the Pyodide prelude both use it; the runners' own tests check it through
them. Here: its output buffer's cap and flush rule, the return value's cap, and the rule for when a
stub call is awaitable, by running small scripts against a stub that asks the rule.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.sandbox.core import WORKER_DIR

sys.path.insert(0, str(WORKER_DIR))
import cm_runtime  # the sandbox's own module: found next to worker.py, not in the package

from mcp_code_mode.runners import pyodide


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_line_goes_out_at_once_and_later_ones_wait_for_the_interval() -> None:
    sent: list[str] = []
    clock = Clock()
    buffer = cm_runtime.OutputBuffer(sent.append, 1000, clock)
    buffer.write("a")
    assert sent == [] and not buffer.due()  # a line's first piece waits for the rest of the line
    buffer.write("\n")
    assert sent == ["a\n"]
    buffer.write("b\n")
    assert sent == ["a\n"] and buffer.pending and not buffer.due()
    clock.now += cm_runtime.FLUSH_SECONDS + 0.001
    assert buffer.due()  # pending for the interval: the runner's flusher sends it
    buffer.write("c\n")
    assert sent == ["a\n", "b\nc\n"] and not buffer.pending


def test_a_full_chunk_goes_out_at_once_and_text_past_the_cap_is_counted_as_dropped() -> None:
    sent: list[str] = []
    buffer = cm_runtime.OutputBuffer(sent.append, cm_runtime.CHUNK_CHARS + 12, Clock())
    buffer.write("x\n")
    buffer.write("y" * cm_runtime.CHUNK_CHARS)
    assert sent == ["x\n", "y" * cm_runtime.CHUNK_CHARS]
    assert buffer.write("z" * 25) == 25
    assert buffer.dropped == 15
    assert buffer.take() == "z" * 10 and buffer.take() == ""
    buffer.write("more")
    assert buffer.dropped == 19 and not buffer.pending


def test_a_return_value_past_the_cap_becomes_the_start_of_its_json() -> None:
    assert cm_runtime.jsonable({"a": [1, 2]}, 100) == ({"a": [1, 2]}, False)
    assert cm_runtime.jsonable("x" * 50, 10) == ('"' + "x" * 9, True)
    value, cut = cm_runtime.jsonable(object(), 1000)
    assert not cut and isinstance(value, str) and value.startswith("<object object")


def test_a_tool_error_answer_raises_tool_error_with_server_tool_and_message() -> None:
    with pytest.raises(cm_runtime.ToolError) as caught:
        cm_runtime.tool_result({"op": "result", "error": {"message": "no", "server": "s", "tool": "t"}})
    assert (caught.value.server, caught.value.tool, caught.value.message) == ("s", "t", "no")
    assert cm_runtime.tool_result({"op": "result", "value": [1]}) == [1]
    with pytest.raises(TypeError, match="arguments of s.t must be JSON values"):
        cm_runtime.tool_arguments("s", "t", {"x": {1, 2}})


def _run_with_rule(code: str) -> tuple[Any, list[bool]]:
    """Run ``code`` as the pyodide prelude does, with ``tool(x)``: it asks the rule, records the answer,
    and returns ``x * 10`` or a coroutine of it."""
    tree = ast.parse(code, "<code>")
    rule = cm_runtime.AwaitableCalls(tree, "<code>")
    last: types.CodeType | None = None
    if tree.body and isinstance(final := tree.body[-1], ast.Expr):
        tree.body.pop()
        compiled: types.CodeType = compile(
            ast.Expression(final.value), "<code>", "eval", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        rule.include(compiled)
        last = compiled
    body = compile(tree, "<code>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    rule.include(body)
    answers: list[bool] = []

    async def later(x: int) -> int:
        return x * 10

    def tool(x: int) -> Any:
        wanted = rule.wanted(sys._getframe(1))  # pyright: ignore[reportPrivateUsage]
        answers.append(wanted)
        return later(x) if wanted else x * 10

    namespace: dict[str, Any] = {"__builtins__": builtins, "tool": tool, "asyncio": asyncio}
    value = None
    for code_object in (body, last):
        if code_object is None:
            continue
        result = eval(code_object, namespace)
        value = asyncio.run(result) if code_object.co_flags & 0x80 else result
    return value, answers


@pytest.mark.parametrize(
    ("code", "value", "answers"),
    [
        ("await asyncio.gather(*[tool(i) for i in range(3)])", [0, 10, 20], [True] * 3),
        ("list(await asyncio.gather(*(tool(i) for i in range(3))))", [0, 10, 20], [True] * 3),
        ("async def f(n):\n    return [await tool(i) for i in range(n)]\nawait f(2)", [0, 10], [True] * 2),
        (
            "async def f():\n    return await asyncio.gather(*(tool(i) for i in range(2)))\nawait f()",
            [0, 10],
            [True] * 2,
        ),
        ("x = tool(1)\ny = await tool(2)\n[x, y]", [10, 20], [False, True]),
        ("def f(i):\n    return tool(i)\nawait asyncio.gather(asyncio.sleep(0))\n[f(1), f(2)]", [10, 20], [False] * 2),
        ("[(lambda: tool(i))() for i in range(2)] + [await tool(3)]", [0, 10, 30], [False, False, True]),
        ("x = [tool(i) for i in range(2)]\nx", [0, 10], [False, False]),
        ("total = tool(1) + (await tool(2))\ntotal", 30, [False, True]),
    ],
    ids=[
        "top-level gather of a list comprehension",
        "top-level gather of a generator expression",
        "inside async def, in a comprehension",
        "inside async def, a generator expression",
        "plain call and awaited call at top level",
        "plain def called at top level of an async script",
        "lambda inside a comprehension",
        "comprehension at top level without await",
        "one statement, one awaited call and one not",
    ],
)
def test_a_stub_call_is_awaitable_in_async_def_and_inside_a_top_level_await_only(
    code: str, value: Any, answers: list[bool]
) -> None:
    assert _run_with_rule(code) == (value, answers)


def test_code_that_is_not_the_scripts_gets_values() -> None:
    rule = cm_runtime.AwaitableCalls(ast.parse("1"), "<code>")
    assert rule.wanted(sys._getframe()) is False  # pyright: ignore[reportPrivateUsage]
    assert rule.wanted(None) is False


def test_the_pyodide_snapshot_is_keyed_by_the_shared_runtime_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Path(cm_runtime.__file__).resolve()
    assert Path(getattr(pyodide, "RUNTIME", "")).resolve() == runtime
    setup = pyodide.PyodideSetup(deno=None, pyodide_dir=tmp_path, cache_dir=tmp_path, index_url=None)
    before = setup.snapshot_path()
    changed = tmp_path / "cm_runtime.py"
    changed.write_bytes(runtime.read_bytes() + b"# changed\n")
    monkeypatch.setattr(pyodide, "RUNTIME", changed)
    assert setup.snapshot_path() != before
