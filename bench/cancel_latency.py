"""How long a cancelled run's process outlives the client's ``notifications/cancelled``.

    .venv/bin/python bench/cancel_latency.py [--runs 20]

Starts ``mcp-code-mode serve --http`` (with a token) against the Python fixture server, and for each
run: calls ``execute_code`` with a script that prints and then sleeps, waits for the printed line (a
log message), notes the pid of the process running the script, cancels the call (the SDK client sends
``notifications/cancelled``), and measures until that process is gone. Prints the median, p90 and
maximum in milliseconds, and the time of the next call (the server goes on serving).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import LoggingMessageNotificationParams

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import node_tools  # noqa: E402  # pyright: ignore[reportMissingImports]  (scripts/ is not a package)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import descendants  # noqa: E402

RUNNING_NAME = "cm-run"
"""What a zygote's child names itself once it has a run (``runners/sandboxed/worker.py``)."""


def script_processes(server_pid: int) -> set[int]:
    """The processes running a script: a zygote's child that has its run (named ``cm-run``; each zygote
    also keeps one child forked ahead, ``cm-waiting``)."""
    return {pid for pid in descendants(server_pid) if _name(pid) == RUNNING_NAME}


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


async def measure(url: str, token: str, server_pid: int, runs: int) -> tuple[list[float], list[float]]:
    printed = anyio.Event()

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        if "sleeping" in str(params.data):
            printed.set()

    latencies: list[float] = []
    next_calls: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", logging_callback=on_log) as client:
            for _ in range(runs):
                printed = anyio.Event()
                scope = anyio.CancelScope()
                code = "import time\nprint('sleeping')\ntime.sleep(60)\n"

                async def call(scope: anyio.CancelScope = scope, code: str = code) -> None:
                    with scope:
                        await client.call_tool("execute_code", {"language": "python", "code": code})

                pids: set[int] = set()
                cancelled_at = 0.0
                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    with anyio.fail_after(60):
                        await printed.wait()
                    pids = script_processes(server_pid)
                    cancelled_at = time.perf_counter()
                    scope.cancel()
                with anyio.fail_after(10):
                    while not all(gone(pid) for pid in pids):
                        await anyio.sleep(0.001)
                latencies.append((time.perf_counter() - cancelled_at) * 1000)
                started = time.perf_counter()
                await client.call_tool("execute_code", {"language": "python", "code": "1"})
                next_calls.append((time.perf_counter() - started) * 1000)
    return latencies, next_calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    token = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="bench-cancel-") as tmp:
        folder = Path(tmp)
        fixture = ROOT / "tests" / "fixtures" / "fixture_server.py"
        config = folder / "servers.json"
        config.write_text(
            json.dumps({"servers": {"fixture": {"command": sys.executable, "args": [str(fixture)]}}}), encoding="utf-8"
        )
        env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("CODE_MODE_")}
        env |= {"CODE_MODE_AUTH_TOKEN": token, "CODE_MODE_LOG_LEVEL": "WARNING"}
        with node_tools.running_server(config, folder / "server.log", env=env) as (url, process):
            latencies, next_calls = anyio.run(measure, url, token, process.pid, args.runs)
    latencies.sort()
    p90 = latencies[max(0, round(0.9 * len(latencies)) - 1)]
    print(f"runs: {len(latencies)}")
    print(f"cancel -> script process gone: median {statistics.median(latencies):.1f} ms, p90 {p90:.1f} ms, ", end="")
    print(f"max {latencies[-1]:.1f} ms")
    print(f"next call after a cancel: median {statistics.median(next_calls):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
