"""The pyodide runner: CPython in WebAssembly under Deno, with the same stubs over the same bridge.

Real engine, real downstream servers (npm filesystem and memory, the Python fixture server), real
Deno processes restoring Pyodide from the cached memory snapshot.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import PackageError, UnsupportedError
from mcp_code_mode.presentation import supported_languages
from mcp_code_mode.runners.pyodide import PyodideRunner
from mcp_code_mode.server import build_server

from ..conftest import alive, child_pids, filesystem_entry, fixture_entry, make_config, memory_entry
from ..fixtures.loopback import loopback_server

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def engine(shared_dirs: dict[str, Path]) -> AsyncIterator[CodeMode]:
    """One engine whose Python runner is pyodide, over filesystem, memory and fixture servers."""
    config = make_config(
        {
            "filesystem": filesystem_entry(shared_dirs["files"]),
            "memory": memory_entry(shared_dirs["memory"]),
            "fixture": fixture_entry(),
        },
        workspace_dir=shared_dirs["runs"],
        python_runner="pyodide",
        pyodide_pool_size=2,
    )
    async with CodeMode(config) as cm:
        yield cm


async def test_one_script_orchestrates_filesystem_memory_and_fixture_servers(
    engine: CodeMode, shared_dirs: dict[str, Path]
) -> None:
    code = (
        f"ROOT = {str(shared_dirs['files'])!r}\n"
        + """
import statistics, sys
for i in range(5):
    filesystem.write_file(path=f"{ROOT}/sales_{i}.csv", content=f"region,amount\\nnorth,{i * 10}\\nsouth,{i}\\n")
listing = filesystem.list_directory(path=ROOT)["content"]
names = sorted(line.split()[-1] for line in listing.splitlines() if "sales_" in line)
totals = []
for name in names:
    text = filesystem.read_text_file(path=f"{ROOT}/{name}")["content"]
    totals.append(sum(float(row.split(",")[1]) for row in text.splitlines()[1:]))
summary = fixture.stats(values=totals)
memory.create_entities(entities=[{"name": "pyodide-report", "entityType": "report",
                                  "observations": [f"total {sum(totals)}"]}])
