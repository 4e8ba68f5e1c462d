"""The deno worker (deno_worker.ts, with worker_runtime.ts) over its line protocol, without a host.

Each test starts the real worker program and speaks the bridge protocol to it directly, so that what
the worker itself sends is what is checked (the host caps and checks again; see ``bridge.host``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

import mcp_code_mode.runners
from mcp_code_mode.runners.deno import find_deno

pytestmark = pytest.mark.anyio

RUNNERS = Path(mcp_code_mode.runners.__file__).parent
WORKER = RUNNERS / "deno_worker.ts"


class Worker:
    """One deno worker process and its two pipes."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.stdin = process.stdin
        self.stdout = BufferedByteReceiveStream(process.stdout)

    async def send(self, message: dict[str, Any]) -> None:
        await self.stdin.send((json.dumps(message) + "\n").encode())

    async def receive(self) -> dict[str, Any]:
        line = await self.stdout.receive_until(b"\n", 256 * 1024 * 1024)
        message = json.loads(line)
        assert isinstance(message, dict)
        return message

    async def run(self, code: str, **fields: Any) -> dict[str, Any]:
        message = {
            "op": "run",
            "code": code,
            "language": "typescript",
            "max_output": 100_000,
            "allow_network": False,
            "functions": {},
            "packages": [],
        }
        await self.send({**message, **fields})
        return message

    async def done(self, on: Callable[[dict[str, Any]], None] = lambda m: None) -> dict[str, Any]:
        """Messages until the run's done (each given to ``on``); the done."""
        while (message := await self.receive())["op"] != "done":
            on(message)
        return message


@pytest.fixture(scope="module")
def deno_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deno")


@pytest.fixture
def start(tmp_path: Path, deno_dir: Path) -> Callable[[], Any]:
    @asynccontextmanager
    async def started() -> AsyncGenerator[Worker]:
        deno = find_deno()
        assert deno is not None
        workspace = tmp_path / f"ws{time.monotonic_ns()}"
        workspace.mkdir()
        argv = [deno, "run", "--quiet", "--no-prompt", "--no-config", "--no-lock", "--no-remote"]
        argv += ["--allow-read=.", "--allow-write=.", "--allow-net", str(WORKER)]
        env = {"PATH": os.environ.get("PATH", ""), "DENO_DIR": str(deno_dir), "NO_COLOR": "1"}
        process = await anyio.open_process(argv, cwd=workspace, env=env)
        try:
            worker = Worker(process)
            with anyio.fail_after(60):
                assert await worker.receive() == {"op": "ready"}  # the warm-up's output is never sent
            yield worker
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                await process.wait()
                await process.aclose()

    return started


async def test_a_return_value_larger_than_the_cap_is_cut_to_its_first_characters_of_json(start: Any) -> None:
    async with start() as worker:
        await worker.run("export default { big: 'x'.repeat(5_000_000) };", max_output=1000)
        with anyio.fail_after(30):
            done = await worker.done()
    assert done["success"], done
    assert done["returnValue"] == '{"big":"' + "x" * 992
    assert done["dropped"] == 1  # the run is marked truncated


@pytest.mark.parametrize(
    ("code", "value"),
    [
        ("export default 'x'.repeat(100);", "x" * 100),
        ("export default [1, { a: null }];", [1, {"a": None}]),
        ("export default 10n;", "10n"),  # not JSON: shown as Deno.inspect shows it
        ("export default Symbol('s');", "Symbol(s)"),
    ],
)
async def test_a_return_value_within_the_cap_is_sent_as_json_or_as_shown(start: Any, code: str, value: Any) -> None:
    async with start() as worker:
        await worker.run(code, max_output=1000)
        with anyio.fail_after(30):
            done = await worker.done()
    assert (done["returnValue"], done["dropped"]) == (value, 0)


async def test_printed_output_is_sent_while_the_script_computes_synchronously(start: Any) -> None:
    code = "console.log('a'); const t = Date.now(); while (Date.now() - t < 2000) {} console.log('b');"
    seen: list[tuple[float, str]] = []
    async with start() as worker:
        await worker.run(code)
        with anyio.fail_after(30):
            done = await worker.done(lambda m: seen.append((time.monotonic(), m["data"])))
        ended = time.monotonic()
    assert done["success"], done
    assert seen[0][1] == "a\n"
    assert ended - seen[0][0] > 1.5  # "a" arrived before the busy loop ended, not with "b"
    assert "".join(data for _, data in seen) == "a\nb\n"


