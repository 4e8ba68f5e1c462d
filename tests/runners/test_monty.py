"""The monty runner: pydantic-monty in a sandboxed worker, with the same stubs and bridge as every runner.

The contract suite (``tests/contract``) covers what every runner shares; here is what is Monty's own: its
refusals (named, before any line runs, and in ``validate_code``), the stubs' Python signatures, a fresh session
per run, its limits, and the runner left out (with its reason) where pydantic-monty is not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import RunnerError
from mcp_code_mode.runners import StubBundle, monty

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(isinstance(monty.find_monty(), str), reason=f"monty unavailable: {monty.find_monty()}"),
]


async def run(engine: CodeMode, code: str, **options: Any) -> Any:
    return await engine.execute(code, "python", runner="monty", cache="off", **options)


async def test_class_inheritance_is_refused_by_name_before_any_line_runs(engine: CodeMode) -> None:
    result = await run(engine, "print('first')\nfixture.add(a=1, b=2)\nclass A(Exception):\n    pass")
    assert not result.success
    assert result.error is not None
    assert result.error.type == "MontySyntaxError"
    assert "class inheritance" in result.error.message
    assert result.error.line == 3
    assert result.output == ""
    assert result.tool_calls == 0


@pytest.mark.parametrize(
    ("code", "construct", "line"),
    [
        ("x = 1\nclass A(dict):\n    pass", "class inheritance", 2),
        ("def g():\n    yield 1", "yield", 2),
        ("class A:\n    @staticmethod\n    def f():\n        return 1", "method decorators", 2),
    ],
)
async def test_validate_code_reports_monty_refusals_without_running(
    engine: CodeMode, code: str, construct: str, line: int
) -> None:
    checked = await engine.validate("python", code, runner="monty")
    assert checked["runner"] == "monty"
    assert not checked["valid"]
    refusals = [f for f in checked["findings"] if f["kind"] == "unsupported"]
    assert refusals, checked["findings"]
    assert construct in refusals[0]["message"]
    assert refusals[0]["message"].startswith("MontySyntaxError: ")
    assert refusals[0]["line"] == line


async def test_validate_code_passes_code_monty_runs_and_flags_imports_it_lacks(engine: CodeMode) -> None:
    good = await engine.validate("python", "import json\nr = fixture.add(a=1, b=2)\njson.dumps(r)", runner="monty")
    assert good["valid"], good["findings"]
    bad = await engine.validate("python", "import subprocess\nsubprocess.run(['ls'])", runner="monty")
    assert not bad["valid"]


async def test_stub_calls_take_the_python_stubs_signatures(engine: CodeMode) -> None:
    result = await run(engine, "[fixture.add(2, 3), fixture.add(2, b=4), fixture.add(a=1, b=1)]")
    assert result.success, result.error
    assert result.return_value == [{"result": 5}, {"result": 6}, {"result": 2}]
    wrong = await run(engine, "fixture.add(1, 2, 3)")
    assert not wrong.success
    assert wrong.error is not None and wrong.error.type == "TypeError"
    assert wrong.tool_calls == 0


async def test_each_run_starts_from_a_fresh_session_and_an_empty_workspace(engine: CodeMode) -> None:
    first = await run(engine, "kept = 41\nwith open('left.txt', 'w') as f:\n    f.write('x')\nkept + 1")
    assert first.success, first.error
    assert [f.path for f in first.files] == ["left.txt"]
    second = await run(engine, "import os\n[os.path.exists('left.txt'), 'kept' in globals()]")
    assert not second.success or second.return_value == [False, False]
    third = await run(engine, "kept")
    assert not third.success
    assert third.error is not None and third.error.type == "NameError"
    assert third.files == []


async def test_monty_limits_end_deep_recursion_with_its_error(engine: CodeMode) -> None:
    result = await run(engine, "def f(n):\n    return f(n + 1)\nf(0)")
    assert not result.success
    assert result.error is not None and result.error.type == "RecursionError"


async def test_an_uncaught_tool_error_is_reported_as_tool_error_and_is_catchable_as_tool_error(
    engine: CodeMode,
) -> None:
    caught = await run(
        engine, "try:\n    fixture.fail(message='nope')\nexcept ToolError as e:\n    r = str(e)\nr", timeout_ms=10_000
    )
    assert caught.success, caught.error
    assert "nope" in str(caught.return_value)
    failed = await run(engine, "fixture.fail(message='nope')")
    assert failed.error is not None and failed.error.type == "ToolError"
    script = await run(engine, "raise RuntimeError('mine')")
    assert script.error is not None and script.error.type == "RuntimeError"


async def test_the_runner_reports_itself(engine: CodeMode) -> None:
    runner = engine.runners["monty"]
    assert runner.isolation.endswith("+interpreter")
    assert runner.identity()["pydantic-monty"] != "-"
    assert "json" in (runner.authorized_imports(()) or ())


def test_the_stub_table_maps_idents_to_the_names_tools_take() -> None:
    source = (
        '@_namespace("my-server", "read-file")\n'
        "class my_server:\n"
        "    @staticmethod\n"
        "    def read_file(path: str, from_: int, *, limit: int = 10, tail: bool | None = None) -> Any:\n"
        '        return _call("my-server", "read-file", {"path": path, "from": from_},\n'
        '                     {"limit": limit, "tail": tail})\n'
    )
    table = monty.stub_table(StubBundle(source=source, version=1, namespaces=("my_server",)))
    assert table["namespaces"]["my_server"] == {
        "server": "my-server",
        "tools": {
            "read_file": {
                "tool": "read-file",
                "required": [["path", "path"], ["from_", "from"]],
                "optional": [["limit", "limit", 10], ["tail", "tail", None]],
            }
        },
    }


def test_without_pydantic_monty_the_runner_is_left_out_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "pydantic_monty" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    reason = monty.find_monty()
    assert isinstance(reason, str) and "pydantic-monty" in reason
    with pytest.raises(RunnerError, match="pydantic-monty is not installed"):
        monty.build(None)  # type: ignore[arg-type]  # refused before the context is read
    assert monty.diagnose(None)[0].status == "info"  # type: ignore[arg-type]


def test_the_worker_program_is_declared_for_the_cache_keys() -> None:
    assert Path(monty.WORKER).exists()
    assert monty.PLUGIN.sources == (monty.WORKER,)


def _monty_processes() -> set[int]:
    """Pids of this test process's descendants that run the ``monty`` binary."""
    import os

    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry))
        names[int(entry)] = name
    found: set[int] = set()
    stack = [os.getpid()]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            if names.get(child) == "monty":
                found.add(child)
            stack.append(child)
    return found


async def test_the_process_a_script_ran_in_never_serves_another_run(engine: CodeMode) -> None:
    """One session per monty process: the process a script ran in is gone once its run ends, and the next run
    runs in another."""
    import anyio

    seen: list[set[int]] = []
    for _ in range(2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, engine, "x = 0\nfor i in range(12_000_000):\n    x += i\nx")  # about 2 s
            await anyio.sleep(0.6)
            seen.append(_monty_processes())  # the process running the script, and maybe the next one
        await anyio.sleep(0.3)
        assert not (seen[-1] & _monty_processes()) or len(seen[-1]) > 1, seen
    first, second = seen
    assert first and second and first != second
