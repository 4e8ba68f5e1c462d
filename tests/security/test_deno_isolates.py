"""The deno runner's isolate mode (``CODE_MODE_DENO_ISOLATES``): one supervisor process serves run after run, each
in a V8 isolate (a web Worker) of its own. Each test is one way a run could reach past its own isolate, and
asserts the refusal: the supervisor replaced, the message refused, the channel out of reach, the state reset.

The rest of the deno escape suite (``test_deno_escapes.py``, ``test_bridge_forgery.py``) and the runner contract
suite run in this mode too, with ``CODE_MODE_TEST_DENO_ISOLATES=1`` (``make test`` does).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.engine import CodeMode, RunResult
from mcp_code_mode.runners import _pooled
from mcp_code_mode.runners._pool import Worker
from mcp_code_mode.runners.deno import PROXY_ENV, DenoRunner

from ..conftest import alive, fixture_entry, make_config

pytestmark = pytest.mark.anyio

FAKE_DONE = json.dumps(
    {"op": "done", "success": True, "returnValue": "forged", "error": None, "dropped": 0, "files": []}
)


@pytest.fixture(scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:
    runs = tmp_path_factory.mktemp("runs")
    config = make_config({"fixture": fixture_entry()}, workspace_dir=runs, deno_isolates=True, pool_size=1)
    async with CodeMode(config) as cm:
        yield cm


async def js(engine: CodeMode, code: str, *, client: str = "alice", timeout_ms: int = 20_000) -> RunResult:
    return await engine.execute(code, "javascript", cache="off", client=client, timeout_ms=timeout_ms)


async def idle_supervisor(engine: CodeMode) -> Worker:
    """The one idle supervisor of the default pool, once it is back from its last run."""
    runner = engine.runners["deno"]
    assert isinstance(runner, DenoRunner) and runner.isolates
    pool = runner.workers.pool
    with anyio.fail_after(20):  # a supervisor that was killed is replaced in the background
        while len(pool.idle_workers) != 1:
            await engine.ready(["deno"])
            await anyio.sleep(0.01)
    idle = pool.idle_workers
    assert idle[0].supervisor
    return idle[0]


async def test_runs_of_one_client_share_a_supervisor_and_see_nothing_of_each_other(engine: CodeMode) -> None:
    first = await js(engine, "globalThis.left = 'behind'; Deno.writeTextFileSync('left.txt', 'x'); export default 1")
    assert first.success, first.error
    supervisor = await idle_supervisor(engine)
    second = await js(engine, "export default [typeof globalThis.left, [...Deno.readDirSync('.')].length]")
    assert second.success, second.error
    assert second.return_value == ["undefined", 0]
    assert (await idle_supervisor(engine)) is supervisor, "a clean run of the same client cost its supervisor"
    assert supervisor.owner == "default/alice"


async def test_another_client_never_gets_a_supervisor_that_ran_someone_elses_code(engine: CodeMode) -> None:
    assert (await js(engine, "export default 1", client="alice")).success
    alices = await idle_supervisor(engine)
    bobs = await js(engine, "export default 2", client="bob")
    assert bobs.success, bobs.error
    after = await idle_supervisor(engine)
    assert after is not alices and after.owner == "default/bob"
    assert not alive(alices.process.pid), "alice's supervisor was left running after bob needed the slot"


async def test_a_run_whose_client_many_callers_share_costs_its_supervisor(engine: CodeMode) -> None:
    assert (await js(engine, "export default 1")).success
    shared = await js(engine, "export default 2", client="http")  # stateless HTTP without a session or token
    assert shared.success, shared.error
    after = await idle_supervisor(engine)
    assert after.owner is None, "a run of a shared client left its supervisor to serve others"


async def test_a_run_that_outlives_its_done_costs_its_supervisor(engine: CodeMode) -> None:
    """It forges its own done, then writes in a loop of synchronous ops, which ``Worker.terminate()`` does not stop:
    the host sees the run's isolate thread still there and kills the supervisor."""
    assert (await js(engine, "export default 0")).success
    before = await idle_supervisor(engine)
    code = (
        f"postMessage(new TextEncoder().encode({json.dumps(FAKE_DONE + chr(10))}));\n"
        "const f = Deno.openSync('grow', { write: true, create: true, append: true });\n"
        "const b = new Uint8Array(1);\nfor (;;) f.writeSync(b);"
    )
    forged = await js(engine, code)
    assert forged.success and forged.return_value == "forged"  # its own result is its own to forge
    after = await idle_supervisor(engine)
    assert after is not before and not alive(before.process.pid), "the supervisor kept serving after its run lived on"
    clean = await js(engine, "export default [...Deno.readDirSync('.')].map((e) => e.name)")
    assert clean.success and clean.return_value == []


async def test_a_message_only_the_supervisor_may_send_is_refused(engine: CodeMode) -> None:
    assert (await js(engine, "export default 0")).success
    before = await idle_supervisor(engine)
    ready = json.dumps({"op": "ready"}) + "\n"
    forged = await js(engine, f"postMessage(new TextEncoder().encode({json.dumps(ready)}));\nexport default 1")
    assert not forged.success and forged.error is not None
    assert forged.error.type == "ProtocolError" and "supervisor refused" in forged.error.message
    assert not alive(before.process.pid)
    assert (await js(engine, "export default 2")).return_value == 2


