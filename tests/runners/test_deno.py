"""The deno runner: JavaScript and TypeScript against the real filesystem, memory and fixture servers."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import PackageError
from mcp_code_mode.runners._deno_errors import explain_death
from mcp_code_mode.runners.base import CheckRequest
from mcp_code_mode.runners.deno import MAX_HEAP_MB, DenoRunner, _worker_key  # pyright: ignore[reportPrivateUsage]

from ..conftest import alive, make_config
from ..fixtures.loopback import Loopback, loopback_server

pytestmark = pytest.mark.anyio


def isolates(engine: CodeMode) -> bool:
    """Whether this engine's deno runner runs each run in an isolate of a supervisor (``CODE_MODE_DENO_ISOLATES``)."""
    return engine.config.settings.deno_isolates


@pytest.fixture(scope="module")
def http() -> Iterator[Loopback]:
    with loopback_server() as server:
        yield server


async def test_console_output_is_captured_and_export_default_is_the_return_value(engine: CodeMode) -> None:
    code = "console.log('hello', 1, { a: [1, 2] });\nconsole.error('to stderr');\nexport default { sum: 1 + 2 };"
    result = await engine.execute(code, "javascript")
    assert result.success, result.error
    assert result.output == "hello 1 { a: [ 1, 2 ] }\nto stderr\n"
    assert result.return_value == {"sum": 3}
    assert (result.runner, result.language) == ("deno", "javascript")
    nothing = await engine.execute("const x = 1;", "js")
    assert nothing.success and nothing.return_value is None and nothing.output == ""


async def test_the_seeds_typescript_example_runs_as_written(engine: CodeMode) -> None:
    code = """interface User {
name: string;
age: number;
email?: string;
}
const users: User[] = [
{ name: "Alice", age: 30, email: "alice@example.com" },
{ name: "Bob", age: 25 }
];
users.forEach(user => {
console.log(`${user.name} (${user.age}): ${user.email || 'No email'}`);
});"""
    result = await engine.execute(code, "typescript")
    assert result.success, result.error
    assert result.output == "Alice (30): alice@example.com\nBob (25): No email\n"
    assert result.language == "typescript"


async def test_type_errors_do_not_stop_a_run(engine: CodeMode) -> None:
    result = await engine.execute("const n: number = 'not a number';\nexport default n;", "ts")
    assert result.success, result.error
    assert result.return_value == "not a number"


async def test_a_typescript_script_orchestrates_filesystem_and_memory(
    engine: CodeMode, shared_dirs: dict[str, Path]
) -> None:
    code = """
interface Order { id: number; amount: number }
await filesystem.create_directory({ path: "ts-orders" });
for (let i = 0; i < 4; i++) {
  const order: Order = { id: i, amount: 10 * i };
  await filesystem.write_file({ path: `ts-orders/o${i}.json`, content: JSON.stringify(order) });
}
const listing = await filesystem.list_directory({ path: "ts-orders" });
const names = listing.content.split("\\n").map((line) => line.split(" ")[1]);
const orders = await Promise.all(
  names.map(async (n) => JSON.parse((await filesystem.read_text_file({ path: `ts-orders/${n}` })).content) as Order),
);
const total = orders.reduce((sum, o) => sum + o.amount, 0);
const entity = { name: "ts-orders", entityType: "summary", observations: [`total ${total}`] };
await memory.create_entities({ entities: [entity] });
const graph = await callTool("memory", "open_nodes", { names: ["ts-orders"] });
console.log("total", total);
export default { files: names.length, total, observations: graph.entities[0].observations };
"""
    result = await engine.execute(code, "typescript")
    assert result.success, result.error
    assert result.return_value == {"files": 4, "total": 60, "observations": ["total 60"]}
    assert result.output == "total 60\n"
    assert result.tool_calls == 1 + 4 + 1 + 4 + 1 + 1
    assert (shared_dirs["files"] / "ts-orders" / "o3.json").read_text(encoding="utf-8") == '{"id":3,"amount":30}'


