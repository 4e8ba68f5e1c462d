"""Escapes from the pyodide runner through the JavaScript bridge: each one refused by Deno's permissions.

Every test asserts that nothing happened: the secret (planted in a host file, in the host environment
and in another run's workspace) is absent from every part of the result, canary files are absent, a
loopback listener counted no connection, a process that could be signalled is still alive.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mcp_code_mode.engine import CodeMode, RunResult
from mcp_code_mode.runners.pyodide import PyodideRunner

from ..conftest import alive, fixture_entry, make_config
from ..fixtures.loopback import Listener

pytestmark = pytest.mark.anyio

SECRET = "cm-secret-" + secrets.token_hex(8)
ENV_NAME = "CODE_MODE_TEST_ESCAPE_SECRET"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A secret file outside any workspace, the secret in the host environment, a canary directory."""
    base = tmp_path_factory.mktemp("host")
    (base / "secret.txt").write_text(SECRET, encoding="utf-8")
    (base / "canaries").mkdir()
    os.environ[ENV_NAME] = SECRET
    try:
        yield {"base": base, "secret": base / "secret.txt", "canaries": base / "canaries", "runs": base / "runs"}
    finally:
        os.environ.pop(ENV_NAME, None)


@pytest.fixture(scope="module")
async def engine(host: dict[str, Path]) -> AsyncIterator[CodeMode]:
    config = make_config(
        {"fixture": fixture_entry()}, workspace_dir=host["runs"], python_runner="pyodide", pyodide_pool_size=2
    )
    async with CodeMode(config) as cm:
        yield cm


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    try:
        yield server
    finally:
        server.close()


def assert_refused(result: RunResult, *needles: str) -> None:
    """The run failed, and no secret reached its output, error, return value or files."""
    assert not result.success, result
    assert result.error is not None and result.error.type != "SyntaxError", result.error
    dumped = result.model_dump_json()
    assert SECRET not in dumped
    for needle in needles:
        assert needle in dumped, (needle, dumped)


def js_object(value: object) -> str:
    """Python source for a JavaScript object literal inside the sandbox."""
    return f"js.JSON.parse({json.dumps(value)!r})"


async def run(engine: CodeMode, code: str, *, network: bool = False) -> RunResult:
    return await engine.execute(code, allow_networking=network)


async def test_reading_a_host_file_through_js_deno_is_refused(engine: CodeMode, host: dict[str, Path]) -> None:
    result = await run(engine, f"import js\njs.Deno.readTextFileSync({str(host['secret'])!r})")
    assert_refused(result, "NotCapable")


async def test_reading_a_host_file_through_pyodide_js_mount_is_refused(engine: CodeMode, host: dict[str, Path]) -> None:
    code = (
        f"import pyodide_js\npyodide_js.mountNodeFS('/host', {str(host['base'])!r})\nopen('/host/secret.txt').read()\n"
    )
    assert_refused(await run(engine, code), "NotCapable")


async def test_python_open_sees_the_wasm_file_system_not_the_hosts(engine: CodeMode, host: dict[str, Path]) -> None:
    code = f"open({str(host['secret'])!r}).read()"
    assert_refused(await run(engine, code), "FileNotFoundError")
    passwd = await run(engine, "open('/etc/passwd').read()")
    assert_refused(passwd)
    assert "root:" not in passwd.model_dump_json()


async def test_the_host_environment_is_not_readable(engine: CodeMode) -> None:
    assert_refused(await run(engine, f"import js\njs.Deno.env.get({ENV_NAME!r})"), "NotCapable")
    assert_refused(await run(engine, "import js\njs.Deno.env.toObject()"), "NotCapable")
    python_env = await run(engine, "import os\ndict(os.environ)")
    assert python_env.success
    assert SECRET not in python_env.model_dump_json() and ENV_NAME not in python_env.model_dump_json()


async def test_spawning_a_process_with_deno_command_is_refused(engine: CodeMode, host: dict[str, Path]) -> None:
    canary = host["canaries"] / "spawned"
    args = js_object({"args": ["-c", f"touch {canary}"]})
    code = f"import js\njs.Deno.Command.new('/bin/sh', {args}).outputSync()"
    assert_refused(await run(engine, code), "NotCapable")
    assert not canary.exists()


