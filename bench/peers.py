"""The peers: pydantic's ``mcp-run-python`` (PyPI), FastMCP's CodeMode, a warm pydantic-monty pool and
smolagents' ``LocalPythonExecutor``.

``mcp-run-python`` is installed by ``make bench`` into its own virtualenv, ``.tools/peers`` (it pins
another ``mcp`` than ours). It starts Deno itself, so the Deno of our virtualenv (the PyPI package
``deno``) is put first on its PATH, with its own ``DENO_DIR`` in ``.tools/peers/deno``. When it cannot
run here, what failed is recorded (URLs reduced to their path) instead of a number.

``LocalPythonExecutor`` is the AST interpreter that our ``local`` runner runs inside its sandboxed
worker; called in this process, with no process, sandbox or protocol around it, it is the floor.

FastMCP (``fastmcp[code-mode]``, PyPI) goes into ``.tools/peers/fastmcp``; ``bench/fastmcp_peer.py``, run
with that virtualenv's Python, is its CodeMode in front of the same fixture server as ours
(``fastmcp_code_mode``). A warm pydantic-monty pool (``pydantic_monty.Monty``, a dependency of ours) and
smolagents are also measured in a process of their own (``footprint``), for their memory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import anyio
from common import FIXTURE, ROOT, median, percentile, stdio, timed
from mcp import Client

PEERS = ROOT / ".tools" / "peers"
PEER_VERSION = "0.0.22"
"""The version ``make bench`` installs (pinned in the Makefile)."""
MCP_RUN_PYTHON = PEERS / "bin" / "mcp-run-python"
FASTMCP_VERSION = "4.1.6"
"""The version of ``fastmcp[code-mode]`` that ``make bench`` installs (pinned in the Makefile)."""
FASTMCP_PYTHON = PEERS / "fastmcp" / "bin" / "python"
FASTMCP_SERVER = Path(__file__).with_name("fastmcp_peer.py")
FASTMCP_NAME = f"FastMCP {FASTMCP_VERSION} CodeMode (pydantic-monty sandbox)"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_URL_HOST = re.compile(r"https?://[^/\s'\"]+")


@dataclass
class PeerResult:
    name: str
    first_ms: float = float("nan")
    start_to_first_ms: float = float("nan")
    warm: list[float] = field(default_factory=list)
    failure: str | None = None


def scrub(text: str) -> str:
    """Terminal colours out, and every URL's host replaced by ``<host>``."""
    return _URL_HOST.sub("<host>", _ANSI.sub("", text))


def error_lines(text: str, limit: int = 6) -> str:
    """The lines of a log that say what went wrong, deduplicated, joined with `` / ``."""
    found: list[str] = []
    fetching = False
    for raw in scrub(text).splitlines():
        line = raw.strip().removeprefix("install: ").removeprefix("debug: ").strip()
        wanted = line.lower().startswith("error") or "failed" in line or re.search(r"\w(Error|Exception):", line)
        if "attempting to load from" in line and not fetching:  # Pyodide fetching its packages
            wanted = fetching = True
        noise = line.startswith(("at ", "raise ")) or "Download " in line or "Initialize " in line
        if wanted and line not in found and not noise:
            found.append(line[:240])
    return " / ".join(found[:limit]) or scrub(text).strip()[-400:]


def _peer_env() -> dict[str, str]:
    from mcp_code_mode.runners.deno import find_deno

    env = dict(os.environ)
    deno = find_deno()
    if deno:
        env["PATH"] = f"{Path(deno).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DENO_DIR"] = str(PEERS / "deno")
    return env


async def mcp_run_python(calls: int, gap: float, timeout: float) -> PeerResult:
    """``mcp-run-python stdio`` through a real MCP client: first call after start, then warm calls."""
    result = PeerResult("mcp-run-python (pydantic, PyPI)")
    if not MCP_RUN_PYTHON.exists():
        result.failure = f"not installed ({MCP_RUN_PYTHON.relative_to(ROOT)} missing; `make bench` installs it)"
        return result
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            with anyio.fail_after(timeout):
                spawned = time.perf_counter()
                async with stdio(str(MCP_RUN_PYTHON), ["stdio"], _peer_env(), errlog) as client:
                    initialized = time.perf_counter()
                    for i in range(calls + 1):
                        elapsed, answer = await timed(
                            lambda: client.call_tool("run_python_code", {"python_code": "print(1)"})
                        )
                        text = " ".join(getattr(block, "text", "") for block in answer.content)
                        if answer.is_error or "<status>success</status>" not in text or "1" not in text:
                            raise RuntimeError(f"print(1) did not succeed: {text[:300]}")
                        if i == 0:
                            result.first_ms = elapsed
                            result.start_to_first_ms = (initialized - spawned) * 1000 + elapsed
                        else:
                            result.warm.append(elapsed)
                        await anyio.sleep(gap)
        except Exception as exc:  # the boundary of a peer we do not control: whatever it raised is the finding
            result.failure = failure_text(exc, errlog)
    return result