async def test_results_are_structured_content_or_parsed_text(engine: CodeMode) -> None:
    code = """
export default [
  await fixture.stats({ values: [1, 2, 3] }),
  await fixture.echo_json({ value: "v" }),
  await fixture.convert({ amount: 10, unit: "mi" }),
  await fixture.add({ a: 2, b: 3 }),
];"""
    result = await engine.execute(code, "js")
    assert result.success, result.error
    assert result.return_value == [
        {"count": 3, "total": 6.0, "mean": 2.0},
        {"value": "v", "ok": True},
        {"result": "16.093 km"},
        {"result": 5},
    ]


async def test_a_tool_error_is_a_tool_error_at_the_line_of_the_call(engine: CodeMode) -> None:
    code = """
try {
  await filesystem.read_text_file({ path: "/etc/passwd" });
} catch (e) {
  console.log("refused:", e instanceof ToolError, e.name, e.server, e.tool, e.message.includes("outside"));
}
const x: number = 1;
await fixture.fail({ message: "the server said no" });
"""
    result = await engine.execute(code, "typescript")
    assert result.output == "refused: true ToolError filesystem read_text_file true\n"
    assert not result.success and result.error is not None
    assert result.error.type == "ToolError"
    assert "the server said no" in result.error.message
    assert result.error.line == 8
    assert result.error.traceback is not None and "<script>:8:" in result.error.traceback


async def test_unknown_tools_and_bad_arguments_are_refused_with_their_reason(engine: CodeMode) -> None:
    code = """
const out = [];
for (const call of [
  () => callTool("nope", "x", {}),
  () => callTool("fixture", "nope", {}),
  () => fixture.add([1, 2]),
  () => fixture.add({ a: 1n, b: 2 }),
]) {
  try { await call(); } catch (e) { out.push(`${e.name}: ${e.message}`); }
}
export default out;
"""
    result = await engine.execute(code, "js")
    assert result.success, result.error
    errors = result.return_value
    assert "ToolError: unknown server 'nope'" in errors[0]
    assert "ToolError: server 'fixture' has no tool 'nope'" in errors[1]
    assert errors[2] == 'TypeError: the arguments of fixture.add must be an object, e.g. { path: "a.txt" }'
    assert errors[3].startswith("TypeError: the arguments of fixture.add must be JSON values")
    assert result.tool_calls == 0  # refused before reaching a server


async def test_tools_added_at_run_time_are_defined_even_with_awkward_names(engine: CodeMode) -> None:
    added = await engine.execute("await fixture.add_tool({ name: 'delete' });", "js")
    assert added.success, added.error
    code = "export default [Object.keys(fixture).includes('delete'), await fixture.delete({ text: 'hi' })];"
    with anyio.fail_after(30):
        while not (result := await engine.execute(code, "js")).success:
            await anyio.sleep(0.1)  # the server announces the new tool; the pool refreshes its index
    assert result.return_value == [True, {"result": "delete:hi"}]
    assert '  "delete"(args?: DeleteArgs): Promise<DeleteResult>;' in engine.stubs("ts", ["fixture"])


async def test_runtime_error_lines_point_into_the_users_typescript(engine: CodeMode) -> None:
    code = (
        "interface A {\n  x: number;\n}\ntype B = string;\n\n"
        "function f(v: number): number {\n  throw new RangeError(`bad ${v}`);\n}\nf(1);\n"
    )
    result = await engine.execute(code, "ts")
    assert result.error is not None
    assert (result.error.type, result.error.message, result.error.line) == ("RangeError", "bad 1", 7)
    assert result.error.traceback == "RangeError: bad 1\n    at f (<script>:7:9)\n    at <script>:9:1"


@pytest.mark.parametrize(
    ("code", "language", "line"), [("const a = 1;\nlet y = ;\n", "js", 2), ("let x: = 3;", "ts", 1)]
)
async def test_syntax_errors_report_line_and_column(engine: CodeMode, code: str, language: str, line: int) -> None:
    result = await engine.execute(code, language)
    assert result.error is not None
    assert result.error.type == "SyntaxError"
    assert result.error.line == line
    assert f"(line {line}, column" in result.error.message
    assert "base64" not in (result.error.traceback or "")


