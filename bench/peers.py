"""The peers of section 2: pydantic's ``mcp-run-python`` (PyPI) and smolagents' ``LocalPythonExecutor``.

``mcp-run-python`` is installed by ``make bench`` into its own virtualenv, ``.tools/peers`` (it pins
another ``mcp`` than ours). It starts Deno itself, so the Deno of our virtualenv (the PyPI package
``deno``) is put first on its PATH, with its own ``DENO_DIR`` in ``.tools/peers/deno``. When it cannot
run here, what failed is recorded (URLs reduced to their path) instead of a number.

``LocalPythonExecutor`` is the AST interpreter that our ``local`` runner runs inside its sandboxed
worker; called in this process, with no process, sandbox or protocol around it, it is the floor.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from common import ROOT, median, percentile, stdio, timed

PEERS = ROOT / ".tools" / "peers"
PEER_VERSION = "0.0.22"
"""The version ``make bench`` installs (pinned in the Makefile)."""
MCP_RUN_PYTHON = PEERS / "bin" / "mcp-run-python"
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
            errlog.seek(0)
            stderr = errlog.read()
            leaf = exc
            while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
                leaf = leaf.exceptions[0]
            what = f"{type(leaf).__name__}: {scrub(str(leaf))[:200]}"
            result.failure = f"the client got {what}; the server's stderr said: {error_lines(stderr)}"
    return result


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
