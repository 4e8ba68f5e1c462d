"""The runner contract: the same case on every runner gives the same observable ``RunResult``.

Each case has a Python body (run by ``local``, ``cpython``, ``pyodide`` and ``monty``; ``local`` gets its own
body only where the README gives it another idiom, ``monty`` only where Monty lacks what the case uses, said
at the case) and a JavaScript body (run by ``deno``). The
assertions are on what ``CodeMode.execute`` returns, never on how a runner gets there.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from mcp_code_mode import CodeMode, RunResult

from .conftest import MAX_OUTPUT_CHARS

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Case:
    """One script, written for each language."""

    python: str
    js: str
    local: str | None = None
    """The body for ``local`` where its documented idiom differs from CPython's; else ``python``."""
    monty: str | None = None
    """The body for ``monty`` where Monty lacks a construct the case uses; else ``python``."""

    def for_runner(self, runner: str) -> tuple[str, str]:
        """``(language, code)`` for ``runner``."""
        if runner == "deno":
            return "javascript", self.js
        if runner == "local" and self.local is not None:
            return "python", self.local
        if runner == "monty" and self.monty is not None:
            return "python", self.monty
        return "python", self.python


async def run(engine: CodeMode, runner: str, case: Case, **options: Any) -> RunResult:
    language, code = case.for_runner(runner)
    with anyio.fail_after(60):
        result = await engine.execute(code, language, runner=runner, cache="off", **options)
    assert result.runner == runner
    return result


def dump(result: RunResult) -> dict[str, Any]:
    """The result as the wire sees it (camelCase, plain dicts), for readable assertion failures."""
    return result.model_dump(by_alias=True, mode="json")


def succeeded(result: RunResult) -> dict[str, Any]:
    data = dump(result)
    assert data["success"], data["error"]
    assert data["error"] is None
    return data


# ----- output ------------------------------------------------------------------------------------


async def test_printed_output_past_the_cap_keeps_exactly_the_cap_and_sets_truncated(
    engine: CodeMode, runner: str
) -> None:
    # Many short writes within the cap, then one long write across it.
    case = Case(
        python="for i in range(50):\n    print('abcdefghi')\nprint('y' * 3000)\nprint('z')",
        js="for (let i = 0; i < 50; i++) console.log('abcdefghi');\nconsole.log('y'.repeat(3000));\nconsole.log('z');",
    )
    data = succeeded(await run(engine, runner, case))
    assert len(data["output"]) == MAX_OUTPUT_CHARS
    assert data["output"] == "abcdefghi\n" * 50 + "y" * (MAX_OUTPUT_CHARS - 500)
    assert data["truncated"] is True


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Case(python="'x' * 5_000_000", js="export default 'x'.repeat(5_000_000);"), id="5MB-string"),
        pytest.param(
            Case(python="['x' * 1000] * 5000", js="export default Array(5000).fill('x'.repeat(1000));"),
            id="5MB-list",
        ),
    ],
)
async def test_a_return_value_larger_than_the_cap_is_cut_to_the_cap_and_sets_truncated(
    engine: CodeMode, runner: str, case: Case
) -> None:
    data = succeeded(await run(engine, runner, case))
    value = data["returnValue"]
    size = len(value) if isinstance(value, str) else len(json.dumps(value))
    assert size <= MAX_OUTPUT_CHARS, f"returnValue is {size} characters, the cap is {MAX_OUTPUT_CHARS}"
    assert data["truncated"] is True


async def test_output_streams_to_on_output_while_the_script_still_runs(engine: CodeMode, runner: str) -> None:
    case = Case(
        python="import time\nprint('a')\ntime.sleep(2)\nprint('b')",
        js="console.log('a');\nconst until = Date.now() + 2000;\nwhile (Date.now() < until) {}\nconsole.log('b');",
    )
    chunks: list[tuple[float, str]] = []

    async def on_output(text: str) -> None:
        chunks.append((time.monotonic(), text))

    started = time.monotonic()
    data = succeeded(await run(engine, runner, case, on_output=on_output))
    ended = time.monotonic()
    assert data["output"] == "a\nb\n"
    assert "".join(text for _, text in chunks) == "a\nb\n", chunks
    first_a = next(at for at, text in chunks if "a" in text)
    first_b = next(at for at, text in chunks if "b" in text)
    timeline = f"a at {first_a - started:.2f} s, b at {first_b - started:.2f} s, end at {ended - started:.2f} s"
    assert first_b - first_a >= 1.5, f"'a' reached on_output only with 'b': {timeline}"
    assert ended - first_a >= 1.2, f"'a' reached on_output too late: {timeline}"
    run_started = ended - data["executionTime"] / 1000  # when the run itself began (a worker was found)
    assert first_a - run_started <= 0.5, f"'a' took over 0.5 s from the run's start: {timeline}"