async def test_output_printed_just_before_the_script_idles_is_sent_by_the_timer(start: Any) -> None:
    code = "console.log('a'); console.log('b'); await new Promise((r) => setTimeout(r, 2000)); console.log('c');"
    seen: list[tuple[float, str]] = []
    async with start() as worker:
        await worker.run(code)
        with anyio.fail_after(30):
            await worker.done(lambda m: seen.append((time.monotonic(), m["data"])))
        ended = time.monotonic()
    early = "".join(data for when, data in seen if ended - when > 1.5)
    assert early == "a\nb\n"


async def test_a_server_that_is_not_available_throws_its_reason_on_any_use(start: Any) -> None:
    code = """
const out: string[] = [];
for (const use of [() => (down as any).read_file, () => (down as any).read_file({}), () => Object.keys(down).length]) {
  try { out.push(String(use())); } catch (e) { out.push(`${(e as Error).name}: ${(e as Error).message}`); }
}
try { await callTool("down", "read_file", {}); } catch (e) { out.push(`${(e as Error).name}: ${(e as Error).message}`) }
out.push(String((down as any).then), String(typeof (down as any)[Symbol.iterator]));
export default out;
"""
    async with start() as worker:
        await worker.run(code, functions={"up": ["x"]}, unavailable={"down": "connection refused"})
        with anyio.fail_after(30):
            done = await worker.done()
    assert done["success"], done
    refused = "ToolError: server 'down' is not available: connection refused"
    assert done["returnValue"] == [refused, refused, "0", refused, "undefined", "undefined"]


async def test_an_unknown_function_of_a_known_namespace_names_the_namespace_and_its_tools(start: Any) -> None:
    code = """
const out: unknown[] = [];
try { await (fs as any).nope({}); } catch (e) { out.push(`${(e as Error).name}: ${(e as Error).message}`); }
out.push(typeof (fs as any).nope, typeof fs.read, (fs as any).then === undefined, Object.keys(fs));
out.push(JSON.stringify(fs), "read" in fs, "nope" in fs, (await Promise.resolve(fs)) === fs);
console.log(fs);
export default out;
"""
    async with start() as worker:
        await worker.run(code, functions={"fs": ["read", "write"]})
        output: list[str] = []
        with anyio.fail_after(30):
            done = await worker.done(lambda m: output.append(m["data"]))
    assert done["success"], done
    assert done["returnValue"] == [
        "ToolError: server 'fs' has no tool 'nope' (its tools: read, write)",
        "function",
        "function",
        True,
        ["read", "write"],
        "{}",
        True,
        False,
        True,
    ]
    assert "read" in "".join(output)


async def test_a_tool_call_waits_for_the_answer_with_its_own_id(start: Any) -> None:
    async with start() as worker:
        await worker.run("export default await fs.read({ path: 'a' });", functions={"fs": ["read"]})
        with anyio.fail_after(30):
            call = await worker.receive()
            expected = {"op": "call", "id": 1, "server": "fs", "tool": "read", "arguments": {"path": "a"}}
            assert call == {**expected, "line": 1}  # the script's line that made it
            await worker.send({"op": "result", "id": 7, "value": "not this one"})
            await worker.send({"op": "result", "id": 1, "value": {"content": "A"}})
            done = await worker.done()
    assert done["returnValue"] == {"content": "A"}


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"max_output": "many"}, "max_output"),
        ({"functions": {"fs": "read"}}, "functions.fs"),
        ({"unavailable": {"fs": 1}}, "unavailable.fs"),
        ({"packages": [{"name": "axios"}]}, "packages"),
    ],
)
async def test_a_run_message_that_is_not_valid_fails_the_run_naming_the_field(
    start: Any, fields: dict[str, Any], named: str
) -> None:
    async with start() as worker:
        await worker.run("export default 1;", **fields)
        with anyio.fail_after(30):
            done = await worker.done()
    assert not done["success"]
    assert done["error"]["message"].startswith(f"the run message is not valid: {named}")
