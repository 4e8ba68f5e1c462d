#!/usr/bin/env python3
"""3. Orchestration: a task of N tool calls as one execute_code, against N direct tool calls from the client.

    .venv/bin/python bench/orchestration.py [--sizes 10 100 1000] [--reps 3] [--runners local [cpython]]

The task: read N small CSV files through the npm filesystem server and add up one column.

- code mode: one ``execute_code`` through a stdio client to ``mcp-code-mode serve`` (configured with the
  filesystem server), whose script reads the N files and prints a one-line summary (``cache="off"``);
- direct: a stdio client to an identical filesystem server (same package, same folder) that calls
  ``read_text_file`` N times, as a client without code mode would (each call is a model round trip).

Reported per N: wall time (medians of interleaved repetitions; a model's own time per round trip is not
counted, so the direct column is a lower bound), model round trips (1 against N), and the bytes and
tokens (o200k) that reach the client: the execute_code result against the sum of the N tool results,
each counted as the CallToolResult's JSON.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    NODE_BIN,
    Section,
    executor,
    median,
    ms,
    npm_entry,
    parser,
    ratio,
    run_section,
    server_env,
    size,
    stdio,
    structured,
    timed,
    wire_bytes,
    write_config,
)

from mcp_code_mode.downstream.env import child_environment
from mcp_code_mode.tokens import count_tokens

SCRIPT = """\
total = 0.0
for i in range({n}):
    text = filesystem.read_text_file(path=f"{folder}/f{{i:04d}}.csv")["content"]
    total += sum(float(line.split(",")[2]) for line in text.splitlines()[1:])
print(f"{n} files, total {{total:.2f}}")
"""


def make_files(folder: Path, count: int) -> float:
    """``count`` small CSV files; returns the total of their amount column."""
    total = 0.0
    for i in range(count):
        rows = [(i * 7 + k) % 113 + 0.25 for k in range(4)]
        lines = ["id,customer,amount,note"] + [
            f"{i}-{k},customer-{(i + k) % 37},{amount:.2f},order {i} line {k} shipped" for k, amount in enumerate(rows)
        ]
        (folder / f"f{i:04d}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        total += sum(rows)
    return total


def column_total(text: str) -> float:
    return sum(float(line.split(",")[2]) for line in text.splitlines()[1:])


async def measure(args: argparse.Namespace, section: Section) -> None:
    sizes = sorted(args.sizes)
    results: dict[tuple[str, int], list[float]] = {}
    sent: dict[tuple[str, int], tuple[int, int, int]] = {}  # (round trips, bytes, tokens)
    with tempfile.TemporaryDirectory(prefix="bench-orchestration-") as tmp:
        folder = (Path(tmp) / "files").resolve()
        folder.mkdir()
        make_files(folder, max(sizes))
        expected: dict[int, float] = {}
        for n in {2, *sizes}:
            expected[n] = sum(column_total((folder / f"f{i:04d}.csv").read_text(encoding="utf-8")) for i in range(n))
        config = write_config(Path(tmp), {"filesystem": npm_entry("filesystem", str(folder))})
        env = server_env(Path(tmp) / "cache", pyodide_pool_size=0)
        direct_env = child_environment({})  # what the executor gives its own filesystem server
        with (Path(tmp) / "server.log").open("w+", encoding="utf-8") as errlog:
            async with (
                executor(config, env, errlog) as code_mode,
                stdio(str(NODE_BIN / "mcp-server-filesystem"), [str(folder)], direct_env, errlog) as direct,
            ):

                async def one_script(runner: str, n: int) -> None:
                    code = SCRIPT.format(n=n, folder=folder)
                    arguments = {"language": "python", "code": code, "runner": runner, "cache": "off"}
                    elapsed, result = await timed(lambda: code_mode.call_tool("execute_code", arguments))
                    data = structured(result)
                    if data["output"] != f"{n} files, total {expected[n]:.2f}\n" or data["toolCalls"] != n:
                        raise SystemExit(f"{runner}: the script answered {data['output']!r}")
                    results.setdefault((runner, n), []).append(elapsed)
                    if (runner, n) not in sent:  # the same every time (checked above); counting takes a while
                        body = result.model_dump_json(by_alias=True, exclude_none=True)
                        sent[(runner, n)] = (1, wire_bytes(result), count_tokens(body))

                async def direct_calls(n: int) -> None:
                    answers: list[Any] = []

                    async def calls() -> float:
                        total = 0.0
                        for i in range(n):
                            answer = await direct.call_tool("read_text_file", {"path": f"{folder}/f{i:04d}.csv"})
                            answers.append(answer)
                            total += column_total((answer.structured_content or {})["content"])
                        return total

                    elapsed, total = await timed(calls)
                    if f"{total:.2f}" != f"{expected[n]:.2f}":
                        raise SystemExit(f"direct calls summed to {total}")
                    results.setdefault(("direct", n), []).append(elapsed)
                    if ("direct", n) not in sent:
                        bodies = [a.model_dump_json(by_alias=True, exclude_none=True) for a in answers]
                        sent[("direct", n)] = (n, sum(len(b.encode()) for b in bodies), count_tokens("".join(bodies)))

                for runner in args.runners:  # unmeasured: module caches, the first worker hand-over
                    await one_script(runner, 2)
                await direct_calls(2)
                results.clear()
                sent.clear()
                for rep in range(args.reps):
                    for n in sizes:
                        modes = ["direct", *args.runners]
                        for mode in modes[rep % len(modes) :] + modes[: rep % len(modes)]:
                            await (direct_calls(n) if mode == "direct" else one_script(mode, n))
    table = section.table(
        f"Read N small CSV files through the npm filesystem server and total a column; medians of {args.reps} "
        "interleaved repetitions. Bytes and tokens (o200k) of what reaches the client.",
        ["N", "way", "wall time", "vs direct", "model round trips", "bytes to the client", "tokens to the client"],
    )
    for n in sizes:
        base = median(results[("direct", n)])
        for mode in ["direct", *args.runners]:
            wall = median(results[(mode, n)])
            trips, nbytes, tokens = sent[(mode, n)]
            way = f"{n} direct `read_text_file` calls" if mode == "direct" else f"one `execute_code` ({mode})"
            table.rows.append([str(n), way, ms(wall, 0), ratio(wall / base), str(trips), size(nbytes), f"{tokens:,}"])
    section.notes.append(
        "Wall time counts no model time: without code mode each of the N calls is also a model round trip "
        "(typically seconds each), so the direct rows are a lower bound. Files: 5 lines, ~150 bytes each."
    )


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    cli.add_argument("--reps", type=int, default=3)
    cli.add_argument("--runners", nargs="+", default=["local"], choices=["local", "cpython"])
    section = Section("orchestration", "3. Orchestration: one script against N calls", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
