"""Nothing of a run reaches the next: the full-Python runners (``cpython``, ``pyodide``), run after run.

Each case leaves something behind in one run (a global, a patched module, ``sys.modules``, a file in the
workspace, in ``/tmp`` or in Pyodide's in-memory file system, a module written into site-packages, a package
installed for that run, a tool call still waiting for its answer, a run killed at its timeout) and asserts,
in the run that follows at once, that none of it is there. These hold whatever a runner does between runs
(a new process, an interpreter restored in place): a design that reuses anything must keep them passing.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from mcp_code_mode import CodeMode, RunResult

from .conftest import available

pytestmark = pytest.mark.anyio

FULL_PYTHON = ("cpython", "pyodide")


@pytest.fixture(params=FULL_PYTHON)
def runner(request: pytest.FixtureRequest) -> str:
    return available(request.param)


async def run(engine: CodeMode, runner: str, code: str, **options: Any) -> RunResult:
    with anyio.fail_after(60):
        result = await engine.execute(code, "python", runner=runner, cache="off", **options)
    assert result.runner == runner
    return result


async def returns(engine: CodeMode, runner: str, code: str, **options: Any) -> Any:
    result = await run(engine, runner, code, **options)
    assert result.success, result.error
    return result.return_value


LEFT_BEHIND = [
    pytest.param("secret = 'left behind'", "'secret' in globals()", False, id="a-global"),
    pytest.param(
        "import builtins\nbuiltins.leaked = 1", "import builtins\nhasattr(builtins, 'leaked')", False, id="a-builtin"
    ),
    pytest.param(
        "import json\njson.dumps = lambda *a, **k: 'patched'",
        "import json\njson.dumps([1])",
        "[1]",
        id="a-module-attribute",
    ),
    pytest.param(
        "import sys, types\nsys.modules['leaked'] = types.ModuleType('leaked')",
        "import sys\n'leaked' in sys.modules",
        False,
        id="sys-modules",
    ),
    pytest.param(
        "import sys\nsys.path.insert(0, '/leaked')\nsys.meta_path.append(object())",
        "import sys\n['/leaked' in sys.path, any(type(f) is object for f in sys.meta_path)]",
        [False, False],
        id="sys-path-and-meta-path",
    ),
    pytest.param(
        "import os\nos.environ['LEAKED'] = '1'\nos.chdir('/tmp')",
        "import os\n['LEAKED' in os.environ, os.listdir('.')]",
        [False, []],
        id="environment-and-working-directory",
    ),
    pytest.param(
        "import random\nrandom.seed(7)\nrandom.random()",
        "import random\nrandom.seed(7)\nx = random.random()\nrandom.seed(7)\nx == random.random()",
        True,
        id="a-module-state-that-must-still-work",
    ),
]


@pytest.mark.parametrize(("leave", "check", "expected"), LEFT_BEHIND)
async def test_what_a_run_leaves_in_its_interpreter_is_gone_in_the_next(
    engine: CodeMode, runner: str, leave: str, check: str, expected: Any
) -> None:
    await run(engine, runner, leave)  # its own result may suffer (a patched json.dumps): only the next run's counts
    assert await returns(engine, runner, check) == expected


FILES = (
    "import os, site\n"
    "places = ['left.txt', '/tmp/left.txt', '/home/pyodide/left.txt', '/home/left.txt',\n"
    "          os.path.join(site.getsitepackages()[0], 'leaked_module.py')]\n"
)


async def test_files_a_run_writes_anywhere_it_can_are_gone_in_the_next(engine: CodeMode, runner: str) -> None:
    # The workspace, /tmp, Pyodide's in-memory home and site-packages: whatever the run could write.
    written = await returns(
        engine,
        runner,
        FILES + "done = []\n"
        "for path in places:\n"
        "    try:\n"
        "        os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
        "        with open(path, 'w') as f:\n"
        "            f.write('LEAKED = 1\\n')\n"
        "        done.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "done",
    )
    assert "left.txt" in written  # the workspace at least
    seen = await returns(
        engine,
        runner,
        FILES + "import importlib\nimportlib.invalidate_caches()\n"
        "try:\n    import leaked_module\n    imported = True\nexcept ImportError:\n    imported = False\n"
        "[[p for p in places if os.path.exists(p)], imported, os.listdir('.')]",
    )
    assert seen == [[], False, []]


async def test_a_package_installed_for_one_run_is_not_importable_in_the_next(engine: CodeMode, runner: str) -> None:
    if runner != "pyodide":
        pytest.skip("cpython installs packages into environments of their own (tests/packages)")
    installed = await returns(engine, runner, "import tabulate\ntabulate.tabulate = None\n'ok'", packages=["tabulate"])
    assert installed == "ok"
    without = await run(engine, runner, "import tabulate")
    assert without.error is not None and without.error.type == "ModuleNotFoundError", without.error
    again = await returns(engine, runner, "import tabulate\ncallable(tabulate.tabulate)", packages=["tabulate"])
    assert again is True


async def test_a_tool_call_left_unanswered_is_never_answered_into_the_next_run(engine: CodeMode, runner: str) -> None:
    # The first run sends a call it never waits for and ends; the second run's calls get their own answers.
    first = await run(
        engine,
        runner,
        "import asyncio\n"
        "async def main():\n"
        "    asyncio.ensure_future(fixture.slow(seconds=1.0))\n"
        "    await asyncio.sleep(0)\n"
        "    return 'left'\n"
        "await main()",
    )
    assert first.success, first.error
    answers = await returns(engine, runner, "[fixture.echo(text='second'), fixture.add(a=2, b=3)]")
    assert answers == [{"result": "second"}, {"result": 5}]


async def test_a_run_killed_in_a_tool_call_leaves_its_answer_to_no_one(engine: CodeMode, runner: str) -> None:
    killed = await run(engine, runner, "fixture.slow(seconds=3)\n'never'", timeout_ms=1000)
    assert killed.error is not None and killed.error.type == "TimeoutError", killed.error
    answers = await returns(engine, runner, "[fixture.echo(text='mine'), fixture.add(a=1, b=1)]")
    assert answers == [{"result": "mine"}, {"result": 2}]


@pytest.mark.parametrize(
    "hang",
    [
        pytest.param("while True:\n    pass", id="busy-loop"),
        pytest.param("import time\ntime.sleep(60)", id="sleep"),
        pytest.param("x = []\nwhile True:\n    x.append(' ' * 10_000)", id="memory-growth"),
    ],
)
async def test_a_hung_run_is_killed_and_the_next_run_neither_waits_for_it_nor_sees_it(
    engine: CodeMode, runner: str, hang: str
) -> None:
    await engine.runners[runner].ready()
    hung = await run(engine, runner, "marker = 'hung'\n" + hang, timeout_ms=1000)
    assert hung.error is not None and hung.error.type in ("TimeoutError", "MemoryError"), hung.error
    started = time.monotonic()
    after = await returns(engine, runner, "['marker' in globals(), sum(range(10))]")
    elapsed = time.monotonic() - started
    assert after == [False, 45]
    assert elapsed < 15, f"the run after a killed one took {elapsed:.1f} s"
