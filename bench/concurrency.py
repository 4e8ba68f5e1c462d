#!/usr/bin/env python3
"""6. Concurrency: 8 concurrent execute_code calls of 50 tool calls each, against the same 8 one after another.

    .venv/bin/python bench/concurrency.py [--scripts 8] [--calls 50] [--reps 3] [--runners local cpython]

One ``mcp-code-mode serve`` (the Python fixture server downstream; ``CODE_MODE_POOL_SIZE`` and
``CODE_MODE_CPYTHON_POOL_SIZE`` = 8, so each script finds a warm worker) behind one stdio client
session. Each script echoes 50 texts tagged with its own random tag through ``fixture.echo`` and
returns them. Concurrent: the 8 ``tools/call`` requests are sent at once on the session; sequential:
one after another. Repetitions alternate the order. Every result is checked: its return value must be
exactly its own 50 texts and no other script's tag may appear anywhere in it; if one does, the
benchmark fails (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Section,
    executor,
    fixture_entry,
    median,
    ms,
    parser,
    ratio,
    run_section,
    server_env,
    write_config,
)

SCRIPT = """\
tag = "{tag}"
seen = []
for i in range({calls}):
    seen.append(fixture.echo(text=f"{{tag}}:{{i}}")["result"])
print(tag, len(seen))
seen
"""

SCRIPT_WAITING = """\
tag = "{tag}"
seen = []
for i in range({calls}):
    fixture.slow(seconds={wait})
    seen.append(fixture.echo(text=f"{{tag}}:{{i}}")["result"])
print(tag, len(seen))
seen
"""


def check(tag: str, tags: list[str], calls: int, result: Any) -> str | None:
    """What is wrong with one script's result (None: it holds exactly its own data)."""
    data = result.structured_content or {}
    if not data.get("success"):
        return f"script {tag} failed: {json.dumps(data)[:300]}"
    expected = [f"{tag}:{i}" for i in range(calls)]
    if data.get("returnValue") != expected or data.get("output") != f"{tag} {calls}\n":
        return f"script {tag} answered {json.dumps(data)[:300]}"
    text = json.dumps(result.model_dump(mode="json", by_alias=True))
    strangers = [other for other in tags if other != tag and other in text]
    if strangers:
        return f"the result of script {tag} holds data of {', '.join(strangers)}"
    return None


async def batch(
    client: Any, runner: str, scripts: int, calls: int, concurrent: bool, problems: list[str], wait: float = 0.0
) -> float:
    """Wall milliseconds of ``scripts`` runs, all at once or one after another; what is wrong goes to
    ``problems``. With ``wait``, each echo follows a call to ``fixture.slow(wait)``."""
    tags = [f"t{k}x{secrets.token_hex(4)}" for k in range(scripts)]

    async def one(tag: str) -> None:
        code = SCRIPT_WAITING.format(tag=tag, calls=calls, wait=wait) if wait else SCRIPT.format(tag=tag, calls=calls)
        arguments = {"language": "python", "code": code, "runner": runner, "cache": "off"}
        problem = check(tag, tags, calls, await client.call_tool("execute_code", arguments))
        if problem:
            problems.append(f"{runner}: {problem}")

    started = time.perf_counter()
    if concurrent:
        async with anyio.create_task_group() as tg:
            for tag in tags:
                tg.start_soon(one, tag)
    else:
        for tag in tags:
            await one(tag)
    return (time.perf_counter() - started) * 1000


async def measure(args: argparse.Namespace, section: Section) -> None:
    walls: dict[tuple[str, bool], list[float]] = {}
    waiting: dict[bool, list[float]] = {}
    n = args.scripts
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp:
        folder = Path(tmp)
        config = write_config(folder, {"fixture": fixture_entry()})
        env = server_env(folder / "cache", pool_size=n, cpython_pool_size=n, pyodide_pool_size=0)
        with (folder / "server.log").open("w+", encoding="utf-8") as errlog:
            async with executor(config, env, errlog) as client:
                problems: list[str] = []
                for runner in args.runners:  # unmeasured: fills the pools, warms the module caches
                    await batch(client, runner, n, 2, True, problems)
                for rep in range(args.reps):
                    for runner in args.runners:
                        for concurrent in (rep % 2 == 0, rep % 2 == 1):
                            await anyio.sleep(0.5)  # the zygotes are back in their pool
                            wall = await batch(client, runner, n, args.calls, concurrent, problems)
                            walls.setdefault((runner, concurrent), []).append(wall)
                            if problems:
                                section.failed = "; ".join(problems[:3]) + (
                                    f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
                                )
                                return
                        for concurrent in (rep % 2 == 0, rep % 2 == 1):
                            await anyio.sleep(0.5)
                            wall = await batch(
                                client, args.runners[0], n, args.wait_calls, concurrent, problems, args.wait
                            )
                            waiting.setdefault(concurrent, []).append(wall)
                            if problems:
                                section.failed = "; ".join(problems[:3])
                                return
    total_calls = n * args.calls
    table = section.table(
        f"{n} `execute_code` calls of {args.calls} `fixture.echo` calls each, on one stdio session; "
        f"medians of {args.reps} repetitions. Every result held exactly its own data.",
        ["runner", "way", "wall time", "tool calls/s", "scripts/s", "speed-up"],
    )
    for runner in args.runners:
        sequential = median(walls[(runner, False)])
        for concurrent in (False, True):
            wall = median(walls[(runner, concurrent)])
            table.rows.append(
                [
                    runner,
                    f"{n} concurrent" if concurrent else f"{n} one after another",
                    ms(wall, 0),
                    f"{total_calls / wall * 1000:,.0f}",
                    f"{n / wall * 1000:.1f}",
                    ratio(sequential / wall),
                ]
            )
    table = section.table(
        f"The same with a downstream tool that waits: each script makes {args.wait_calls} × "
        f"(`fixture.slow({args.wait:g})` then `fixture.echo`), runner {args.runners[0]}.",
        ["way", "wall time", "speed-up"],
    )
    sequential = median(waiting[False])
    for concurrent in (False, True):
        wall = median(waiting[concurrent])
        way = f"{n} concurrent" if concurrent else f"{n} one after another"
        table.rows.append([way, ms(wall, 0), ratio(sequential / wall)])
    section.notes.append(
        "All tool calls go to one fixture server process (one MCP session, one Python event loop), and the "
        "machine has 2 cores shared by the client, the server, the workers and the fixture server."
    )


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--scripts", type=int, default=8)
    cli.add_argument("--calls", type=int, default=50)
    cli.add_argument("--reps", type=int, default=3)
    cli.add_argument("--runners", nargs="+", default=["local"], choices=["local", "cpython"])
    cli.add_argument("--wait", type=float, default=0.05, help="seconds fixture.slow waits in the second table")
    cli.add_argument("--wait-calls", type=int, default=5, help="slow+echo pairs per script in the second table")
    section = Section("concurrency", "6. Concurrency", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
