"""Fan-out on every runner: a script's tool calls made together are in flight together.

The idioms the README gives: ``asyncio.gather`` of stub calls (cpython, pyodide: at top level, in a
comprehension, in ``async def``), ``parallel(lambda: ... for ...)`` on every Python runner (``local``
included) and ``Promise.all`` under deno. Each case checks the results come back in the order of the
calls, and that they are in flight together: the fixture's ``overlap`` tool answers how many of its calls were
in flight when each began, so the proof does not depend on how busy the machine is (a loose bound on the time
is kept too: N calls one after another take N waits).
"""

from __future__ import annotations

import pytest

from mcp_code_mode import CodeMode

from .test_runners import Case, run, succeeded

pytestmark = pytest.mark.anyio

WAIT = 0.3
CALLS = 8
"""Fewer than the run's default concurrency (16): all of them reach the server at once."""
SEQUENTIAL = CALLS * WAIT

PARALLEL = Case(
    python=f"r = parallel(lambda: fixture.overlap(seconds={WAIT}) for i in range({CALLS}))\n"
    f"o = parallel(lambda: fixture.add(a=i, b=100) for i in range(5))\n[max([x['result'] for x in r]), o]",
    js=f"const r = await Promise.all(Array.from({{length: {CALLS}}}, () => fixture.overlap({{seconds: {WAIT}}})));\n"
    "const o = await Promise.all([0, 1, 2, 3, 4].map((i) => fixture.add({ a: i, b: 100 })));\n"
    "export default [Math.max(...r.map((x) => x.result)), o];",
)
EXPECTED = [CALLS, [100, 101, 102, 103, 104]]
"""The most ``overlap`` calls in flight at once (all of them), and the ``add`` results in the order of the calls."""

GATHER = {
    "top-level": "import asyncio\n"
    f"r = await asyncio.gather(*(fixture.overlap(seconds={WAIT}) for i in range({CALLS})))\n"
    "o = await asyncio.gather(*[fixture.add(a=i, b=100) for i in range(5)])\n[max([x['result'] for x in r]), o]",
    "async-def": "import asyncio\n"
    "async def main():\n"
    f"    r = await asyncio.gather(*[fixture.overlap(seconds={WAIT}) for i in range({CALLS})])\n"
    "    o = await asyncio.gather(*(call_tool('fixture', 'add', {'a': i, 'b': 100}) for i in range(5)))\n"
    "    return [max([x['result'] for x in r]), o]\n"
    "asyncio.run(main())",
}


def _value(value: object) -> object:
    """``add``'s structured result is ``{"result": n}``; the rest stays as it is."""
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, dict) and set(value) == {"result"}:
        return value["result"]
    return value


async def _timed(engine: CodeMode, runner: str, case: Case) -> tuple[object, float]:
    """The run's value and its own time (``executionTime``: from its hand-over to its worker; not the
    wait for a worker, which is a pyodide worker's start-up when the pool has just used its last)."""
    data = succeeded(await run(engine, runner, case))
    return _value(data["returnValue"]), data["executionTime"] / 1000


async def test_parallel_or_promise_all_sends_the_calls_together_and_keeps_their_order(
    engine: CodeMode, runner: str
) -> None:
    value, took = await _timed(engine, runner, PARALLEL)
    assert value == EXPECTED
    assert took < SEQUENTIAL, f"{CALLS} calls of {WAIT} s took {took:.2f} s: one after another"


@pytest.mark.parametrize("where", list(GATHER))
async def test_asyncio_gather_of_stub_calls_is_in_flight_together(engine: CodeMode, runner: str, where: str) -> None:
    if runner in ("local", "deno"):
        pytest.skip("asyncio is the idiom of the cpython and pyodide runners")
    value, took = await _timed(engine, runner, Case(python=GATHER[where], js=""))
    assert value == EXPECTED
    assert took < SEQUENTIAL, f"{CALLS} calls of {WAIT} s took {took:.2f} s: one after another"


