#!/usr/bin/env python3
"""Drive the executor server as a real MCP client would, and check one orchestration task end to end.

Starts ``python -m mcp_code_mode.executor_server`` over stdio with the ``mcp`` SDK's client, lists its
tools, runs a task script that calls the filesystem server many times (writes files, lists them,
reads them back, aggregates), archives one file with a call the shipped policy gates (``move_file``
asks for approval: this client answers the elicitation, printing the question, with "allow once") and
stores the result in the memory server, then prints the result with timings. Exits non-zero on any
failure.

    python scripts/debug_executor.py [--config mcp_servers.json] [--script task.py] [--files 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.types import TextContent

ROOT = Path(__file__).resolve().parent.parent

TASK = '''\
"""Write {n} JSON records, list them, read each back and aggregate; archive one; remember the result."""
import json
import time

filesystem.create_directory(path="demo")
for i in range({n}):
    record = {{"id": i, "name": f"item-{{i:02d}}", "value": i * i}}
    filesystem.write_file(path=f"demo/item_{{i:02d}}.json", content=json.dumps(record))

listing = filesystem.list_directory(path="demo")["content"]
names = sorted(line[len("[FILE] "):] for line in listing.splitlines() if line.startswith("[FILE] item_"))
total = 0
for name in names:
    total += json.loads(filesystem.read_text_file(path="demo/" + name)["content"])["value"]

summary = {{"files": len(names), "sum_of_values": total}}
try:  # a gated call: the person is asked (move_file "asks" in the shipped mcp_servers.json)
    filesystem.move_file(source="demo/" + names[0], destination=f"demo/archived-{{time.time_ns()}}-{{names[0]}}")
    summary["archived"] = names[0]
except ToolError as e:
    print("not archived:", e)
try:
    report = {{"name": "debug-run", "entityType": "report", "observations": [json.dumps(summary)]}}
    memory.create_entities(entities=[report])
except ToolError:
    memory.add_observations(observations=[{{"entityName": "debug-run", "contents": [json.dumps(summary)]}}])
print(f"aggregated {{len(names)}} files")
summary
'''


def _fail(message: str) -> int:
    print(f"FAIL: {message}", file=sys.stderr)
    return 1


async def main(args: argparse.Namespace) -> int:
    server_args = ["-m", "mcp_code_mode.executor_server"]
    if args.config:
        server_args += ["--config", str(args.config)]
    # The SDK passes a small allow-list of variables to the child; the server's own settings go along.
    settings = {k: v for k, v in os.environ.items() if k.startswith("CODE_MODE_")}
    params = StdioServerParameters(
        command=sys.executable, args=server_args, cwd=str(ROOT), env={**get_default_environment(), **settings}
    )

    questions: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        """The person's side of an approval: show the question, answer "allow once"."""
        message = getattr(params, "message", "")
        questions.append(message)
        print("\n--- the server asks for approval ---\n" + message + "\n--- answered: allow_once ---")
        return types.ElicitResult(action="accept", content={"decision": "allow_once"})

    started = time.perf_counter()
    async with Client(params, mode="legacy", elicitation_callback=approve) as client:
        connected = time.perf_counter() - started
        print(f"connected to {client.server_info.name if client.server_info else '?'} in {connected:.2f} s")

        tools = (await client.list_tools()).tools
        print(f"tools: {', '.join(t.name for t in tools)}")
        execute = next((t for t in tools if t.name == "execute_code"), None)
        if execute is None:
            return _fail("the server has no execute_code tool")
        print("execute_code description:\n  " + (execute.description or "").replace("\n", "\n  "))

        code = args.script.read_text(encoding="utf-8") if args.script else TASK.format(n=args.files)
        t0 = time.perf_counter()
        result = await client.call_tool(
            "execute_code", {"language": "python", "code": code, "description": "debug_executor task"}
        )
        elapsed = time.perf_counter() - t0

        text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
        print(f"\n--- execute_code answered in {elapsed * 1000:.0f} ms (round trip) ---\n{text}")
        data: dict[str, Any] = result.structured_content or {}
        print("\n--- structured result ---\n" + json.dumps(data, indent=2)[:4000])

        if result.is_error or not data.get("success"):
            return _fail(f"the script failed: {data.get('error')}")
        if args.script is None:
            expected: dict[str, Any] = {"files": args.files, "sum_of_values": sum(i * i for i in range(args.files))}
            value = data.get("returnValue")
            expected["archived"] = "item_00.json"
            gated = [c for c in data.get("calls", []) if c.get("decision") in ("approved", "refused", "denied")]
            if gated:  # move_file was gated by the servers file's policy: asked once, approved, made
                if len(questions) != 1 or gated[0]["decision"] != "approved":
                    return _fail(f"expected one approval of move_file, got {gated} after {len(questions)} questions")
            if value != expected:
                return _fail(f"expected {expected}, got {value}")
            if data.get("toolCalls", 0) < 2 * args.files + 2:
                return _fail(f"expected at least {2 * args.files + 2} tool calls, got {data.get('toolCalls')}")
        approved = f", {len(questions)} approved by the person" if questions else ""
        print(
            f"\nOK: {data.get('toolCalls')} tool calls{approved} in one execute_code call; "
            f"server-side {data.get('executionTime')} ms, round trip {elapsed * 1000:.0f} ms, "
            f"total with start-up {time.perf_counter() - started:.2f} s"
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="servers file (default: the server's own default)")
    parser.add_argument("--script", type=Path, help="run this script instead of the built-in task")
    parser.add_argument("--files", type=int, default=20, help="records the built-in task writes (default: 20)")
    sys.exit(anyio.run(main, parser.parse_args()))
