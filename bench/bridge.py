#!/usr/bin/env python3
"""1. Bridge overhead: N tool calls from inside one script, against N direct calls from the host.

    .venv/bin/python bench/bridge.py [--calls 300] [--reps 4] [--runners local cpython pyodide deno monty]

One engine (``CodeMode``) over the Python fixture server. A repetition is N direct
``call_tool("fixture", "add")`` from the host through the engine's own pool session (the session the
bridge uses), then one ``execute_code`` per runner whose script makes the same N calls (the runners'
order rotates), then N direct calls again. Each measurement starts once a warm worker is waiting and
the server's processes are idle (``common.quiesce``: a worker the pool just started may still be
compiling in the background). A script's time is the whole ``execute`` (hand-over to the worker, the
calls, the answer). Ratio = a runner's median script time / the median of all direct batches.
Then, per runner, the same script straight on the runner with every call answered by the host at once
(no downstream server): the bridge's own cost per call. And in each repetition, a control: the direct
calls with each answer echoed by a bare process (one process round trip per call and nothing else, the
floor under any out-of-process runner). Target <= 1.15 with 300 calls on every runner (issue 22). In each
repetition too, the same N calls from one script through FastMCP's CodeMode in front of its own fixture
server process (``peers.fastmcp_code_mode``; its ratio against the same direct batches). One unmeasured run
per runner (and of the control, and of FastMCP) comes first (module caches, JIT).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteSendStream
from anyio.streams.buffered import BufferedByteReceiveStream

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    RUNNERS,
    Section,
    engine,
    fixture_entry,
    median,
    ms,
    parser,
    quiesce,
    quiet_logs,
    ratio,
    run_section,
    snapshot_exists,
    timed,
    wait_warm,
)
from peers import FASTMCP_NAME, failure_text, fastmcp_code_mode, fastmcp_execute, fastmcp_missing

from mcp_code_mode.bridge import ToolDispatcher, encode
from mcp_code_mode.runners.base import RunRequest
from mcp_code_mode.runners.local import SAFE_IMPORTS

TARGET = 1.15
FASTMCP_SCRIPT = (
    "s = 0\nfor i in range({n}):\n    s += (await call_tool('add', {{'a': i, 'b': 1}}))['result']\nreturn s"
)
PY = "s = 0\nfor i in range({n}):\n    s += fixture.add(a=i, b=1)['result']\nprint(s)"
JS = "let s = 0;\nfor (let i = 0; i < {n}; i++) s += (await fixture.add({{ a: i, b: 1 }})).result;\nconsole.log(s);"


def script(runner: str, n: int) -> tuple[str, str]:
    """(language, code) of the N-call script for a runner."""
    return ("javascript", JS.format(n=n)) if runner == "deno" else ("python", PY.format(n=n))


async def run_script(cm: Any, runner: str, n: int) -> float:
    language, code = script(runner, n)
    await wait_warm(cm, runner)
    await quiesce()
    elapsed, result = await timed(lambda: cm.execute(code, language, runner=runner, cache="off"))
    if not result.success or result.output.strip() != str(n * (n + 1) // 2) or result.tool_calls != n:
        raise SystemExit(f"{runner}: the {n}-call script failed: {result.error} {result.output[:200]!r}")
    return elapsed


class InstantDispatcher(ToolDispatcher):
    """Answers every ``add`` at once, with no downstream server: what the bridge alone costs."""

    async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
        return {"value": {"result": int(arguments["a"]) + int(arguments["b"])}}


async def run_bridge_only(cm: Any, runner: str, n: int) -> float:
    """The N-call script on the runner itself (no engine around it), every call answered at once."""
    language, code = script(runner, n)
    chosen = cm.runners[runner]
    request = RunRequest(
        code=code,
        language=language,
        timeout=120,
        max_output=100_000,
        stubs=cm.bundle(chosen.stub_language),
        authorized_imports=SAFE_IMPORTS,
    )
    await wait_warm(cm, runner)
    await quiesce()
    elapsed, outcome = await timed(lambda: chosen.run(request, InstantDispatcher(cm.pool, cm.index, n)))
    if not outcome.success or outcome.output.strip() != str(n * (n + 1) // 2):
        raise SystemExit(f"{runner}: the {n}-call script failed on its own: {outcome.error} {outcome.output[:200]!r}")
    return elapsed


ECHO = "import sys\nfor line in sys.stdin.buffer:\n    sys.stdout.buffer.write(line)\n    sys.stdout.buffer.flush()"
"""A bare process that sends every line back: a round trip to another process, with no script."""


@asynccontextmanager
async def echo_process() -> AsyncGenerator[tuple[ByteSendStream, BufferedByteReceiveStream]]:
    async with await anyio.open_process([sys.executable, "-I", "-u", "-c", ECHO]) as process:
        assert process.stdin is not None and process.stdout is not None
        yield process.stdin, BufferedByteReceiveStream(process.stdout)


async def run_direct(cm: Any, n: int, echo: tuple[ByteSendStream, BufferedByteReceiveStream] | None = None) -> float:
    """N direct calls; with ``echo``, each answer also goes through the echo process and back, as the
    host sends a worker its result (and reads its next call)."""

    async def calls() -> int:
        total = 0
        for i in range(n):
            result = await cm.pool.call_tool("fixture", "add", {"a": i, "b": 1})
            value = result.structured_content or {}
            if echo is not None:
                await echo[0].send(encode({"op": "result", "id": i, "value": value}))
                value = json.loads(await echo[1].receive_until(b"\n", 1 << 20))["value"]
            total += int(value["result"])
        return total

    await quiesce()
    elapsed, total = await timed(calls)
    if total != n * (n + 1) // 2:
        raise SystemExit(f"direct calls summed to {total}")
    return elapsed


async def run_fastmcp(client: Any, n: int) -> float:
    """The N-call script through FastMCP's CodeMode, once this process's children are idle (milliseconds)."""
    await quiesce()
    elapsed, text = await timed(lambda: fastmcp_execute(client, FASTMCP_SCRIPT.format(n=n)))
    if text.strip() != str(n * (n + 1) // 2):
        raise SystemExit(f"FastMCP: the {n}-call script answered {text[:200]!r}")
    return elapsed


async def measure(args: argparse.Namespace, section: Section) -> None:
    n, runners = args.calls, args.runners
    peer_failure = await anyio.to_thread.run_sync(fastmcp_missing) if args.peer else None
    had_snapshot = snapshot_exists()
    scripts: dict[str, list[float]] = {r: [] for r in runners}
    paired: dict[str, list[float]] = {r: [] for r in runners}
    alone: dict[str, list[float]] = {r: [] for r in runners}
    direct: list[float] = []
    echoed: list[float] = []
    echoed_paired: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-bridge-") as tmp, quiet_logs():
        cm = engine(
            {"fixture": fixture_entry()},
            Path(tmp),
            pool_size=2,
            cpython_pool_size=1,
            pyodide_pool_size=1 if "pyodide" in runners else 0,
            cache_embedder="none",
        )
        async with cm, echo_process() as echo, AsyncExitStack() as stack:
            for runner in runners:
                await run_script(cm, runner, 20)
            await run_direct(cm, 20, echo)
            peer = None
            if args.peer and peer_failure is None:
                errlog = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace"))
                try:
                    peer = await stack.enter_async_context(fastmcp_code_mode(errlog))
                    await run_fastmcp(peer, 20)
                except Exception as exc:  # the boundary of a peer we do not control: what it raised is the finding
                    peer_failure, peer = failure_text(exc, errlog), None
            for rep in range(args.reps):
                # A direct batch before and after the runners' scripts, whose order rotates.
                before = await run_direct(cm, n)
                order = runners[rep % len(runners) :] + runners[: rep % len(runners)]
                timings = {runner: await run_script(cm, runner, n) for runner in order}
                if peer is not None:
                    timings[FASTMCP_NAME] = await run_fastmcp(peer, n)
                echoed.append(await run_direct(cm, n, echo))
                after = await run_direct(cm, n)
                direct += [before, after]
                around = (before + after) / 2
                echoed_paired.append(echoed[-1] / around)
                for runner, elapsed in timings.items():
                    scripts.setdefault(runner, []).append(elapsed)
                    paired.setdefault(runner, []).append(elapsed / around)
                for runner in order:
                    alone[runner].append(await run_bridge_only(cm, runner, n))
    table = section.table(
        f"{n} calls to the fixture server's `add`, {args.reps} interleaved repetitions (medians).",
        [
            "runner",
            f"{n} calls in one script",
            f"{n} direct calls",
            "ratio",
            "overhead per call",
            "the bridge alone, per call",
            "vs the echo process",
            "ratio per repetition",
        ],
    )
    d = median(direct)
    e = median(echoed)
    for runner in runners:
        s = median(scripts[runner])
        pairs = ", ".join(f"{r:.2f}" for r in paired[runner])
        per_call = f"{(s - d) / n * 1000:,.0f} µs"
        bridge_alone = f"{median(alone[runner]) / n * 1000:,.0f} µs"
        table.rows.append([runner, ms(s), ms(d), ratio(s / d), per_call, bridge_alone, ratio(s / e), pairs])
        low, high = min(paired[runner]), max(paired[runner])
        spread = f"{ratio(s / d)} (repetitions {low:.2f}–{high:.2f})"
        section.target(f"bridge ratio <= {TARGET} ({runner})", spread, s / d <= TARGET)
        if low <= TARGET < high:
            section.notes.append(
                f"{runner}: the repetitions' ratios fall on both sides of the target ({pairs}): on this shared "
                "machine that verdict is within the noise."
            )
    section.notes.append(
        "Direct calls go through the engine's own `ClientSession` to the same fixture server process the "
        "bridge uses; a script's time is the whole `execute` (worker hand-over, calls, answer), with the "
        f"cache off. Each repetition is a direct batch, the runners' scripts (in rotating order), and "
        f"another direct batch; the direct column is the median of all {len(direct)} batches. Every "
        "measurement starts once the server's processes are idle: a worker the pool has just started can "
        "still be compiling in the background (Pyodide's optimizing compile of its interpreter loop takes "
        "about 0.35 s of CPU after the worker says ready). The ratio per repetition (script / the mean of "
        "the direct batches around it) shows the noise of a shared machine."
    )
    section.notes.append(
        '"The bridge alone": the same script run on the runner directly (no engine around it), with '
        "every call answered by the host at once instead of by the fixture server: the time a call "
        "spends in the worker (the script's own loop included), the pipes and the host's bridge code. "
        "Overhead per call minus that is how much "
        "slower the downstream calls themselves ran with a worker's round trip between them (the server, "
        "the host and the worker share two cores)."
    )
    pairs = ", ".join(f"{r:.2f}" for r in echoed_paired)
    per_call = f"{(e - d) / n * 1000:,.0f} µs"
    table.rows.append(["(no script: an echo process)", ms(e), ms(d), ratio(e / d), per_call, "", "", pairs])
    section.notes.append(
        '"(no script: an echo process)": the direct calls again, but after each call the host sends the '
        "answer to a bare Python process that sends it straight back (`bridge.encode`, a pipe each way), "
        "as it sends a worker its result and reads the next call. No script, no stubs, no runner: what "
        "one round trip to another process per call costs on this machine, the floor under any runner "
        "that keeps the script out of the server's process. \"vs the echo process\" is a runner's script "
        "time over that row's: what the runner adds above the floor. The target is still judged against "
        "the direct calls."
    )
    if FASTMCP_NAME in scripts:
        s = median(scripts[FASTMCP_NAME])
        pairs = ", ".join(f"{r:.2f}" for r in paired[FASTMCP_NAME])
        per_call = f"{(s - d) / n * 1000:,.0f} µs"
        table.rows.append([f"{FASTMCP_NAME} (peer)", ms(s), ms(d), ratio(s / d), per_call, "", ratio(s / e), pairs])
        section.notes.append(
            f"{FASTMCP_NAME}: the same {n} calls as `await call_tool('add', ...)` in one `execute`, timed by its "
            "stdio client (one MCP round trip more than ours, a few milliseconds), in front of a fixture server "
            "process of its own; its ratio is against the same direct batches as ours (FastMCP's "
            "`max_tool_calls`, 50 a script by default, is raised for it: `bench/fastmcp_peer.py`)."
        )
    elif args.peer:
        table.rows.append([FASTMCP_NAME, "could not run here (see notes)", "", "", "", "", "", ""])
        section.notes.append(f"FastMCP's CodeMode could not run here: {peer_failure}")
    if "pyodide" in runners and not had_snapshot:
        section.notes.append("The Pyodide snapshot did not exist before this section: its start made it.")


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--calls", type=int, default=300)
    cli.add_argument("--reps", type=int, default=4)
    cli.add_argument("--runners", nargs="+", default=list(RUNNERS), choices=RUNNERS)
    cli.add_argument("--no-peer", dest="peer", action="store_false", help="skip FastMCP's CodeMode")
    args = cli.parse_args()
    section = Section("bridge", "1. Bridge overhead", "")
    return run_section(measure, section, args)


if __name__ == "__main__":
    sys.exit(main())