async def test_un_awaited_promises_and_timers_finish_before_the_run_ends(engine: CodeMode) -> None:
    code = """
async function main() {
  const r = await fixture.add({ a: 20, b: 22 });
  setTimeout(() => console.log("timer", r.result), 50);
}
main();
console.log("first");
"""
    result = await engine.execute(code, "js")
    assert result.success, result.error
    assert result.output == "first\ntimer 42\n"


async def test_an_unhandled_rejection_fails_the_run(engine: CodeMode) -> None:
    result = await engine.execute("console.log('a');\nPromise.reject(new TypeError('late'));\n", "js")
    assert not result.success and result.error is not None
    assert (result.error.type, result.error.message, result.error.line) == ("TypeError", "late", 2)
    assert result.output == "a\n"


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("console.log('waiting');\nawait new Promise(() => {});\n", 2),
        ("console.log('waiting');\nexport default new Promise(() => {});\n", None),
    ],
    ids=["top-level-await", "default-export"],
)
async def test_a_promise_that_never_settles_ends_the_run_with_an_error(
    engine: CodeMode, code: str, line: int | None
) -> None:
    started = time.monotonic()
    result = await engine.execute(code, "js", timeout_ms=20_000)
    assert time.monotonic() - started < 10
    assert not result.success and result.error is not None
    assert "never settles" in result.error.message
    # In isolate mode the run finds a stalled top-level await itself, and does not know the await's line.
    assert result.error.line == (None if isolates(engine) else line)
    assert result.output == "waiting\n"


async def test_exit_ends_the_run_with_its_status(engine: CodeMode) -> None:
    ok = await engine.execute("console.log('a');\nDeno.exit(0);\nconsole.log('b');", "js")
    assert ok.success and ok.output == "a\n"
    failed = await engine.execute("console.log('a');\nprocess.exit(3);", "js")
    assert not failed.success and failed.error is not None
    assert failed.error.message == "the script exited with code 3"


@pytest.mark.parametrize(
    "code", ["while (true) {}", "setInterval(() => {}, 10);", "await new Promise((r) => setTimeout(r, 1e7));"]
)
async def test_runaway_scripts_are_killed_at_the_timeout_and_the_next_run_works(engine: CodeMode, code: str) -> None:
    started = time.monotonic()
    result = await engine.execute(code, "js", timeout_ms=1000)
    assert time.monotonic() - started < 2.5
    assert not result.success and result.error is not None and result.error.type == "TimeoutError"
    after = await engine.execute("console.log('alive')", "js")
    assert after.success and after.output == "alive\n"


async def test_output_is_capped_and_marked_truncated(engine: CodeMode) -> None:
    cap = engine.config.settings.max_output_chars
    result = await engine.execute(f"for (let i = 0; i < 20; i++) console.log('x'.repeat({cap // 10}));", "js")
    assert result.success and result.truncated
    assert len(result.output) == cap
    assert not (await engine.execute("console.log('ok')", "js")).truncated


async def test_a_return_value_larger_than_the_output_cap_is_cut_to_its_first_characters_of_json(
    engine: CodeMode,
) -> None:
    cap = engine.config.settings.max_output_chars
    result = await engine.execute("export default { big: 'x'.repeat(50_000_000) };", "js", cache="off")
    assert result.success, result.error
    assert result.truncated
    assert result.return_value == '{"big":"' + "x" * (cap - 8)


async def test_printed_output_reaches_the_host_while_the_script_computes(engine: CodeMode) -> None:
    arrived: list[tuple[float, str]] = []

    async def on_output(text: str) -> None:
        arrived.append((time.monotonic(), text))

    code = 'console.log("a"); const t = Date.now(); while (Date.now() - t < 3000) {}; console.log("b")'
    result = await engine.execute(code, "js", on_output=on_output, cache="off")
    ended = time.monotonic()
    assert result.success, result.error
    assert arrived[0][1] == "a\n"
    assert ended - arrived[0][0] > 2.5  # it came at the start of the busy loop, not with "b" at its end
    assert result.output == "a\nb\n"