# ----- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "error_type", "message", "line"),
    [
        pytest.param(
            Case(
                python="a = 1\nb = 0\nc = a / b\nprint(c)", js="const a = 1;\nconst b = 0;\nthrow new TypeError('x');"
            ),
            {"python": "ZeroDivisionError", "js": "TypeError"},
            {"python": "division by zero", "js": "x"},
            3,
            id="top-level",
        ),
        pytest.param(
            Case(
                python="def f(n):\n    return n / 0\nf(1)",
                js="function f(n) {\n  throw new TypeError('x' + n);\n}\nf(1);",
            ),
            {"python": "ZeroDivisionError", "js": "TypeError"},
            {"python": "division by zero", "js": "x1"},
            2,  # the raising line inside the function, not the call
            id="in-a-function",
        ),
    ],
)
async def test_a_failing_script_reports_the_error_type_message_and_script_line(
    engine: CodeMode, runner: str, case: Case, error_type: dict[str, str], message: dict[str, str], line: int
) -> None:
    data = dump(await run(engine, runner, case))
    language = "js" if runner == "deno" else "python"
    assert data["success"] is False
    assert data["error"]["type"] == error_type[language], data["error"]
    assert message[language] in data["error"]["message"]
    assert data["error"]["line"] == line, data["error"]


async def test_an_infinite_loop_ends_with_timeout_error_at_the_timeout(engine: CodeMode, runner: str) -> None:
    case = Case(python="while True:\n    pass", js="while (true) {}")
    started = time.monotonic()
    data = dump(await run(engine, runner, case, timeout_ms=1500))
    elapsed = time.monotonic() - started
    assert data["success"] is False
    assert data["error"]["type"] == "TimeoutError", data["error"]
    # The run's own time (from its hand-over to its worker, the kill included) ends at the timeout; the call
    # may also have waited for a worker to start (a one-run worker's replacement on a loaded machine).
    assert data["executionTime"] < 3000, f"the run took {data['executionTime']} ms for a 1.5 s timeout"
    assert elapsed < 10.0, f"the call took {elapsed:.2f} s for a 1.5 s timeout"


# ----- files -------------------------------------------------------------------------------------


async def test_a_file_written_in_the_workspace_is_listed_with_its_size(engine: CodeMode, runner: str) -> None:
    case = Case(
        python="with open('out.txt', 'w') as f:\n    f.write('hello')",
        js="Deno.writeTextFileSync('out.txt', 'hello');",
    )
    data = succeeded(await run(engine, runner, case))
    assert [(f["path"], f["size"], f["mimeType"]) for f in data["files"]] == [("out.txt", 5, "text/plain")]
    assert data["files"][0]["uri"] == f"code-mode://runs/{data['hash']}/files/out.txt"  # kept as an artifact


PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


async def test_show_of_an_image_value_puts_it_in_the_result_and_a_non_image_is_refused(
    engine: CodeMode, runner: str
) -> None:
    case = Case(
        python=(
            f"show({{'type': 'image', 'data': {PNG_B64!r}, 'mimeType': 'image/png'}})\n"
            "try:\n    show({'type': 'image', 'data': 'aGVsbG8=', 'mimeType': 'image/png'})\n"
            "except (TypeError, ValueError) as e:\n    refused = str(e)\nrefused"
        ),
        js=(
            f"show({{ type: 'image', data: '{PNG_B64}', mimeType: 'image/png' }});\nlet refused = '';\n"
            "try { show({ type: 'image', data: 'aGVsbG8=', mimeType: 'image/png' }); }\n"
            "catch (e) { refused = String(e); }\n"
            "export default refused;"
        ),
    )
    result = await run(engine, runner, case)
    data = succeeded(result)
    assert "is not a png, jpeg, gif or webp image" in data["returnValue"]
    assert [(i.mime_type, i.data) for i in result.images] == [("image/png", PNG_B64)]


