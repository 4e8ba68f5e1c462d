"""The pyodide worker (pyodide_worker.ts, with worker_runtime.ts): what it checks of Python's report.

Python in Pyodide reports its run's result through the prelude, which the script can rewrite; the
worker's JavaScript side checks that report again before it writes the ``done`` line. Each test reads
that line as the worker sent it, on a worker of its own outside the pool and the host loop (the host
caps and checks again; see ``bridge.host``).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.runners.pyodide import PyodideRunner

from ..conftest import make_config

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:
    runs: Path = tmp_path_factory.mktemp("runs")
    config = make_config({}, workspace_dir=runs, python_runner="pyodide", pyodide_pool_size=1)
    async with CodeMode(config) as cm:
        await cm.execute("1", "python", runner="pyodide")  # the snapshot exists
        yield cm


async def done_of(engine: CodeMode, code: str, **fields: Any) -> dict[str, Any]:
    """Run ``code`` on a worker of its own: its ``done`` as sent, and every line before it."""
    runner = engine.runners["pyodide"]
    assert isinstance(runner, PyodideRunner)
    argv = runner.setup.serve_argv(runner.setup.snapshot_path())
    stubs = engine.bundle("python")
    run = {"op": "run", "code": code, "max_output": 1000, "namespaces": [], "imports": [], **fields}
    with tempfile.TemporaryDirectory() as workspace:
        async with await anyio.open_process(argv, cwd=workspace, env=runner.setup.environment()) as process:
            assert process.stdin is not None and process.stdout is not None
            lines = BufferedByteReceiveStream(process.stdout)
            try:
                with anyio.fail_after(60):
                    assert json.loads(await lines.receive_until(b"\n", 1 << 20)) == {"op": "ready"}
                    message = {**run, "version": stubs.version, "stubs": stubs.source}
                    await process.stdin.send(json.dumps(message).encode() + b"\n")
                    while (done := json.loads(await lines.receive_until(b"\n", 1 << 27)))["op"] != "done":
                        pass
            finally:
                process.kill()
    return done


async def test_a_return_value_over_the_cap_is_cut_even_when_the_script_rewrote_the_prelude(engine: CodeMode) -> None:
    code = (
        "import sys\n"
        "prelude = sys.modules['_codemode']\n"
        "prelude.jsonable = lambda value, cap: (value, False)  # the prelude's own cut, undone\n"
        "'x' * 5_000_000\n"
    )
    done = await done_of(engine, code)
    assert done["success"], done
    assert done["returnValue"] == '"' + "x" * 999
    assert done["dropped"] >= 1  # the run is marked truncated


async def test_a_return_value_cut_by_python_is_not_cut_again(engine: CodeMode) -> None:
    done = await done_of(engine, "{'big': 'x' * 5000}")
    assert done["returnValue"] == '{"big": "' + "x" * 991
    assert done["dropped"] == 1


async def test_a_return_value_within_the_cap_is_kept_as_python_reported_it(engine: CodeMode) -> None:
    done = await done_of(engine, "{'a': [1, 2.5, None], 'b': 'x' * 100}")
    assert (done["returnValue"], done["dropped"]) == ({"a": [1, 2.5, None], "b": "x" * 100}, 0)


async def test_a_run_message_that_is_not_valid_fails_the_run_naming_the_field(engine: CodeMode) -> None:
    done = await done_of(engine, "1", max_output="many")
    assert not done["success"]
    assert done["error"]["type"] == "RunnerError"
    assert done["error"]["message"].startswith("max_output")