async def test_a_script_that_runs_out_of_memory_reports_memory_error_naming_the_heap_limit(engine: CodeMode) -> None:
    code = "const a = []; for (;;) a.push(new Array(1e6).fill(1.5));"
    result = await engine.execute(code, "js", timeout_ms=120_000, cache="off")
    assert not result.success and result.error is not None
    assert result.error.type == "MemoryError"
    assert f"{MAX_HEAP_MB} MB" in result.error.message
    assert "GC" not in result.error.message
    after = await engine.execute("console.log('alive')", "js")
    assert after.success and after.output == "alive\n"


def test_a_deno_death_is_explained_by_what_it_printed_last() -> None:
    oom = "<--- Last few GCs --->\n[2:0x1] 2327 ms: Mark-Compact\n# Fatal JavaScript out of memory: Reached heap limit"
    error = explain_death(oom, 1024)
    assert error is not None and error.type == "MemoryError" and "1024 MB" in error.message
    process = explain_death("# Fatal process out of memory: Failed to reserve virtual memory", 512)
    assert process is not None and process.type == "MemoryError" and "512 MB" in process.message
    never = "error: Top-level await promise never resolved\n    at data:application/javascript;base64,QQ==:2:1"
    waited = explain_death(never, 1024)
    assert waited is not None and (waited.type, waited.line) == ("Error", 2)
    assert "never settles" in waited.message
    assert explain_death("error: Uncaught (in promise) Error: x", 1024) is None
    assert explain_death("", 1024) is None


async def test_an_unknown_tool_of_a_server_names_the_server_and_its_tools(engine: CodeMode) -> None:
    code = """
let message = "";
try { await fixture.no_such_tool({}); } catch (e) { message = `${e.name}: ${e.message}`; }
export default [message, Object.keys(fixture).includes("no_such_tool"), typeof fixture.then];
"""
    result = await engine.execute(code, "js")
    assert result.success, result.error
    message, listed, then = result.return_value
    assert message.startswith("ToolError: server 'fixture' has no tool 'no_such_tool' (its tools: ")
    assert "add" in message.split("(its tools: ")[1].rstrip(")").split(", ")
    assert (listed, then) == (False, "undefined")
    assert result.tool_calls == 0


async def test_every_way_of_printing_is_captured_without_disturbing_the_bridge(engine: CodeMode) -> None:
    code = """
Deno.stdout.writeSync(new TextEncoder().encode("deno stdout\\n"));
await Deno.stderr.write(new TextEncoder().encode("deno stderr\\n"));
process.stdout.write("process stdout\\n");
process.stderr.write("process stderr\\n");
console.info("info"); console.warn("warn"); console.table([{ a: 1 }]);
export default await fixture.add({ a: 1, b: 1 });
"""
    result = await engine.execute(code, "js")
    assert result.success, result.error
    assert result.output.startswith("deno stdout\ndeno stderr\nprocess stdout\nprocess stderr\ninfo\nwarn\n")
    assert "│ a │" in result.output
    assert result.return_value == {"result": 2}


async def test_the_workspace_is_the_current_directory_and_its_files_are_listed(engine: CodeMode) -> None:
    code = """const fs = require('fs');
fs.writeFileSync('output.json', JSON.stringify({status: 'ok'}));
console.log(fs.readFileSync('output.json', 'utf-8'));
await Deno.mkdir("sub");
await Deno.writeTextFile("sub/notes.txt", "hi");
"""
    result = await engine.execute(code, "js")
    assert result.success, result.error
    assert result.output == '{"status":"ok"}\n'
    assert [(f.path, f.size) for f in result.files] == [("output.json", 15), ("sub/notes.txt", 2)]


async def test_each_run_starts_fresh(engine: CodeMode) -> None:
    first = await engine.execute("globalThis.leftBehind = 1;\nDeno.writeTextFileSync('left.txt', 'x');", "js")
    assert first.success, first.error
    read = "(() => { try { Deno.readTextFileSync('left.txt'); return 'found'; } catch (e) { return e.name; } })()"
    second = await engine.execute(f"export default [typeof leftBehind, {read}]", "js")
    assert second.return_value == ["undefined", "NotFound"]