@pytest.mark.parametrize("runner", ["cpython", "pyodide", "deno"], indirect=True)
async def test_files_in_subdirectories_are_listed_by_relative_path(engine: CodeMode, runner: str) -> None:
    # Not under local: its allow-list has no module that makes a directory (no os, no pathlib).
    case = Case(
        python=(
            "import os\nos.makedirs('sub/deep')\n"
            "with open('sub/deep/in.txt', 'w') as f:\n    f.write('abc')\n"
            "with open('out.txt', 'w') as f:\n    f.write('hello')"
        ),
        js=(
            "Deno.mkdirSync('sub/deep', { recursive: true });\n"
            "Deno.writeTextFileSync('sub/deep/in.txt', 'abc');\n"
            "Deno.writeTextFileSync('out.txt', 'hello');"
        ),
    )
    data = succeeded(await run(engine, runner, case))
    assert sorted((f["path"], f["size"]) for f in data["files"]) == [("out.txt", 5), ("sub/deep/in.txt", 3)]
    assert all(f["uri"].endswith("/files/" + f["path"]) for f in data["files"])


# ----- tools -------------------------------------------------------------------------------------


async def test_a_failing_tool_raises_a_catchable_tool_error_with_the_servers_message(
    engine: CodeMode, runner: str
) -> None:
    case = Case(
        python=(
            "try:\n"
            "    fixture.fail(message='the server said no')\n"
            "except ToolError as e:\n"
            "    caught = {'isToolError': isinstance(e, ToolError), 'message': str(e), 'server': e.server,\n"
            "              'tool': e.tool}\n"
            "caught"
        ),
        js=(
            "let caught;\n"
            "try {\n"
            "  await fixture.fail({ message: 'the server said no' });\n"
            "} catch (e) {\n"
            "  caught = { isToolError: e instanceof ToolError, name: e.name, message: e.message, server: e.server,\n"
            "             tool: e.tool };\n"
            "}\n"
            "export default caught;"
        ),
        # Monty has no class inheritance, so no exception class of its own: ToolError is its RuntimeError, whose
        # message is the server's, without the `server` and `tool` attributes (MONTY_TOOL_ERROR below).
        monty=(
            "try:\n"
            "    fixture.fail(message='the server said no')\n"
            "except ToolError as e:\n"
            "    caught = {'isToolError': isinstance(e, ToolError), 'message': str(e), 'server': 'fixture',\n"
            "              'tool': 'fail'}\n"
            "caught"
        ),
    )
    data = succeeded(await run(engine, runner, case))
    caught = data["returnValue"]
    assert caught["isToolError"] is True, caught
    assert caught.get("name", "ToolError") == "ToolError", caught  # e.name in JavaScript
    assert "the server said no" in caught["message"]
    assert (caught["server"], caught["tool"]) == ("fixture", "fail")
    assert data["toolCalls"] == 1


async def test_an_uncaught_tool_error_fails_the_run_as_tool_error_at_its_line(engine: CodeMode, runner: str) -> None:
    case = Case(
        python="x = 1\nfixture.fail(message='the server said no')",
        js="const x = 1;\nawait fixture.fail({ message: 'the server said no' });",
    )
    data = dump(await run(engine, runner, case))
    assert data["success"] is False
    assert data["error"]["type"] == "ToolError", data["error"]
    assert "the server said no" in data["error"]["message"]
    assert data["error"]["line"] == 2, data["error"]


async def test_call_tool_by_name_returns_what_the_stub_returns(engine: CodeMode, runner: str) -> None:
    case = Case(
        python=(
            "print('hello')\n"
            "[call_tool('fixture', 'add', {'a': 2, 'b': 3}), fixture.add(a=2, b=3), fixture.echo_json(value='v'),\n"
            " [1, 2.5, None, True, 'é']]"
        ),
        js=(
            "console.log('hello');\n"
            "export default [await callTool('fixture', 'add', { a: 2, b: 3 }), await fixture.add({ a: 2, b: 3 }),\n"
            "  await fixture.echo_json({ value: 'v' }), [1, 2.5, null, true, 'é']];"
        ),
    )
    data = succeeded(await run(engine, runner, case))
    assert data["returnValue"] == [{"result": 5}, {"result": 5}, {"value": "v", "ok": True}, [1, 2.5, None, True, "é"]]
    assert data["toolCalls"] == 3
    assert data["output"] == "hello\n"
    assert data["truncated"] is False


