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
    assert_refused(await run(engine, code), "hostPath")


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


async def test_fetch_with_networking_on_does_connect(engine: CodeMode, listener: Listener) -> None:
    """The control for the two tests above: the listener does count a connection that is allowed."""
    url = f"http://127.0.0.1:{listener.port}/"
    code = f"import js\ntry:\n    await js.fetch({url!r})\nexcept Exception as e:\n    print(type(e).__name__)"
    result = await run(engine, code, network=True)
    assert result.success, result.error
    assert listener.connections >= 1


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
    assert_refused(await run(engine, code), "Requires read access")


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