async def test_builtins_are_importable_with_or_without_the_node_prefix(engine: CodeMode) -> None:
    code = (
        "import path from 'path';\nimport { createHash } from 'node:crypto';\nconst util = require('node:util');\n"
        "export default [path.join('a', 'b'), createHash('sha256').update('x').digest('hex').slice(0, 8), "
        "util.format('%d', 7)];"
    )
    result = await engine.execute(code, "ts")
    assert result.success, result.error
    assert result.return_value == ["a/b", "2d711642", "7"]


async def test_the_seeds_axios_example_runs_as_written_against_a_loopback_server(
    engine: CodeMode, http: Loopback
) -> None:
    code = f"""const axios = require('axios');
const response = await axios.get('{http.url}/');
console.log(`Status: ${{response.status}}`);
console.log(`Headers:`, response.headers);"""
    result = await engine.execute(code, "javascript", timeout_ms=120_000)
    assert result.success, result.error
    assert result.output.startswith("Status: 200\nHeaders: ")
    assert "'x-test': 'yes'" in result.output
    assert http.connections[-1] == "GET / HTTP/1.1"


async def test_allowed_packages_load_by_bare_name_or_npm_specifier(engine: CodeMode, http: Loopback) -> None:
    code = (
        "import axios from 'axios';\nimport ax2 from 'npm:axios@1';\n"
        f"const r = await axios.get('{http.url}/data');\nexport default [r.data, ax2 === axios];"
    )
    result = await engine.execute(code, "typescript", packages=["axios"], timeout_ms=120_000)
    assert result.success, result.error
    assert result.return_value == [{"hello": "world"}, True]


async def test_packages_outside_the_allow_list_are_refused_before_running(engine: CodeMode) -> None:
    for code in ["import pad from 'left-pad';", "const x = require('npm:left-pad');"]:
        with pytest.raises(PackageError, match="npm package 'left-pad' not allowed"):
            await engine.execute(code, "js")
    with pytest.raises(PackageError, match="'left-pad' is not in the allowed packages"):
        await engine.execute("1", "js", packages=["left-pad"])
    with pytest.raises(PackageError, match="'axios' is not in the allowed packages"):
        await engine.execute("print(1)", "python", packages=["axios"])


async def test_require_of_a_module_that_was_not_named_literally_explains_itself(engine: CodeMode) -> None:
    result = await engine.execute("const name = 'ax' + 'ios';\nrequire(name);", "js")
    assert result.error is not None
    assert "Cannot find module 'axios'" in result.error.message and "string literal" in result.error.message
    assert result.error.line == 2


async def test_get_tool_stubs_in_typescript_declares_what_the_sandbox_defines(engine: CodeMode) -> None:
    declarations = engine.stubs("typescript")
    assert engine.stubs("js") == declarations
    names = "['filesystem', 'memory', 'fixture'].map((n) => [n, Object.keys(globalThis[n])])"
    code = f"export default Object.fromEntries({names});"
    result = await engine.execute(code, "js")
    assert result.success, result.error
    for namespace, names in result.return_value.items():
        for name in names:
            declared = (f"\n  {name}(args", f"\n  {json.dumps(name)}(args")  # reserved words are quoted
            assert any(d in declarations for d in declared), f"{namespace}.{name} is not declared"
    assert sum(len(v) for v in result.return_value.values()) == len(engine.index.tools())