async def test_the_final_answer_is_the_return_value(engine: CodeMode, runner: str) -> None:
    # Python: final_answer(x) ends the run there. JavaScript has no final_answer: `export default x`.
    case = Case(python="final_answer({'a': 1})\nprint('not reached')", js="export default { a: 1 };")
    data = succeeded(await run(engine, runner, case))
    assert data["returnValue"] == {"a": 1}
    assert data["output"] == ""


PLAIN_LOOP = "[fixture.add(a=i, b=10)['result'] for i in range(5)]"
"""``local`` has no asyncio (not in its allow-list) and the README gives it no concurrency idiom."""


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Case(
                python=(
                    "import asyncio\n"
                    "results = await asyncio.gather(*(fixture.add(a=i, b=10) for i in range(5)))\n"
                    "[r['result'] for r in results]"
                ),
                js="const results = await Promise.all([0, 1, 2, 3, 4].map((i) => fixture.add({ a: i, b: 10 })));\n"
                "export default results.map((r) => r.result);",
                local=PLAIN_LOOP,
            ),
            id="top-level-generator",
        ),
        pytest.param(
            Case(
                python=(
                    "import asyncio\n"
                    "results = await asyncio.gather(*[fixture.add(a=i, b=10) for i in range(5)])\n"
                    "[r['result'] for r in results]"
                ),
                js="const calls = [];\nfor (let i = 0; i < 5; i++) calls.push(fixture.add({ a: i, b: 10 }));\n"
                "export default (await Promise.all(calls)).map((r) => r.result);",
                local=PLAIN_LOOP,
            ),
            id="top-level-list-comprehension",
        ),
        pytest.param(
            Case(
                python=(
                    "import asyncio\n"
                    "async def main():\n"
                    "    return await asyncio.gather(*(fixture.add(a=i, b=10) for i in range(5)))\n"
                    "[r['result'] for r in asyncio.run(main())]"
                ),
                js="async function main() {\n"
                "  return await Promise.all([0, 1, 2, 3, 4].map((i) => fixture.add({ a: i, b: 10 })));\n"
                "}\nexport default (await main()).map((r) => r.result);",
                local=PLAIN_LOOP,
            ),
            id="async-def",
        ),
    ],
)
async def test_concurrent_tool_calls_give_their_results_in_order(engine: CodeMode, runner: str, case: Case) -> None:
    data = succeeded(await run(engine, runner, case))
    assert data["returnValue"] == [10, 11, 12, 13, 14]
    assert data["toolCalls"] == 5


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Case(python="fixture.nope(x=1)", js="await fixture.nope({ x: 1 });"), id="stub"),
        pytest.param(
            Case(python="call_tool('fixture', 'nope', {'x': 1})", js="await callTool('fixture', 'nope', { x: 1 });"),
            id="call_tool",
        ),
    ],
)
async def test_an_unknown_tool_fails_with_an_error_naming_the_server_and_tool(
    engine: CodeMode, runner: str, case: Case
) -> None:
    data = dump(await run(engine, runner, case))
    assert data["success"] is False
    assert "server 'fixture' has no tool 'nope'" in data["error"]["message"], data["error"]


@pytest.mark.parametrize("runner", ["deno"], indirect=True)
async def test_typescript_error_lines_point_into_the_script_as_written(engine: CodeMode, runner: str) -> None:
    # Type-only lines vanish when TypeScript is transpiled; the reported line must still be the script's.
    code = (
        "interface Point {\n"
        "  x: number;\n"
        "  y: number;\n"
        "}\n"
        "type Pair = [Point, Point];\n"
        "const pair: Pair = [{ x: 1, y: 2 }, { x: 3, y: 4 }];\n"
        "console.log(pair.length as number);\n"
        "throw new RangeError(`bad ${pair[0].x}`);\n"
    )
    with anyio.fail_after(60):
        result = await engine.execute(code, "typescript", runner=runner, cache="off")
    data = dump(result)
    assert data["success"] is False
    assert data["output"] == "2\n"
    assert (data["error"]["type"], data["error"]["line"]) == ("RangeError", 8), data["error"]
    assert "bad 1" in data["error"]["message"]
