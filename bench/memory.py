#!/usr/bin/env python3
"""7. Memory: the server with its warm pools, and what each extra warm worker costs.

    .venv/bin/python bench/memory.py

``mcp-code-mode serve`` (no downstream servers) is started twice through a stdio client: with the
default pool sizes (local 2, cpython 1, deno 2, pyodide 1, monty 1) and with larger ones (local 4,
cpython 3, deno 4, pyodide 2, monty 2). Each runner runs ``print(1)`` once (a pool that starts on first
use has started then), then its pool size + 1 at once (a pool that keeps one worker until a run finds none
idle grows to its size then); then, once the process tree has settled (the configured number of workers and the
total PSS steady, or the PSS steady for 5 s with fewer: the workers seen are reported), each process's
memory is read from ``/proc/<pid>/smaps_rollup``. The tree is sampled every 0.25 s from start to end for
the peak.

PSS (proportional set size) is what is reported: a page shared by k processes counts 1/k in each, so
the zygote workers' shared pages (copy-on-write after fork, the same interpreter and libraries) are
counted once over the tree. RSS sums are shown beside it; they count shared pages once per process.
Per extra worker = the difference of a runner's PSS between the two servers / the extra workers seen.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    RUNNERS,
    Section,
    cmdline,
    descendants,
    executor,
    find_child,
    memory_kib,
    parser,
    peak_rss_kib,
    process_table,
    run_section,
    server_env,
    structured,
    write_config,
)

DEFAULT = {"local": 2, "cpython": 1, "deno": 2, "pyodide": 1, "monty": 1}
LARGER = {"local": 4, "cpython": 3, "deno": 4, "pyodide": 2, "monty": 2}
MARKERS = (
    ("pyodide", "pyodide_worker"),
    ("deno", "deno_worker"),
    ("cpython", "worker.py cpython"),
    ("monty", "cm_monty.py"),
)
KINDS = ("local", "cpython", "deno", "pyodide", "monty")


def kind(commands: str) -> str:
    for name, marker in MARKERS:
        if marker in commands:
            return name
    return "local" if "worker.py local" in commands else "other"


def snapshot(server: int) -> dict[str, Any]:
    """Memory of the server and of each of its children's subtrees, grouped by runner (KiB)."""
    table = process_table()
    rss, pss = memory_kib(server)
    groups: dict[str, dict[str, int]] = {}
    for child in [pid for pid, ppid in table.items() if ppid == server]:
        tree = [child, *descendants(child, table)]
        group = groups.setdefault(
            kind(" ".join(cmdline(pid) for pid in tree)), {"count": 0, "processes": 0, "rss": 0, "pss": 0}
        )
        group["count"] += 1
        group["processes"] += len(tree)
        for pid in tree:
            r, p = memory_kib(pid)
            group["rss"] += r
            group["pss"] += p
    total_pss = pss + sum(g["pss"] for g in groups.values())
    total_rss = rss + sum(g["rss"] for g in groups.values())
    return {"server": {"rss": rss, "pss": pss}, "groups": groups, "pss": total_pss, "rss": total_rss}


async def measure_server(sizes: dict[str, int], folder: Path) -> dict[str, Any]:
    config = write_config(folder, {})
    env = server_env(
        folder / f"cache-{sizes['local']}",
        pool_size=sizes["local"],
        cpython_pool_size=sizes["cpython"],
        pyodide_pool_size=sizes["pyodide"],
        monty_pool_size=sizes["monty"],
    )
    assert sizes["deno"] == sizes["local"], "local and deno share CODE_MODE_POOL_SIZE"
    peak = {"pss": 0, "rss": 0}
    with (folder / "server.log").open("a", encoding="utf-8") as errlog:
        async with executor(config, env, errlog) as client:
            server = find_child("mcp-code-mode serve")
            if server is None:
                raise SystemExit("cannot find the server process")
            done = anyio.Event()
            settled: dict[str, Any] = {}

            async def sample() -> None:
                while not done.is_set():
                    now = await anyio.to_thread.run_sync(snapshot, server)
                    peak["pss"], peak["rss"] = max(peak["pss"], now["pss"]), max(peak["rss"], now["rss"])
                    await anyio.sleep(0.25)

            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                for runner in RUNNERS:
                    language, code = ("javascript", "console.log(1)") if runner == "deno" else ("python", "print(1)")
                    arguments = {"language": language, "code": code, "runner": runner, "cache": "off"}
                    structured(await client.call_tool("execute_code", arguments))
                    async with anyio.create_task_group() as burst:  # runs that find no idle worker: pools grow
                        for _ in range(sizes[runner] + 1):
                            burst.start_soon(run_once, client, arguments)
                settled = await settle(server, sizes)
                done.set()  # the sampler stops after its current sample
            settled["peak"] = peak
            settled["hwm"] = peak_rss_kib(server)
    return settled


