"""Escape attempts under the deno runner: each is refused, and the test checks that nothing happened.

The script catches the refusal and prints its name, so each test asserts both that the attempt was
refused (not that it failed for another reason) and that its effect is absent: canary files unread,
uncreated and unchanged, secrets absent from everything the run returned, servers never contacted.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Generator, Iterator
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.engine import CodeMode, RunResult
from mcp_code_mode.errors import UnsupportedError
from mcp_code_mode.runners.deno import DenoRunner

from ..fixtures.loopback import Loopback, loopback_server

pytestmark = pytest.mark.anyio

SECRET = "canary-7f3a9c1e-do-not-leak"


@pytest.fixture(scope="module")
def http() -> Iterator[Loopback]:
    with loopback_server() as server:
        yield server


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_text(SECRET, encoding="utf-8")
    return path


@pytest.fixture
def sleeper() -> Generator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def everything(result: RunResult) -> str:
    return json.dumps(result.model_dump(mode="json", by_alias=True))


async def attempt(engine: CodeMode, body: str, *, language: str = "js", network: bool = False) -> RunResult:
    """Run ``body`` in a try block; the script prints ``refused: <error name>: <message>`` when it throws."""
    code = f"try {{\n{body}\n}} catch (e) {{ console.log(`refused: ${{e.name}}: ${{e.message}}`); }}\n"
    result = await engine.execute(code, language, allow_networking=network, timeout_ms=20_000)
    assert result.success, result.error
    return result


@pytest.mark.parametrize(
    "body",
    [
        "console.log(await Deno.readTextFile(PATH));",
        "console.log(require('fs').readFileSync(PATH, 'utf8'));",
        "console.log(Deno.readTextFileSync('../'.repeat(40) + PATH.slice(1)));",
        "console.log(await (await fetch('file://' + PATH)).text());",
        "console.log([...Deno.readDirSync(PATH.slice(0, PATH.lastIndexOf('/')))].map((e) => e.name));",
    ],
    ids=["deno-read", "node-fs", "relative-traversal", "fetch-file-url", "list-directory"],
)
async def test_reading_outside_the_workspace_is_refused(engine: CodeMode, canary: Path, body: str) -> None:
    result = await attempt(engine, body.replace("PATH", json.dumps(str(canary))))
    assert "refused: NotCapable: Requires read access" in result.output
    assert SECRET not in everything(result) and "secret.txt" not in result.output.split("access to")[0]


async def test_importing_a_module_from_outside_the_workspace_is_refused(engine: CodeMode, tmp_path: Path) -> None:
    module = tmp_path / "outside.mjs"
    module.write_text(f"export default {json.dumps(SECRET)};", encoding="utf-8")
    result = await attempt(engine, f"console.log((await import({json.dumps(module.as_uri())})).default);")
    assert f'Requires read access to "{module}"' in result.output
    assert SECRET not in everything(result)


@pytest.mark.parametrize(
    "body",
    [
        "await Deno.writeTextFile(PATH, 'owned');",
        "require('fs').writeFileSync(PATH, 'owned');",
        "Deno.symlinkSync(PATH, 'link'); Deno.writeTextFileSync('link', 'owned');",
        "Deno.removeSync(PATH);",
    ],
    ids=["deno-write", "node-fs", "symlink", "remove"],
)
async def test_writing_outside_the_workspace_is_refused(engine: CodeMode, canary: Path, body: str) -> None:
    result = await attempt(engine, body.replace("PATH", json.dumps(str(canary))))
    assert "refused: NotCapable" in result.output
    assert canary.read_text(encoding="utf-8") == SECRET


@pytest.mark.parametrize(
    "body",
    [
        "console.log(Deno.env.get('PATH'), Deno.env.get('SECRET_NAME'));",
        "console.log(JSON.stringify(Deno.env.toObject()));",
        "console.log(Deno.readTextFileSync('/proc/self/environ'));",
        "const s = await Deno.permissions.request({ name: 'env' }); if (s.state !== 'granted') throw "
        "new Deno.errors.NotCapable('env ' + s.state); console.log(Deno.env.get('SECRET_NAME'));",
    ],
    ids=["env-get", "env-object", "proc-environ", "permission-request"],
)
async def test_the_environment_cannot_be_read(engine: CodeMode, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    monkeypatch.setenv("MCP_CODE_MODE_TEST_SECRET", SECRET)
    result = await attempt(engine, body.replace("SECRET_NAME", "MCP_CODE_MODE_TEST_SECRET"))
    assert "refused: NotCapable" in result.output
    assert SECRET not in everything(result) and "/usr/bin" not in result.output


async def test_process_env_is_empty(engine: CodeMode) -> None:
    result = await attempt(engine, "console.log(JSON.stringify(process.env), process.env.PATH);")
    assert result.output == "{} undefined\n"


@pytest.mark.parametrize(
    "body",
    [
        # The sandbox has no touch or sh, so the one program it surely has, Deno itself, is what is asked for.
        "await new Deno.Command(DENO, { args: ['eval', 'Deno.writeTextFileSync(' + JSON.stringify(PATH) + ', \"\")'] })"
        ".output();",
        "new Deno.Command(DENO, { args: ['eval', 'Deno.writeTextFileSync(' + JSON.stringify(PATH) + ', \"\")'] })"
        ".spawn();",
        "require('node:child_process').execSync('touch ' + PATH);",
        "const { spawnSync } = await import('node:child_process'); spawnSync('touch', [PATH]);",
    ],
    ids=["deno-command", "deno-spawn", "child-process-exec", "child-process-spawn"],
)
async def test_subprocesses_are_refused(engine: CodeMode, tmp_path: Path, body: str) -> None:
    target = tmp_path / "created-by-subprocess"
    deno = engine.runners["deno"]
    assert isinstance(deno, DenoRunner)
    result = await attempt(engine, body.replace("PATH", json.dumps(str(target))).replace("DENO", json.dumps(deno.deno)))
    assert "refused: NotCapable" in result.output
    assert not target.exists()


async def test_signals_to_other_processes_are_refused(engine: CodeMode, sleeper: subprocess.Popen[bytes]) -> None:
    result = await attempt(engine, f"Deno.kill({sleeper.pid}, 'SIGKILL');")
    assert "refused: NotCapable" in result.output
    assert sleeper.poll() is None


@pytest.mark.parametrize(
    "body",
    [
        "await fetch(URL);",
        "const conn = await Deno.connect({ hostname: '127.0.0.1', port: PORT }); conn.close();",
        "const axios = require('axios'); await axios.get(URL);",
        "const http = require('node:http'); await new Promise((ok, no) => "
        "{ const r = http.get(URL, ok); r.on('error', no); });",
        "await new Promise((ok, no) => { const ws = new WebSocket(URL.replace('http', 'ws')); "
        "ws.onopen = ok; ws.onerror = () => no(new Error('ws failed')); });",
    ],
    ids=["fetch", "tcp", "axios", "node-http", "websocket"],
)
async def test_network_access_is_refused_when_networking_is_off(engine: CodeMode, http: Loopback, body: str) -> None:
    port = http.url.rsplit(":", 1)[1]
    before = len(http.connections)
    result = await attempt(engine, body.replace("URL", json.dumps(http.url + "/x")).replace("PORT", port))
    assert "refused: NotCapable: Requires net access" in result.output
    assert len(http.connections) == before


async def test_the_same_request_goes_through_when_networking_is_on(engine: CodeMode, http: Loopback) -> None:
    result = await attempt(engine, f"console.log((await fetch({json.dumps(http.url + '/on')})).status);", network=True)
    assert result.output == "200\n"
    assert http.connections[-1] == "GET /on HTTP/1.1"


async def test_loading_a_native_library_is_refused(engine: CodeMode) -> None:
    body = (
        "const lib = Deno.dlopen('libc.so.6', { getpid: { parameters: [], result: 'i32' } });\n"
        "console.log('pid', lib.symbols.getpid());"
    )
    result = await attempt(engine, body)
    assert "refused: NotCapable: Requires ffi access" in result.output
    assert "pid" not in result.output.replace("refused", "")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("await import('https://example.com/module.ts');", "but --no-remote is specified"),
        (
            "await import('npm:' + 'left-pad');",
            'npm package not found in cache: "left-pad", --cached-only is specified',
        ),
        ("await import('jsr:@std/path');", "but --no-remote is specified"),
    ],
    ids=["remote-url", "computed-npm-name", "jsr"],
)
async def test_modules_that_are_not_in_the_cache_cannot_be_loaded(engine: CodeMode, body: str, reason: str) -> None:
    result = await attempt(engine, body)
    assert result.output.startswith("refused: TypeError:")
    if engine.config.settings.deno_isolates and "--no-remote" in reason:
        # A run's isolate has no import permission at all: refused before --no-remote is asked.
        reason = "Requires import access to"
    assert reason in result.output


async def test_system_information_is_refused(engine: CodeMode) -> None:
    result = await attempt(engine, "console.log(Deno.hostname(), Deno.osRelease());")
    assert "refused: NotCapable: Requires sys access" in result.output
    assert os.uname().nodename not in result.output.split("refused")[0]


# ----- validate_code runs `deno check` in the sandbox -------------------------------------------


async def test_type_checking_cannot_read_a_host_typescript_file(engine: CodeMode, tmp_path: Path) -> None:
    secret = tmp_path / "secret.ts"
    secret.write_text(
        'export const token: "host-secret-literal-1f3a" = "host-secret-literal-1f3a";\n', encoding="utf-8"
    )
    code = f"import {{ token }} from {json.dumps(secret.as_uri())};\nconst n: number = token;\n"
    answer = await engine.validate("typescript", code)
    assert not answer["valid"]
    text = json.dumps(answer)
    assert "host-secret-literal-1f3a" not in text  # a type error would have quoted the literal type
    assert "TS2307: Cannot find module" in text and "secret.ts" in text, text  # the host file is not there


async def test_type_checking_an_import_of_dev_zero_ends_bounded(engine: CodeMode) -> None:
    with anyio.fail_after(60):
        answer = await engine.validate("typescript", 'import "/dev/zero";\nconst x: number = 1;\n')
    assert not answer["valid"] and answer["findings"], answer


async def test_an_oversized_script_is_refused_by_execute_code_too(engine: CodeMode) -> None:
    limit = engine.config.settings.max_code_bytes
    with pytest.raises(UnsupportedError, match="CODE_MODE_MAX_CODE_BYTES"):
        await engine.execute("// x\n" * (limit // 5 + 1), "js")


async def test_denos_internals_are_out_of_a_scripts_reach(engine: CodeMode) -> None:
    # Deno[Deno.internal] holds the runtime's core ops and helpers: the worker deletes it before any script.
    body = (
        "const internals = (Deno as any)[Deno.internal];\n"
        "if (internals === undefined) throw new ReferenceError('Deno[Deno.internal] is not defined');\n"
        "console.log('reached', Object.keys(internals).length, 'internals');"
    )
    result = await attempt(engine, body, language="ts")
    assert result.output == "refused: ReferenceError: Deno[Deno.internal] is not defined\n", result.output
    symbols = await engine.execute("console.log(Object.getOwnPropertySymbols(Deno).map(String))", "js")
    assert symbols.success and "Deno.internal" not in symbols.output, symbols.output