FAILURES = Case(
    python="try:\n"
    "    parallel([lambda: fixture.add(a=1, b=1), lambda: fixture.fail(message='first'), "
    "lambda: fixture.slow(seconds=0.2), lambda: fixture.fail(message='second')])\n"
    "except ToolError as exc:\n"
    "    caught = [exc.tool, exc.message]\n"
    "after = fixture.add(a=2, b=2)\n"
    "[caught, after]",
    js="let caught = null;\n"
    "try {\n"
    "  await Promise.all([fixture.add({ a: 1, b: 1 }), fixture.fail({ message: 'first' }), "
    "fixture.slow({ seconds: 0.2 }), fixture.fail({ message: 'second' })]);\n"
    "} catch (exc) { caught = [exc.tool, exc.message]; }\n"
    "export default [caught, await fixture.add({ a: 2, b: 2 })];",
)


MONTY_TOOL_ERROR = "Monty has no class inheritance: ToolError is its RuntimeError, without `tool` and `message`"


async def test_a_failed_call_among_parallel_ones_raises_its_tool_error_and_the_run_goes_on(
    engine: CodeMode, runner: str
) -> None:
    if runner == "monty":
        pytest.skip(MONTY_TOOL_ERROR)
    data = succeeded(await run(engine, runner, FAILURES))
    (tool, message), after = _value(data["returnValue"])  # type: ignore[misc]
    assert tool == "fail"
    assert "first" in message
    assert after == 4


async def test_gather_with_return_exceptions_gives_each_tool_error_in_its_place(engine: CodeMode, runner: str) -> None:
    if runner in ("local", "deno"):
        pytest.skip("asyncio is the idiom of the cpython and pyodide runners")
    if runner == "monty":
        pytest.skip(f"{MONTY_TOOL_ERROR}; its gather() takes no return_exceptions (a NotImplementedError says so)")
    code = (
        "import asyncio\n"
        "r = await asyncio.gather(fixture.add(a=1, b=2), fixture.fail(message='no'), fixture.add(a=3, b=4),"
        " return_exceptions=True)\n"
        "[type(x).__name__ if isinstance(x, Exception) else x for x in r]"
    )
    data = succeeded(await run(engine, runner, Case(python=code, js="")))
    assert _value(data["returnValue"]) == [3, "ToolError", 7]


async def test_parallel_refuses_work_on_a_result_before_it_is_answered(engine: CodeMode, runner: str) -> None:
    if runner == "deno":
        pytest.skip("parallel(...) is the Python runners' helper")
    code = "parallel(lambda: fixture.add(a=i, b=1)['result'] for i in range(3))"
    data = (await run(engine, runner, Case(python=code, js=""))).model_dump(by_alias=True, mode="json")
    assert data["success"] is False
    assert data["error"]["type"] in ("TypeError", "InterpreterError"), data["error"]  # local's interpreter wraps it
    assert "unchanged" in data["error"]["message"]
    assert "parallel" in data["error"]["message"]


async def test_blocking_calls_mixed_with_awaited_ones_all_get_their_own_answers(engine: CodeMode, runner: str) -> None:
    if runner in ("local", "deno"):
        pytest.skip("asyncio is the idiom of the cpython and pyodide runners")
    code = (
        "import asyncio\n"
        "def blocking(i):\n"
        "    return fixture.add(a=i, b=1000)\n"
        "async def one(i):\n"
        "    first = await fixture.slow(seconds=0.05 * (i % 3))\n"
        "    return [first, blocking(i), await fixture.add(a=i, b=0)]\n"
        "await asyncio.gather(*(one(i) for i in range(6)))"
    )
    data = succeeded(await run(engine, runner, Case(python=code, js="")))
    expected = [[f"slept {0.05 * (i % 3)}", 1000 + i, i] for i in range(6)]
    assert _value(data["returnValue"]) == expected