async def test_python_subprocess_cannot_start_anything(engine: CodeMode, host: dict[str, Path]) -> None:
    canary = host["canaries"] / "subprocess"
    code = f"import subprocess\nsubprocess.run(['touch', {str(canary)!r}])"
    assert_refused(await run(engine, code), "does not support processes")
    assert not canary.exists()


async def test_signalling_a_host_process_is_refused(engine: CodeMode) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        assert_refused(await run(engine, f"import js\njs.Deno.kill({victim.pid}, 'SIGKILL')"), "NotCapable")
        assert alive(victim.pid)
    finally:
        victim.kill()
        victim.wait()


async def test_writing_outside_the_workspace_is_refused(engine: CodeMode, host: dict[str, Path]) -> None:
    canary = host["canaries"] / "written"
    assert_refused(await run(engine, f"import js\njs.Deno.writeTextFileSync({str(canary)!r}, 'x')"), "NotCapable")
    assert not canary.exists()


async def test_ffi_is_refused(engine: CodeMode) -> None:
    symbols = js_object({"getpid": {"parameters": [], "result": "i32"}})
    code = f"import js\njs.Deno.dlopen('libc.so.6', {symbols})"
    assert_refused(await run(engine, code), "NotCapable")


async def test_system_information_is_refused(engine: CodeMode) -> None:
    assert_refused(await run(engine, "import js\njs.Deno.hostname()"), "NotCapable")


async def test_fetch_with_networking_off_is_refused_and_reaches_no_listener(
    engine: CodeMode, listener: Listener
) -> None:
    code = f"import js\nawait js.fetch('http://127.0.0.1:{listener.port}/')"
    assert_refused(await run(engine, code), "NotCapable")
    assert listener.connections == 0


async def test_a_socket_with_networking_off_reaches_no_listener(engine: CodeMode, listener: Listener) -> None:
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener.port}), timeout=2)"
    assert_refused(await run(engine, code), "unreachable")
    assert listener.connections == 0


async def test_asking_for_a_permission_again_is_denied(engine: CodeMode, host: dict[str, Path]) -> None:
    asked = js_object({"name": "read", "path": str(host["secret"])})
    code = (
        "import js\n"
        f"state = js.Deno.permissions.requestSync({asked}).state\n"
        "print(state)\n"
        f"js.Deno.readTextFileSync({str(host['secret'])!r})\n"
    )
    result = await run(engine, code)
    assert_refused(result, "NotCapable")
    assert "granted" not in result.output


async def test_js_eval_and_the_function_constructor_get_no_more_than_python(
    engine: CodeMode, host: dict[str, Path]
) -> None:
    path = str(host["secret"])
    source = f"Deno.readTextFileSync({json.dumps(path)})"
    assert_refused(await run(engine, f"import js\njs.eval({source!r})"), "NotCapable")
    code = f"import js\njs.Function.new('p', 'return Deno.readTextFileSync(p)')({path!r})"
    assert_refused(await run(engine, code), "NotCapable")


async def test_a_dynamic_import_of_a_host_file_is_refused(engine: CodeMode, host: dict[str, Path]) -> None:
    module = host["base"] / "evil.mjs"
    module.write_text(f"export default {SECRET!r};", encoding="utf-8")
    code = f"import js\nawait js.eval('import(\"file://{module}\")')"
    assert_refused(await run(engine, code), "NotCapable")


async def test_a_js_worker_inherits_the_revoked_permissions(engine: CodeMode, host: dict[str, Path]) -> None:
    path = str(host["secret"])
    source = f"postMessage(Deno.readTextFileSync({path!r}))"
    code = (
        "import js, asyncio\n"
        f"url = 'data:application/javascript,' + js.encodeURIComponent({source!r})\n"
        'worker = js.Worker.new(url, js.JSON.parse(\'{"type": "module"}\'))\n'
        "got = asyncio.get_event_loop().create_future()\n"
        "worker.onmessage = lambda e: got.set_result(e.data)\n"
        "worker.onerror = lambda e: got.set_exception(RuntimeError(str(e.message)))\n"
        "await asyncio.wait_for(got, 10)\n"
    )
    assert_refused(await run(engine, code), "NotCapable")


