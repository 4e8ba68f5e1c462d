"""mcp-code-mode as the single tool of an agent loop, through the library API.

    .venv/bin/python examples/agent_loop.py [--config mcp_servers.json]

The loop is the usual one: send the conversation and the tool definitions to the model; when it asks
for a tool, run it and append the result; stop when it answers in text. Here there is ONE tool,
``execute_code``, backed by ``CodeMode.execute``: every tool of every configured MCP server is a
function inside the script the model writes.

THE MODEL IS FAKE. ``ScriptedModel`` stands in for an LLM so that the example runs offline and
deterministically: it plays back turns written in advance (one script, then an answer built from the
tool result it was given). Replace it with your provider's client; the loop and the tool stay the same.
The script and the run are real: the configured servers are started, and the script runs in the sandbox.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from mcp_code_mode import CodeMode, RunResult

MAX_TURNS = 8

Message = dict[str, Any]


def execute_code_tool(cm: CodeMode) -> dict[str, Any]:
    """The tool definition to give the model, in the JSON-Schema shape most LLM APIs take."""
    return {
        "name": "execute_code",
        "description": (
            "Run a Python script. Every tool of the connected MCP servers is a function in it, e.g. "
            "filesystem.read_text_file(path=...). Print what you need; the last expression is returned.\n\n"
            "Stubs:\n" + cm.stubs("python")
        ),
        "input_schema": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the Python script"}},
            "required": ["code"],
        },
    }


def tool_result_message(call_id: str, result: RunResult) -> Message:
    """What goes back to the model: output, return value and error, compact."""
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": json.dumps(
            {
                "success": result.success,
                "output": result.output,
                "returnValue": result.return_value,
                "error": result.error.model_dump() if result.error else None,
            }
        ),
    }


# ----- FAKE MODEL: replace with a real LLM client -------------------------------------------------


Turn = Callable[[list[Message]], Message]


@dataclass
class ScriptedModel:
    """A FAKE model for this example: plays back pre-written turns. It never sees the tools it is given."""

    turns: list[Turn]
    calls: int = 0
    seen_tools: list[str] = field(default_factory=list)

    def respond(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        self.seen_tools = [t["name"] for t in tools]
        turn = self.turns[self.calls]
        self.calls += 1
        return turn(messages)


SALES_SCRIPT = """
root = filesystem.list_allowed_directories()["content"].splitlines()[-1].strip()
filesystem.write_file(path=root + "/sales.csv", content="region,amount\\nnorth,120\\nsouth,80\\nnorth,45.5\\n")
totals = {}
for line in filesystem.read_text_file(path=root + "/sales.csv")["content"].splitlines()[1:]:
    region, amount = line.split(",")
    totals[region] = totals.get(region, 0) + float(amount)
print("regions:", sorted(totals))
totals
"""


def first_turn(_: list[Message]) -> Message:
    """The fake model 'decides' to write one script that does the whole task."""
    return {
        "role": "assistant",
        "tool_calls": [{"id": "call-1", "name": "execute_code", "arguments": {"code": SALES_SCRIPT}}],
    }


def second_turn(messages: list[Message]) -> Message:
    """The fake model reads the tool result it got and answers from it (not from a canned text)."""
    result = json.loads(messages[-1]["content"])
    if not result["success"]:
        return {"role": "assistant", "content": f"The script failed: {result['error']['message']}"}
    totals: dict[str, float] = result["returnValue"]
    best = max(totals, key=lambda region: totals[region])
    return {"role": "assistant", "content": f"{best} sold the most: {totals[best]:g} (all regions: {totals})"}


# ----- the agent loop ----------------------------------------------------------------------------


async def run_agent(cm: CodeMode, model: ScriptedModel, task: str) -> tuple[str, list[Message]]:
    """Loop until the model answers in text; each tool call is one ``cm.execute``."""
    messages: list[Message] = [{"role": "user", "content": task}]
    tools = [execute_code_tool(cm)]
    for _ in range(MAX_TURNS):
        reply = model.respond(messages, tools)
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            return str(reply.get("content", "")), messages
        for call in calls:
            result = await cm.execute(call["arguments"]["code"], language="python")
            messages.append(tool_result_message(call["id"], result))
    raise RuntimeError(f"no answer after {MAX_TURNS} turns")


async def main(config: Path) -> int:
    model = ScriptedModel([first_turn, second_turn])
    async with CodeMode.from_config(config) as cm:
        answer, messages = await run_agent(cm, model, "Which region sold the most? The data is in sales.csv.")
    tool_results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    print(f"model calls: {model.calls}, tool calls: {len(tool_results)}, tools offered: {model.seen_tools}")
    print(f"script output: {tool_results[0]['output'].strip()}")
    print(f"answer: {answer}")
    return 0 if all(r["success"] for r in tool_results) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="mcp-code-mode as the single tool of an agent loop (fake model)")
    parser.add_argument(
        "--config", type=Path, default=Path("mcp_servers.json"), help="servers file with a filesystem server"
    )
    sys.exit(anyio.run(main, parser.parse_args().config))
