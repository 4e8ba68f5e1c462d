"""Node 22 and the MCP tools that check the server from outside, installed into ./.tools from npm.

The conformance suite and the Inspector CLI v2 need Node >= 22.19; the machine may have an older
Node. ``scripts/node-tools/package.json`` pins Node itself (the npm ``node`` package ships the
binary) and both tools; ``ensure()`` copies it and its lock file into ./.tools and runs ``npm install``
there once (again when the pins change). Also the server process that the scripts check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "scripts" / "node-tools"
TOOLS = ROOT / ".tools"
BIN = TOOLS / "node_modules" / ".bin"
STAMP = TOOLS / "node_modules" / ".installed"
VENV_BIN = Path(sys.executable).parent


def ensure() -> dict[str, str]:
    """Install the pinned tools if needed; return an environment whose ``node`` is Node 22."""
    lock = SPEC / "package-lock.json"
    if not STAMP.exists() or STAMP.stat().st_mtime < max(lock.stat().st_mtime, (SPEC / "package.json").stat().st_mtime):
        if shutil.which("npm") is None:
            sys.exit("npm is needed to install Node 22 and the MCP tools into .tools/")
        TOOLS.mkdir(exist_ok=True)
        shutil.copy2(SPEC / "package.json", TOOLS / "package.json")
        shutil.copy2(lock, TOOLS / "package-lock.json")
        print("installing Node 22, the conformance suite and the Inspector CLI into .tools/ ...", file=sys.stderr)
        # `npm install` with the copied lock file: `npm ci` trips over optional per-platform entries.
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=TOOLS, check=True)
        STAMP.touch()
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    version = subprocess.run(["node", "--version"], env=env, capture_output=True, text=True, check=True).stdout
    if not version.startswith("v22."):
        sys.exit(f"expected Node 22 from .tools, got {version.strip()}")
    return env


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_server(
    config: Path, log: Path, *extra: str, env: dict[str, str] | None = None
) -> Generator[tuple[str, subprocess.Popen[bytes]]]:
    """``mcp-code-mode serve --http`` on a free loopback port, until the block ends."""
    port = free_port()
    argv = [str(VENV_BIN / "mcp-code-mode"), "serve", "--http", "--port", str(port), "--config", str(config), *extra]
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                sys.exit(f"the server exited with {process.returncode}; see {log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                sys.exit(f"the server did not answer within 90 s; see {log}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    ensure()
    print(f"tools ready in {BIN}")