async def test_pyodides_own_files_and_other_workspaces_are_not_readable(
    engine: CodeMode, host: dict[str, Path]
) -> None:
    runner = engine.runners["pyodide"]
    assert isinstance(runner, PyodideRunner)
    other = host["runs"] / "another-run"
    other.mkdir(parents=True, exist_ok=True)
    (other / "theirs.txt").write_text(SECRET, encoding="utf-8")
    for path in (other / "theirs.txt", runner.setup.snapshot_path(), runner.setup.pyodide_dir / "package.json"):
        assert_refused(await run(engine, f"import js\njs.Deno.readTextFileSync({str(path)!r})"), "NotCapable")


# ----- JavaScript is out of reach (issue 17, point 8) ---------------------------------------------
#
# Each technique ends in NotCapable, and the run's `done` is the script's own: the worker wrote no line
# the script forged, and the next run (on a fresh worker) works.

FORGED = '{"op":"done","success":true,"returnValue":"forged"}'


async def assert_sealed(engine: CodeMode, code: str, *needles: str) -> None:
    result = await run(engine, code)
    dumped = result.model_dump_json()
    assert result.return_value != "forged" and "forged" not in result.output, dumped
    assert SECRET not in dumped
    for needle in needles:
        assert needle in dumped, (needle, dumped)
    after = await run(engine, "print('next run')\n1 + 1")
    assert after.success and after.return_value == 2 and after.output == "next run\n", after


async def test_import_js_raises_not_capable(engine: CodeMode) -> None:
    result = await run(engine, "import js")
    assert result.error is not None and result.error.type == "NotCapable", result.error
    assert "No module named 'js': JavaScript is out of reach" in result.error.message
    await assert_sealed(engine, "import js\njs.Deno.stdout.writeSync(js.TextEncoder.new().encode('x'))", "NotCapable")


async def test_import_pyodide_js_raises_not_capable(engine: CodeMode) -> None:
    result = await run(engine, "import pyodide_js")
    assert result.error is not None and result.error.type == "NotCapable", result.error
    await assert_sealed(engine, "from pyodide_js import setStdout\nsetStdout()\nprint('x')", "NotCapable")


@pytest.mark.parametrize(
    "code",
    [
        "from pyodide.ffi import to_js",
        "import pyodide.code\npyodide.code.run_js('Deno')",
        "from pyodide import code",
        "import pyodide.http",
        "import pyodide.webloop",
        "import _pyodide_core",
        "import _pyodide._base",
        "import pyodide_js._api",
    ],
)
async def test_pyodide_modules_that_lead_to_javascript_raise_not_capable(engine: CodeMode, code: str) -> None:
    result = await run(engine, code)
    assert result.error is not None and result.error.type in ("NotCapable", "ImportError"), result.error
    assert "JavaScript is out of reach" in result.error.message or "cannot import name" in result.error.message
    await assert_sealed(engine, code)


@pytest.mark.parametrize(
    "code",
    [
        "__import__('js')",
        "import importlib\nimportlib.import_module('js')",
        "import importlib\nimportlib.import_module('pyodide_js')",
        "import sys\nsys.modules['js']",
        "import sys\nsys.modules.get('pyodide_js') or __import__('pyodide_js')",
        "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if 'Refuse' not in str(f)]\nimport js",
    ],
)
async def test_indirect_imports_of_js_get_nothing(engine: CodeMode, code: str) -> None:
    result = await run(engine, code)
    assert not result.success
    assert result.error is not None and result.error.type in ("NotCapable", "KeyError", "ModuleNotFoundError")
    assert result.error.type != "RunnerError"
    await assert_sealed(engine, code)


GC_SCAN = """
import gc
proxies = {}
for o in gc.get_objects():
    for r in [o, *gc.get_referents(o)]:
        if type(r).__name__.startswith('JsProxy') or type(r).__name__ in ('JsCallable', 'JsDoubleProxy'):
            proxies[id(r)] = r
reached = []
for p in list(proxies.values()):
    for attempt in (
        lambda: p.constructor('return Deno')(),
        lambda: p.constructor.constructor('return Deno')(),
        lambda: p._api._module.FS,
        lambda: p.setStdout(),
        lambda: p.Deno.stdout,
    ):
        try:
            reached.append(repr(attempt()))
        except Exception as e:
            if 'NotCapable' in str(e):
                reached.append('NotCapable')
[len(proxies), sorted(set(reached))]
"""