STEADY_SECONDS = 5
"""A tree whose pools stay below their sizes has settled once its PSS held this long."""


async def run_once(client: Any, arguments: dict[str, Any]) -> None:
    structured(await client.call_tool("execute_code", arguments))


async def settle(server: int, sizes: dict[str, int], limit: float = 60.0) -> dict[str, Any]:
    """The tree once every pool has its workers and the total PSS moved < 2 % over a second, or once the PSS
    held for ``STEADY_SECONDS`` with fewer workers (the server keeps what it keeps: the counts are reported)."""
    deadline = time.monotonic() + limit
    previous: dict[str, Any] | None = None
    held = 0
    while True:
        await anyio.sleep(1.0)
        now = await anyio.to_thread.run_sync(snapshot, server)
        counts = {name: now["groups"].get(name, {}).get("count", 0) for name in sizes}
        steady = previous is not None and abs(now["pss"] - previous["pss"]) < 0.02 * previous["pss"]
        held = held + 1 if steady else 0
        if (counts == sizes and steady) or held >= STEADY_SECONDS or time.monotonic() > deadline:
            now["settled"] = steady
            now["counts"] = counts
            return now
        previous = now


def mib(kib: float) -> str:
    return f"{kib / 1024:,.0f} MiB"


async def measure(args: argparse.Namespace, section: Section) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        small = await measure_server(DEFAULT, Path(tmp))
        large = await measure_server(LARGER, Path(tmp))
    table = section.table(
        "The server with warm pools (no downstream servers). PSS from /proc/<pid>/smaps_rollup, summed over "
        "each subtree; RSS beside it.",
        ["pools (" + ", ".join(KINDS) + ")", "part", "workers (processes)", "PSS", "RSS"],
    )
    for sizes, result in ((DEFAULT, small), (LARGER, large)):
        label = ", ".join(str(sizes[r]) for r in KINDS)
        server = result["server"]
        table.rows.append([label, "server process", "1", mib(server["pss"]), mib(server["rss"])])
        for name in (*KINDS, "other"):
            group = result["groups"].get(name)
            if group:
                table.rows.append(
                    [
                        label,
                        f"{name} workers",
                        f"{group['count']} ({group['processes']})",
                        mib(group["pss"]),
                        mib(group["rss"]),
                    ]
                )
        table.rows.append([label, "**whole tree, settled**", "", mib(result["pss"]), mib(result["rss"])])
        table.rows.append(
            [
                label,
                "**whole tree, peak** (sampled every 0.25 s)",
                "",
                mib(result["peak"]["pss"]),
                mib(result["peak"]["rss"]),
            ]
        )
        table.rows.append([label, "server process peak RSS (VmHWM)", "1", "", mib(result["hwm"])])
        if not result["settled"]:
            section.notes.append(f"With pools {label}, the tree had not settled after 60 s; figures as read then.")
        if result["counts"] != sizes:
            kept = ", ".join(str(result["counts"][r]) for r in KINDS)
            section.notes.append(f"With pools {label} configured, the settled tree had {kept} workers.")
    extra = section.table(
        "Per extra warm worker: (PSS with the larger pools - PSS with the defaults) / extra workers (as counted "
        "in the settled trees).",
        ["runner", "extra workers", "PSS per extra worker", "PSS per worker (larger pools, average)"],
    )
    for name in KINDS:
        a, b = small["groups"].get(name, {}), large["groups"].get(name, {})
        more = b.get("count", 0) - a.get("count", 0)
        per = mib((b.get("pss", 0) - a.get("pss", 0)) / more) if more > 0 else "n/a"
        average = b.get("pss", 0) / max(1, b.get("count", 0))
        extra.rows.append([name, str(more), per, mib(average)])
    section.notes.append(
        "A local or cpython worker is a bubblewrap sandbox around a zygote (bubblewrap's processes and the "
        "zygote); a deno or pyodide worker is a Deno process; a monty worker is a small Python process and its "
        "`monty` interpreter process, in one sandbox. Downstream servers, if configured, would be "
        "further children of the server."
    )


def main() -> int:
    cli = parser(__doc__)
    section = Section("memory", "7. Memory", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