def failure_text(exc: BaseException, errlog: TextIO) -> str:
    """What a peer's client got (the first leaf of an exception group) and what its server's stderr said."""
    errlog.seek(0)
    stderr = errlog.read()
    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    what = f"{type(leaf).__name__}: {scrub(str(leaf))[:200]}"
    return f"the client got {what}; the server's stderr said: {error_lines(stderr)}"


def patched_attempt(timeout: float) -> str:
    """Run mcp-run-python's own ``example`` once more with its only JSR import (``@std/cli``'s ``parseArgs``)
    replaced by a few lines, to see what fails next. Returns what it printed that says so."""
    from mcp_code_mode.runners.deno import find_deno

    source = next(PEERS.glob("lib/python*/site-packages/mcp_run_python/deno"), None)
    deno = find_deno()
    if source is None or deno is None:
        return "not tried (mcp-run-python or deno missing)"
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        folder = Path(tmp) / "mcp-run-python"
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("node_modules"))
        main = folder / "src" / "main.ts"
        text = main.read_text(encoding="utf-8")
        replacement = (
            "function parseArgs(argv: string[], o: { default: Record<string, string> }): Record<string, string> {\n"
            "  const flags: Record<string, string> = { ...o.default }\n"
            "  for (const a of argv) { const m = a.match(/^--([^=]+)=(.*)$/); if (m) flags[m[1]!] = m[2]! }\n"
            "  return flags\n}"
        )
        main.write_text(text.replace("import { parseArgs } from '@std/cli/parse-args'", replacement), encoding="utf-8")
        (folder / "deno.lock").unlink(missing_ok=True)
        argv = [
            deno, "run", "--allow-net", "--allow-read=./node_modules", "--allow-write=./node_modules",
            "--node-modules-dir=auto", "src/main.ts", "example",
        ]  # fmt: skip
        try:
            done = subprocess.run(
                argv, cwd=folder, env=_peer_env(), capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return f"no answer within {timeout:g} s"
    if done.returncode == 0:
        return "its example ran (exit status 0)"
    return f"exit status {done.returncode}: {error_lines(done.stdout + done.stderr)}"


def smolagents_floor(calls: int) -> PeerResult:
    """``LocalPythonExecutor('print(1)')`` in this process: first call, then ``calls`` more."""
    from smolagents.local_python_executor import LocalPythonExecutor

    result = PeerResult("smolagents LocalPythonExecutor, in-process (no isolation)")
    executor = LocalPythonExecutor(additional_authorized_imports=[])
    executor.send_tools({})
    for i in range(calls + 1):
        started = time.perf_counter()
        output = executor("print(1)")
        elapsed = (time.perf_counter() - started) * 1000
        if output.logs != "1\n":
            raise SystemExit(f"LocalPythonExecutor printed {output.logs!r}")
        if i == 0:
            result.first_ms = result.start_to_first_ms = elapsed
        else:
            result.warm.append(elapsed)
    return result


def row(result: PeerResult) -> list[str]:
    """A row of section 2's peer table."""
    from common import ms

    if result.failure:
        return [result.name, "could not run here (see notes)", "", "", ""]
    return [
        result.name,
        ms(result.first_ms),
        ms(result.start_to_first_ms),
        ms(median(result.warm)),
        ms(percentile(result.warm, 0.95)),
    ]


# ----- FastMCP CodeMode -------------------------------------------------------------------------


def fastmcp_missing() -> str | None:
    """Why FastMCP's CodeMode cannot start here (not installed, or its imports fail), else None."""
    if not FASTMCP_PYTHON.exists():
        return f"not installed ({FASTMCP_PYTHON.relative_to(ROOT)} missing; `make bench` installs it)"
    probe = "import fastmcp.experimental.transforms.code_mode, pydantic_monty"
    try:
        done = subprocess.run(
            [str(FASTMCP_PYTHON), "-c", probe], capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        return "importing fastmcp took more than 120 s"
    return f"its imports failed: {error_lines(done.stderr)}" if done.returncode else None


def fastmcp_env(**fixture_env: str) -> dict[str, str]:
    """This process's environment without our settings, FastMCP logging warnings only, plus ``fixture_env``
    (the fixture server inherits it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODE_MODE_", "FASTMCP_"))}
    return env | {"FASTMCP_LOG_LEVEL": "WARNING"} | fixture_env


@asynccontextmanager
async def fastmcp_code_mode(errlog: TextIO, **fixture_env: str) -> AsyncGenerator[Client]:
    """FastMCP's CodeMode (``bench/fastmcp_peer.py``) proxying the fixture server, through a real stdio
    client; ``fixture_env``: the fixture server's variables (``FIXTURE_SYNTHETIC_TOOLS``)."""
    args = [str(FASTMCP_SERVER), sys.executable, str(FIXTURE)]
    async with stdio(str(FASTMCP_PYTHON), args, fastmcp_env(**fixture_env), errlog) as client:
        yield client


async def fastmcp_execute(client: Client, code: str) -> str:
    """CodeMode's ``execute`` of ``code``: the text of its answer; RuntimeError if it failed."""
    answer = await client.call_tool("execute", {"code": code})
    text = " ".join(getattr(block, "text", "") for block in answer.content)
    if answer.is_error:
        raise RuntimeError(f"execute failed: {scrub(text)[:300]}")
    return text


async def fastmcp_latency(calls: int, gap: float, timeout: float) -> PeerResult:
    """``return 1`` through FastMCP's CodeMode: first call after start, then warm calls."""
    result = PeerResult(FASTMCP_NAME)
    missing = await anyio.to_thread.run_sync(fastmcp_missing)
    if missing:
        result.failure = missing
        return result
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            with anyio.fail_after(timeout):
                spawned = time.perf_counter()
                async with fastmcp_code_mode(errlog) as client:
                    initialized = time.perf_counter()
                    for i in range(calls + 1):
                        elapsed, text = await timed(lambda: fastmcp_execute(client, "return 1"))
                        if text.strip() != "1":
                            raise RuntimeError(f"return 1 answered {text[:300]!r}")
                        if i == 0:
                            result.first_ms = elapsed
                            result.start_to_first_ms = (initialized - spawned) * 1000 + elapsed
                        else:
                            result.warm.append(elapsed)
                        await anyio.sleep(gap)
        except Exception as exc:  # the boundary of a peer we do not control: whatever it raised is the finding
            result.failure = failure_text(exc, errlog)
    return result


# ----- a warm pydantic-monty pool, and each in-process peer's memory ------------------------------


def monty_pool(calls: int) -> PeerResult:
    """``return 1`` on a warm ``pydantic_monty.Monty`` pool (one ``monty`` process) held by this process:
    a checkout, the run and the return of the worker each time; the first includes the pool's start."""
    from pydantic_monty import Monty

    result = PeerResult("pydantic-monty pool (`Monty`, 1 warm process), host in this process")
    started = time.perf_counter()
    with Monty(min_processes=1) as pool:
        for i in range(calls + 1):
            begun = time.perf_counter()
            with pool.checkout() as session:
                value = session.feed_run("return 1")
            elapsed = (time.perf_counter() - begun) * 1000
            if value != 1:
                raise SystemExit(f"Monty answered {value!r} to return 1")
            if i == 0:
                result.first_ms = elapsed
                result.start_to_first_ms = (time.perf_counter() - started) * 1000
            else:
                result.warm.append(elapsed)
    return result


FOOTPRINT = """
import json, os, sys, time
from pathlib import Path

def tree(root):
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, frontier = [root], [root]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found

def memory():
    pss = rss = 0
    pids = tree(os.getpid())
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                pss += int(line.split()[1])
            elif line.startswith("Rss:"):
                rss += int(line.split()[1])
    return {"pss_kib": pss, "rss_kib": rss, "processes": len(pids)}

def settled():
    time.sleep(0.5)
    return memory()

times = []
if sys.argv[1] == "monty":
    from pydantic_monty import Monty
    with Monty(min_processes=1) as pool:
        for _ in range(int(sys.argv[2])):
            started = time.perf_counter()
            with pool.checkout() as session:
                assert session.feed_run("return 1") == 1
            times.append((time.perf_counter() - started) * 1000)
        out = settled()
else:
    from smolagents.local_python_executor import LocalPythonExecutor
    executor = LocalPythonExecutor(additional_authorized_imports=[])
    executor.send_tools({})
    for _ in range(int(sys.argv[2])):
        started = time.perf_counter()
        assert executor("print(1)").logs == "1\\n"
        times.append((time.perf_counter() - started) * 1000)
    out = settled()
print(json.dumps(out | {"times": times}))
"""
"""Run as ``python -c FOOTPRINT monty|smolagents N``: N trivial runs, then its process tree's PSS, as JSON."""


def footprint(which: str, runs: int = 50) -> dict[str, Any]:
    """A fresh Python process holding a warm Monty pool (``monty``) or a smolagents ``LocalPythonExecutor``
    (``smolagents``) after ``runs`` trivial runs: its tree's PSS and RSS in KiB, processes, and run times."""
    done = subprocess.run(
        [sys.executable, "-c", FOOTPRINT, which, str(runs)], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout)