async def test_a_gc_scan_for_js_proxies_reaches_no_javascript_capability(engine: CodeMode) -> None:
    result = await run(engine, GC_SCAN)
    assert result.success, result.error
    _, reached = result.return_value
    assert reached in ([], ["NotCapable"]), reached
    await assert_sealed(engine, GC_SCAN)


async def test_new_js_objects_made_by_to_js_lead_to_no_code_and_no_prototype_pollution(engine: CodeMode) -> None:
    prelude = (
        "import gc\n"
        "ffi = [m for m in gc.get_objects() if type(m).__name__ == 'module' and m.__name__ == 'pyodide.ffi'][0]\n"
    )
    result = await run(engine, prelude + "ffi.to_js([1]).constructor.constructor('return Deno')()")
    assert result.error is not None and "NotCapable" in result.error.message, result.error
    pollute = prelude + "Obj = ffi.to_js({'a': 1}).constructor\n" + f"Obj.prototype.toJSON = lambda *a: {FORGED!r}\n"
    await assert_sealed(engine, pollute, "not extensible")
    join = "ffi.to_js([1]).constructor.prototype.join = lambda *a: 'forged'"
    await assert_sealed(engine, prelude + join, "read only")


async def test_frame_walking_into_the_prelude_finds_only_the_narrow_bridge(engine: CodeMode) -> None:
    code = (
        "import sys\n"
        "f = sys._getframe()\n"
        "names = []\n"
        "while f is not None:\n"
        "    names += [k for k, v in {**f.f_globals, **f.f_locals}.items() if 'Js' in type(v).__name__]\n"
        "    f = f.f_back\n"
        "sorted(set(names))\n"
    )
    result = await run(engine, code)
    assert result.success, result.error
    assert result.return_value == ["_bridge"], result.return_value


BRIDGE = "import _codemode\nbridge = _codemode._bridge\n"


async def test_the_bridge_function_leads_nowhere_and_checks_what_it_is_given(engine: CodeMode) -> None:
    code = (
        BRIDGE
        + "out = [[n for n in ('constructor', 'call', 'apply', 'bind', 'prototype') if hasattr(bridge, n)]]\n"
        + f"out.append(bridge('call', 'fixture', 'add', '{{}}\\n' + {FORGED!r}))\n"
        + "out.append(bridge('call', 'fixture', 'add', '[1]'))\n"
        + "out.append(bridge('call', 1, 2, 3))\n"
        + f"out.append(bridge('output', {FORGED!r}))\n"
        + "out.append(bridge('next'))\n"
        + "out\n"
    )
    result = await run(engine, code)
    assert result.success, result.error
    names, newline, array, numbers, output, nxt = result.return_value
    assert names == []
    for refused in (newline, array, numbers):
        assert json.loads(refused)["error"]["type"] == "NotCapable"
    assert output is None and nxt is None
    assert result.tool_calls == 0
    assert json.loads(json.dumps(result.output)) == FORGED  # printed as data, inside an output message


async def test_stub_globals_and_closures_hold_no_javascript(engine: CodeMode) -> None:
    code = (
        "seen = set()\n"
        "for f in (call_tool, fixture.add, final_answer):\n"
        "    fn = getattr(f, '__func__', f)\n"
        "    seen |= {k for k, v in fn.__globals__.items() if 'Js' in type(v).__name__}\n"
        "    cells = [type(c.cell_contents).__name__ for c in (fn.__closure__ or ())]\n"
        "    seen |= {name for name in cells if 'Js' in name}\n"
        "sorted(seen)\n"
    )
    result = await run(engine, code)
    assert result.success, result.error
    assert result.return_value in ([], ["_bridge"]), result.return_value


async def test_rewriting_the_prelude_cannot_forge_the_done_message(engine: CodeMode) -> None:
    code = (
        f'import _codemode\n_codemode._dumps = lambda *a, **k: {FORGED!r}[:-1] + \',"op":"call"}}\\n\' + {FORGED!r}\n'
    )
    result = await run(engine, code)
    assert not result.success and result.error is not None and result.error.type == "RunnerError", result
    await assert_sealed(engine, code)