async def test_type_errors_are_found_by_deno_check_at_the_users_lines(engine: CodeMode) -> None:
    runner = engine.runners["deno"]
    assert isinstance(runner, DenoRunner)
    code = (
        "interface User { name: string }\n"
        "const u: User = { name: 'a' };\n"
        "const r = await filesystem.read_text_file({ path: 3 });\n"
        "const n: number = r.content;\n"
        "await fixture.no_such_tool({});\n"
        "try { await memory.read_graph(); } catch (e) { console.log(e.message, u); }\n"
    )
    request = CheckRequest(
        code=code,
        language="typescript",
        index=engine.index,
        declarations=engine.stubs("typescript"),
        requirements=(),
        package_imports=(),
        max_bytes=1_000_000,
    )
    findings = await runner.check(request)
    assert [(f["line"], f["message"].split(":")[0]) for f in findings] == [(3, "TS2322"), (4, "TS2322"), (5, "TS2339")]
    assert "Type 'number' is not assignable to type 'string'" in findings[0]["message"]


def processes_in(root: Path) -> set[int]:
    """Pids of the processes whose working directory is inside ``root`` (workers without namespaces run in
    a host workspace) or whose command line names a path inside it (a sandboxed worker's Deno cache)."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwd = (entry / "cwd").readlink()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            mine = cwd.is_relative_to(root) or str(root).encode() in cmdline
            if mine and alive(int(entry.name)):
                found.add(int(entry.name))
    return found


@pytest.mark.parametrize("settle", [True, False], ids=["warm-pool", "mid-refill"])
async def test_closing_the_engine_kills_every_deno_worker_and_removes_workspaces(tmp_path: Path, settle: bool) -> None:
    runs = tmp_path / "runs"
    config = make_config({}, workspace_dir=runs, pool_size=2, deno_dir=tmp_path / "deno")
    async with CodeMode(config) as cm:
        runner = cm.runners["deno"]
        assert isinstance(runner, DenoRunner)
        for _ in range(3):
            assert (await cm.execute("console.log('x')", "ts", cache="off")).success
        if settle:
            with anyio.fail_after(30):
                while runner.pool.warm < 1 or runner.pool.starting:  # one or two: back-to-back runs grow the pool
                    await anyio.sleep(0.05)
        with anyio.fail_after(30):  # mid-refill: the replacement of the last run's worker is on its way
            while not processes_in(tmp_path):
                await anyio.sleep(0.01)
    # Closed while finished workers were being reaped and new ones started: nothing may be left.
    with anyio.fail_after(10):
        while processes_in(tmp_path):
            await anyio.sleep(0.05)
    assert not runs.exists() or list(runs.iterdir()) == []


async def test_the_worker_program_is_compiled_once_for_this_deno_and_these_sources(tmp_path: Path) -> None:
    """A first run does not wait for ``deno cache`` when the cache already holds the worker program for this
    Deno and these sources (a stamp says which), its V8 code cache included; another stamp, or no compiled
    modules, compiles it again."""
    deno_dir = tmp_path / "deno"
    config = make_config({}, workspace_dir=tmp_path / "runs", deno_dir=deno_dir)
    stamp = deno_dir / "mcp-code-mode-worker.stamp"
    async with CodeMode(config) as cm:
        runner = cm.runners["deno"]
        assert isinstance(runner, DenoRunner)
        assert (await cm.execute("console.log(1)", "javascript", cache="off")).success
        key = _worker_key(runner.deno)
    assert stamp.read_text(encoding="utf-8") == key
    compiled = {p: p.stat().st_mtime_ns for p in (deno_dir / "gen").rglob("*") if p.is_file()}
    assert compiled, "deno cache compiled nothing"
    assert list(deno_dir.glob("v8_code_cache*")), "no V8 code cache of the worker program (the host's one run of it)"

    async with CodeMode(config) as cm:  # the same Deno and sources: nothing compiled again
        assert (await cm.execute("console.log(1)", "javascript", cache="off")).success
    assert {p: p.stat().st_mtime_ns for p in (deno_dir / "gen").rglob("*") if p.is_file()} == compiled

    stamp.write_text("another deno or other sources", encoding="utf-8")
    shutil.rmtree(deno_dir / "gen")
    async with CodeMode(config) as cm:
        assert (await cm.execute("console.log(1)", "javascript", cache="off")).success
    assert stamp.read_text(encoding="utf-8") == key
    assert any(p.is_file() for p in (deno_dir / "gen").rglob("*"))