found = call_tool("memory", "search_nodes", {"query": "pyodide-report"})
print(len(names), summary["mean"], sys.version_info[:2] >= (3, 12))
{"totals": totals, "entities": [e["name"] for e in found["entities"]]}
"""
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.runner == "pyodide"
    assert result.output == "5 22.0 True\n"
    assert result.return_value == {"totals": [0.0, 11.0, 22.0, 33.0, 44.0], "entities": ["pyodide-report"]}
    assert result.tool_calls == 5 + 1 + 5 + 1 + 1 + 1
    assert (shared_dirs["files"] / "sales_3.csv").read_text(encoding="utf-8") == "region,amount\nnorth,30\nsouth,3\n"
    assert "pyodide-report" in shared_dirs["memory"].read_text(encoding="utf-8")


async def test_a_failing_tool_raises_tool_error_with_server_tool_and_message(engine: CodeMode) -> None:
    code = (
        "try:\n"
        "    fixture.fail(message='nope')\n"
        "except ToolError as e:\n"
        "    print(e.server, e.tool, str(e))\n"
        "fixture.add(a=1, b=2)\n"
        "fixture.fail(message='the server said no')\n"
    )
    result = await engine.execute(code)
    assert result.output.startswith("fixture fail ") and result.output.endswith("nope\n")
    assert not result.success
    assert result.error is not None
    assert (result.error.type, result.error.line) == ("ToolError", 6)
    assert result.error.message.endswith("the server said no")


async def test_stubs_are_awaitable_in_async_code_and_gather_runs_them_together(engine: CodeMode) -> None:
    code = (
        "import asyncio\n"
        "async def total(values):\n"
        "    first, second = await asyncio.gather(fixture.add(a=values[0], b=1), fixture.add(a=values[1], b=2))\n"
        "    third = await call_tool('fixture', 'add', {'a': first['result'], 'b': second['result']})\n"
        "    return third['result']\n"
        "plain = fixture.add(a=40, b=2)['result']\n"
        "top = await fixture.add(a=1, b=1)\n"
        "[plain, top['result'], await total([10, 20])]\n"
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.return_value == [42, 2, 33]
    assert result.tool_calls == 5


ADDS = "[r['result'] for r in results]"


@pytest.mark.parametrize(
    ("code", "value"),
    [
        (
            f"import asyncio\nresults = await asyncio.gather(*[fixture.add(a=i, b=1) for i in range(3)])\n{ADDS}",
            [1, 2, 3],
        ),
        (
            f"import asyncio\nresults = await asyncio.gather(*(fixture.add(a=i, b=2) for i in range(3)))\n{ADDS}",
            [2, 3, 4],
        ),
        (
            "import asyncio\nasync def many(n):\n"
            "    return await asyncio.gather(*[fixture.add(a=i, b=3) for i in range(n)])\n"
            f"results = await many(3)\n{ADDS}",
            [3, 4, 5],
        ),
        ("import asyncio\nfirst = fixture.add(a=1, b=1)\nawait asyncio.sleep(0)\nfirst['result']", 2),
        (
            "import asyncio\ndef plain(i):\n    return fixture.add(a=i, b=i)['result']\n"
            "await asyncio.sleep(0)\n[plain(2), plain(3)]",
            [4, 6],
        ),
        (
            "results = [fixture.add(a=i, b=0) for i in range(2)]\n"
            "results[1]['result'] + (await fixture.add(a=5, b=5))['result']",
            11,
        ),
    ],
    ids=[
        "top-level gather of a list comprehension",
        "top-level gather of a generator expression",
        "gather inside async def",
        "plain call at top level of a script that awaits",
        "call inside a plain def called at top level",
        "comprehension without await and an awaited call",
    ],
)
async def test_a_stub_call_is_awaitable_inside_async_def_and_inside_a_top_level_await_only(
    engine: CodeMode, code: str, value: Any
) -> None:
    result = await engine.execute(code, runner="pyodide")
    assert result.success, result.error
    assert result.return_value == value


async def test_the_full_language_runs_which_the_local_interpreter_refuses(engine: CodeMode) -> None:
    code = (
        "import os, sys, dataclasses\n"
        "@dataclasses.dataclass\n"
        "class P:\n"
        "    x: int\n"
        "    def __add__(self, other):\n"
        "        return P(self.x + other.x)\n"
        "(P(1) + P(2)).__dict__, sys.platform, os.getcwd(), type(1).__name__\n"
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.return_value == [{"x": 3}, "emscripten", "/workspace", "int"]


async def test_errors_carry_type_message_and_the_line_in_the_users_code(engine: CodeMode) -> None:
    code = "a = 1\n\ndef f(x):\n    return 10 / x\n\nprint('before')\nf(0)\n"
    result = await engine.execute(code)
    assert not result.success and result.error is not None
    assert (result.error.type, result.error.message, result.error.line) == ("ZeroDivisionError", "division by zero", 4)
    assert result.error.traceback is not None and "line 7, in <module>: f(0)" in result.error.traceback
    assert result.output == "before\n"
    syntax = await engine.execute("x = 1\nif x\n    pass\n")
    assert syntax.error is not None and syntax.error.type == "SyntaxError" and syntax.error.line == 2


@pytest.mark.parametrize("code", ["while True:\n    pass", "import time\ntime.sleep(10**6)"])
async def test_runaway_scripts_are_killed_at_the_timeout_and_the_next_run_works(engine: CodeMode, code: str) -> None:
    result = await engine.execute(code, timeout_ms=1500)
    assert not result.success
    assert result.error is not None and result.error.type == "TimeoutError"
    assert result.execution_time < 2500  # from handing the code to a warm interpreter to the kill
    after = await engine.execute("print('alive')")
    assert after.success and after.output == "alive\n"


async def test_output_is_capped_and_marked_truncated(engine: CodeMode) -> None:
    cap = engine.config.settings.max_output_chars
    result = await engine.execute(f"for i in range(20):\n    print('x' * {cap // 10})")
    assert result.success
    assert result.truncated
    assert len(result.output) == cap
    assert not (await engine.execute("print('ok')")).truncated


@pytest.mark.parametrize(
    "pause",
    [
        "time.sleep(2)",
        "t = time.monotonic()\nwhile time.monotonic() - t < 2:\n    pass",
        "import asyncio\nawait asyncio.sleep(2)",
        "def spin(until):\n    while time.monotonic() < until:\n        pass\nspin(time.monotonic() + 2)",
    ],
    ids=["time.sleep", "busy loop", "asyncio.sleep", "busy function"],
)
async def test_printed_output_reaches_the_host_while_the_script_pauses_or_computes(
    engine: CodeMode, pause: str
) -> None:
    """Lines printed just after another (within the flush interval) and then a pause of two seconds
    reach ``on_output`` at once, not with the next print."""
    chunks: list[tuple[float, str]] = []

    async def on_output(text: str) -> None:
        chunks.append((time.monotonic(), text))

    code = f"import time\nprint('first')\nprint('a')\n{pause}\nprint('b')"
    with anyio.fail_after(30):
        result = await engine.execute(code, runner="pyodide", on_output=on_output)
    assert result.success, result.error
    assert result.output == "first\na\nb\n"
    first_a = next(at for at, text in chunks if "a" in text)
    first_b = next(at for at, text in chunks if "b" in text)
    assert first_b - first_a >= 1.7, f"'a' came {first_b - first_a:.2f} s before 'b': {chunks}"


async def test_a_return_value_past_the_cap_is_cut_in_the_interpreter_as_under_cpython(engine: CodeMode) -> None:
    """The interpreter cuts it (cm_runtime.jsonable: the first max_output characters of its JSON); the
    host would cut it again, but a 50 MB value never leaves the worker."""
    done = await _raw_run(engine, "'x' * 50_000_000", max_output=1000)
    assert done["success"] is True
    assert done["returnValue"] == '"' + "x" * 999
    result = await engine.execute("{'a': 'y' * 500_000}", runner="pyodide")
    assert result.success and result.truncated
    assert isinstance(result.return_value, str) and len(result.return_value) <= engine.config.settings.max_output_chars


async def test_running_out_of_memory_names_the_interpreters_own_cap(engine: CodeMode) -> None:
    cap = engine.config.settings.pyodide_max_memory_mb
    result = await engine.execute(f"bomb = bytearray({cap + 256} * 1024 * 1024)", runner="pyodide")
    assert result.error is not None and result.error.type == "MemoryError"
    assert f"{cap} MB" in result.error.message, result.error.message


async def test_a_memory_bomb_gets_memory_error_at_the_configured_cap(engine: CodeMode) -> None:
    cap = engine.config.settings.pyodide_max_memory_mb
    code = (
        f"try:\n    bomb = bytearray({cap + 256} * 1024 * 1024)\n"
        "except MemoryError:\n    print('refused')\n"
        "len(bytearray(50_000_000))"
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.output == "refused\n"
    assert result.return_value == 50_000_000


async def test_open_reads_and_writes_real_workspace_files_that_come_back_in_files(engine: CodeMode) -> None:
    code = (
        "with open('results.txt', 'w') as f:\n"
        "    f.write('Processing complete!\\n')\n"
        "    f.write('Total: 42\\n')\n"
        "import os\n"
        "os.makedirs('out', exist_ok=True)\n"
        "open('out/data.bin', 'wb').write(bytes(range(10)))\n"
        "with open('results.txt', 'r') as f:\n"
        "    print(f.read())\n"
    )
    result = await engine.execute(code)
    assert result.success, result.error
    assert result.output == "Processing complete!\nTotal: 42\n\n"
    assert [(f.path, f.size) for f in result.files] == [("results.txt", 31), ("out/data.bin", 10)]


async def test_each_run_gets_a_fresh_interpreter_and_an_empty_workspace(engine: CodeMode) -> None:
    first = await engine.execute(
        "import json, sys, builtins\n"
        "secret = 'left behind'\n"
        "json.dumps = lambda *a, **k: 'patched'\n"
        "builtins.leaked = 1\n"
        "sys.modules['leaked'] = sys\n"
        "open('left.txt', 'w').write('x')\n"
    )
    assert first.success, first.error
    second = await engine.execute(
        "import json, sys, builtins, os\n"
        "[json.dumps([1]), hasattr(builtins, 'leaked'), 'secret' in globals(),\n"
        " 'leaked' in sys.modules, os.listdir('.')]\n"
    )
    assert second.success, second.error
    assert second.return_value == ["[1]", False, False, False, []]


async def test_packages_that_need_pyodides_own_builds_are_refused_by_name_without_an_index(engine: CodeMode) -> None:
    with pytest.raises(PackageError, match="numpy needs Pyodide's own build.*CODE_MODE_PYODIDE_INDEX_URL"):
        await engine.execute("import numpy", packages=["numpy"])
    with pytest.raises(PackageError, match="'left-pad-please' is not in the allowed packages"):
        await engine.execute("1", packages=["left-pad-please"])


async def test_pyodide_builds_load_from_the_configured_package_index(tmp_path: Path) -> None:
    index = tmp_path / "index"
    index.mkdir()
    config = make_config({}, pyodide_index_url=str(index), workspace_dir=tmp_path / "runs")
    async with CodeMode(config) as cm:
        result = await cm.execute("import numpy", runner="pyodide", packages=["numpy"])
    assert result.error is not None and result.error.type == "RunnerError"
    # The worker looked for Pyodide's numpy wheel in the configured folder (and was allowed to).
    assert f"{index}/numpy-" in result.error.message and "wasm32.whl" in result.error.message
    assert "NotCapable" not in result.error.message


async def test_an_allowed_pure_python_package_installs_from_its_wheel(engine: CodeMode) -> None:
    result = await engine.execute(
        "import tabulate\nprint(tabulate.tabulate([[1, 2]], headers=['a', 'b'], tablefmt='plain'))",
        packages=["tabulate"],
    )
    assert result.success, result.error
    assert result.output.split() == ["a", "b", "1", "2"]
    without = await engine.execute("import tabulate")
    assert without.error is not None and without.error.type == "ModuleNotFoundError"


async def test_micropip_comes_from_its_wheel_in_every_interpreter(engine: CodeMode) -> None:
    result = await engine.execute("import micropip\nmicropip.__version__")
    assert result.success, result.error
    assert isinstance(result.return_value, str) and result.return_value[:1].isdigit()


async def test_the_snapshot_is_cached_on_disk_keyed_by_the_versions(engine: CodeMode) -> None:
    runner = engine.runners["pyodide"]
    assert isinstance(runner, PyodideRunner)
    path = runner.setup.snapshot_path()
    assert path.exists() and path.stat().st_size > 1_000_000
    assert runner.setup.versions()["pyodide"] in path.name
    assert runner.isolation == "namespaces+wasm"  # the Deno process runs inside the bubblewrap sandbox
    assert engine.status()["runners"]["pyodide"] == {"isolation": "namespaces+wasm", "languages": ["python"]}


async def test_closing_the_engine_while_interpreters_start_leaves_no_deno_process(tmp_path: Path) -> None:
    # Eager, and not waited for (warmup_timeout=0): its interpreters start in the background as the engine opens.
    config = make_config(
        {}, workspace_dir=tmp_path / "runs", pyodide_pool_size=2, eager_runners="pyodide", warmup_timeout=0
    )
    async with CodeMode(config) as cm:
        runner = cm.runners["pyodide"]
        assert isinstance(runner, PyodideRunner)
        with anyio.fail_after(60):
            while runner.pool.spawned < 2:  # both interpreters are starting, neither is ready yet
                await anyio.sleep(0.01)
        workers = {worker.process.pid for worker in runner.pool._live}
        starting = workers | {pid for worker in workers for pid in child_pids(worker)}
        assert starting
    with anyio.fail_after(10):
        while any(alive(pid) for pid in starting):
            await anyio.sleep(0.05)
    runs = tmp_path / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


async def test_a_host_without_pyodide_gets_a_clear_error_and_the_server_still_serves(tmp_path: Path) -> None:
    config = make_config({}, pyodide_dir=tmp_path / "nowhere", workspace_dir=tmp_path / "runs")
    async with CodeMode(config) as cm:
        with pytest.raises(
            UnsupportedError, match="pyodide runner is not available on this host: Pyodide is not installed"
        ):
            await cm.execute("print(1)", runner="pyodide")
        assert "nowhere" in cm.unavailable_runners["pyodide"]
        assert all(r["name"] != "pyodide" for lang in supported_languages(cm) for r in lang["runners"])
        assert (await cm.execute("print(1)")).output == "1\n"


async def test_execute_code_over_mcp_runs_a_script_under_pyodide(shared_dirs: dict[str, Path]) -> None:
    config = make_config(
        {"fixture": fixture_entry(), "filesystem": filesystem_entry(shared_dirs["files"])},
        workspace_dir=shared_dirs["runs"],
        pyodide_pool_size=1,
    )
    (shared_dirs["files"] / "mcp.txt").write_text("over mcp", encoding="utf-8")
    code = (
        f"text = filesystem.read_text_file(path={str(shared_dirs['files'] / 'mcp.txt')!r})['content']\n"
        "print(text.upper())\nfixture.add(a=2, b=3)['result']"
    )
    with anyio.fail_after(60):
        async with Client(build_server(CodeMode(config)), mode="legacy") as client:
            result = await client.call_tool(
                "execute_code", {"language": "python", "code": code, "runner": "pyodide", "allowNetworking": False}
            )
    data = result.structured_content
    assert data is not None
    assert (data["success"], data["runner"], data["output"], data["returnValue"]) == (True, "pyodide", "OVER MCP\n", 5)
    assert data["toolCalls"] == 2


async def test_the_worker_takes_any_well_formed_answer_and_skips_lines_that_are_not_its_own(
    engine: CodeMode, tmp_path: Path
) -> None:
    """The worker takes the host's compact answer without parsing it; an answer written another way
    still counts, and lines that are not the answer to the pending call are skipped."""
    runner = engine.runners["pyodide"]
    assert isinstance(runner, PyodideRunner)
    argv = runner.setup.serve_argv(runner.setup.snapshot_path())
    stubs = engine.bundle("python")
    code = "print(fixture.add(a=1, b=2)['result'], fixture.add(a=3, b=4)['result'])"
    async with await anyio.open_process(argv, cwd=tmp_path, env=runner.setup.environment()) as process:
        assert process.stdin is not None and process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)

        async def receive() -> dict[str, Any]:
            return json.loads(await lines.receive_until(b"\n", 1 << 20))

        async def send(text: str) -> None:
            assert process.stdin is not None
            await process.stdin.send(text.encode() + b"\n")

        with anyio.fail_after(60):
            assert (await receive())["op"] == "ready"
            run = {"op": "run", "code": code, "max_output": 1000, "namespaces": list(stubs.namespaces)}
            await send(json.dumps({**run, "imports": [], "version": stubs.version, "stubs": stubs.source}))
            first = await receive()
            assert first["op"] == "call" and first["arguments"] == {"a": 1, "b": 2}
            await send("not json")
            await send('{"op":"result","id":99,"value":{"result":-1}}')  # someone else's answer
            await send(json.dumps({"value": {"result": 3}, "id": first["id"], "op": "result"}))  # spaced, reordered
            second = await receive()
            assert second["op"] == "call" and second["arguments"] == {"a": 3, "b": 4}
            await send(f'{{"op":"result","id":{second["id"]},"value":{{"result":7}}}}')
            messages = [await receive(), await receive()]
        process.kill()
    assert messages[0] == {"op": "output", "data": "3 7\n"}
    assert messages[1]["op"] == "done" and messages[1]["success"] is True


async def _raw_run(engine: CodeMode, code: str, max_output: int) -> dict[str, Any]:
    """Run ``code`` on a worker of its own, outside the pool and the host loop: its ``done`` as sent."""
    runner = engine.runners["pyodide"]
    assert isinstance(runner, PyodideRunner)
    argv = runner.setup.serve_argv(runner.setup.snapshot_path())
    stubs = engine.bundle("python")
    run = {"op": "run", "code": code, "max_output": max_output, "namespaces": [], "imports": []}
    with tempfile.TemporaryDirectory() as workspace:
        async with await anyio.open_process(argv, cwd=workspace, env=runner.setup.environment()) as process:
            assert process.stdin is not None and process.stdout is not None
            lines = BufferedByteReceiveStream(process.stdout)
            try:
                with anyio.fail_after(60):
                    assert json.loads(await lines.receive_until(b"\n", 1 << 20))["op"] == "ready"
                    message = {**run, "version": stubs.version, "stubs": stubs.source}
                    await process.stdin.send(json.dumps(message).encode() + b"\n")
                    while (done := json.loads(await lines.receive_until(b"\n", 1 << 27)))["op"] != "done":
                        pass
            finally:
                process.kill()
    return done


async def test_a_remote_package_index_is_reached_through_the_egress_gate_and_nothing_else(tmp_path: Path) -> None:
    """The worker's own fetch of Pyodide's packages goes through the proxy, opened to the index alone."""
    with loopback_server() as index:
        port = index.url.rsplit(":", 1)[1]
        config = make_config(
            {},
            pyodide_index_url=index.url + "/",
            network_allow_private=f"127.0.0.1:{port}",
            workspace_dir=tmp_path / "runs",
        )
        async with CodeMode(config) as cm:
            result = await cm.execute("import numpy", runner="pyodide", packages=["numpy"])
        assert result.error is not None
        requests = [line for line in index.connections if "numpy-" in line]
        assert requests and requests[0].startswith("GET /numpy-") and "wasm32.whl" in requests[0]