async def test_what_a_run_writes_on_fd_1_never_reaches_the_control_channel(engine: CodeMode) -> None:
    assert (await js(engine, "export default 0")).success
    before = await idle_supervisor(engine)
    lines = json.dumps(FAKE_DONE + "\n" + json.dumps({"op": "exit", "status": "x"}) + "\n" + '{"op":"ready"}\n')
    code = (
        f"import fs from 'node:fs';\nfs.writeSync(1, {lines});\n"
        "Deno.stdout.writeSync(new Uint8Array([10]));\nexport default 'real'"
    )
    result = await js(engine, code)
    assert result.success and result.return_value == "real"
    assert (await idle_supervisor(engine)) is before


@pytest.mark.parametrize("path", ["/proc/self/fd/3", "/proc/self/fd/4", "/dev/fd/4"])
async def test_a_run_cannot_open_the_control_channel(engine: CodeMode, path: str) -> None:
    code = (
        f"let r;\ntry {{ Deno.openSync({json.dumps(path)}, {{ read: true, write: true }}); r = 'opened'; }}\n"
        "catch (e) { r = `${e.name}: ${e.message}`; }\nexport default r"
    )
    result = await js(engine, code)
    assert result.success, result.error
    assert str(result.return_value).startswith("NotCapable: Requires read access"), result.return_value


async def test_a_run_cannot_write_on_the_control_channel_by_number(engine: CodeMode) -> None:
    code = (
        "import fs from 'node:fs';\nconst r = [];\nfor (const fd of [3, 4]) {\n"
        "  try { fs.writeSync(fd, '{\"op\":\"ready\"}\\n'); r.push('written'); }\n"
        "  catch (e) { r.push(e.code ?? e.name); }\n"
        "}\nexport default r"
    )
    result = await js(engine, code)
    assert result.success and result.return_value == ["EBADF", "EBADF"], result.return_value


async def test_a_run_that_moves_the_cwd_leaves_the_next_in_the_workspace(engine: CodeMode) -> None:
    moved = await js(engine, "Deno.mkdirSync('sub'); Deno.chdir('sub'); export default Deno.cwd()")
    assert moved.success and str(moved.return_value).endswith("/sub")
    workspace = str(moved.return_value).removesuffix("/sub")
    after = await js(engine, "export default [Deno.cwd(), [...Deno.readDirSync('.')].length]")
    assert after.return_value == [workspace, 0]


async def test_a_run_can_neither_read_nor_set_the_process_environment(engine: CodeMode) -> None:
    code = (
        "const r = [];\n"
        "for (const f of [() => Deno.env.get('PATH'), () => Deno.env.set('LEAK', '1'), () => Deno.env.toObject()]) {\n"
        "  try { f(); r.push('allowed'); } catch (e) { r.push(e.name); }\n"
        "}\nexport default [r, Object.keys(process.env)]"
    )
    result = await js(engine, code)
    assert result.success, result.error
    refused, names = result.return_value
    assert refused == ["NotCapable", "NotCapable", "NotCapable"]
    assert set(names) <= set(PROXY_ENV), names  # the egress forwarder's address, as in a process of its own


async def test_a_run_starts_no_isolate_of_its_own(engine: CodeMode) -> None:
    web = await js(
        engine,
        "let r; try { new Worker('data:,1', { type: 'module' }); r = 'started'; } catch (e) { r = e.name; }\n"
        "export default r",
    )
    assert web.success and web.return_value == "ReferenceError"
    assert (await js(engine, "export default 0")).success
    before = await idle_supervisor(engine)
    code = (
        "import { Worker } from 'node:worker_threads';\n"
        "new Worker('setInterval(() => {}, 50)', { eval: true });\nexport default 1"
    )
    nested = await js(engine, code, timeout_ms=3000)  # Node's worker keeps the run alive: the run times out
    assert not nested.success and nested.error is not None and nested.error.type == "TimeoutError"
    assert not alive(before.process.pid)


async def test_v8_flags_a_run_sets_reach_no_later_run(engine: CodeMode) -> None:
    flags = await js(
        engine, "import v8 from 'node:v8';\nv8.setFlagsFromString('--allow-natives-syntax');\nexport default 1"
    )
    assert flags.success, flags.error
    later = await js(engine, "let r; try { r = eval('%IsSmi(1)'); } catch (e) { r = e.name; }\nexport default r")
    assert later.success and later.return_value == "SyntaxError"


async def test_a_supervisor_is_replaced_after_its_run_cap(engine: CodeMode, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pooled, "MAX_SUPERVISED_RUNS", 3)
    assert (await js(engine, "export default 0", client="carol")).success
    first = await idle_supervisor(engine)
    runs = first.runs_served
    for _ in range(3 - runs - 1):
        assert (await js(engine, "export default 1", client="carol")).success
        assert (await idle_supervisor(engine)) is first
    assert (await js(engine, "export default 2", client="carol")).success
    assert (await idle_supervisor(engine)) is not first and not alive(first.process.pid)


async def test_a_timed_out_run_costs_its_supervisor(engine: CodeMode) -> None:
    assert (await js(engine, "export default 0")).success
    before = await idle_supervisor(engine)
    result = await js(engine, "for (;;) {}", timeout_ms=1500)
    assert not result.success and result.error is not None and result.error.type == "TimeoutError"
    assert not alive(before.process.pid)


def test_the_supervisor_runs_no_script_itself() -> None:
    """Everything a run sends reaches the supervisor as data (postMessage), never as code: its program has no
    eval, no dynamic import and no Function, and it imports nothing."""
    source = (Path(__file__).parents[2] / "src/mcp_code_mode/runners/deno_supervisor.ts").read_text(encoding="utf-8")
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("*", "/*", "//")))
    for construct in ("eval(", "import(", "Function(", "\nimport "):
        assert construct not in code, construct
