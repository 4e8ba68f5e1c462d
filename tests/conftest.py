"""Shared fixtures: the real downstream servers (npm filesystem and memory, the Python fixture server)."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_code_mode.config import CodeModeConfig, Settings
from mcp_code_mode.engine import CodeMode

ROOT = Path(__file__).resolve().parent.parent
NODE_BIN = ROOT / "node_modules" / ".bin"
FIXTURE_SERVER = Path(__file__).resolve().parent / "fixtures" / "fixture_server.py"

# The test suite never writes to the user's real cache: every engine, CLI call and server subprocess
# started by a test uses this directory unless the test gives its own.
CACHE_DIR = Path(tempfile.mkdtemp(prefix="mcp-code-mode-test-cache-"))
atexit.register(shutil.rmtree, CACHE_DIR, ignore_errors=True)
os.environ["CODE_MODE_CACHE_DIR"] = str(CACHE_DIR)


_enter = CodeMode.__aenter__


async def _enter_settled(self: CodeMode) -> CodeMode:
    """In tests, entering an engine also waits for its downstream servers and its eager runners' first warm
    worker (what start-up itself no longer waits for): a test's first run then starts from a known state, as it
    would a while after the server started. Tests of start-up itself spawn the server (tests/e2e/test_startup.py)."""
    await _enter(self)
    await self.ready(self.hosts.eager)
    return self


CodeMode.__aenter__ = _enter_settled


@pytest.fixture
def entered_as_served() -> Generator[None]:
    """Engines entered as the server and the CLI enter them: without the wait above, for tests of code that must
    wait for the downstream servers itself (``doctor``, ``mcp-code-mode stubs``), which the wait would hide."""
    CodeMode.__aenter__ = _enter
    try:
        yield
    finally:
        CodeMode.__aenter__ = _enter_settled


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def npm_server(name: str) -> str:
    path = NODE_BIN / f"mcp-server-{name}"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make install` (npm ci) first")
    return str(path)


def filesystem_entry(root: Path) -> dict[str, Any]:
    return {"command": npm_server("filesystem"), "args": [str(root)]}


def memory_entry(path: Path) -> dict[str, Any]:
    return {"command": npm_server("memory"), "env": {"MEMORY_FILE_PATH": str(path)}}


def fixture_entry(**env: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(FIXTURE_SERVER)], "env": dict(env)}


def make_config(servers: dict[str, dict[str, Any]], **settings: Any) -> CodeModeConfig:
    """A config in code; the cache goes to the suite's temporary directory with the hashing embedder by default."""
    settings.setdefault("cache_dir", CACHE_DIR)
    settings.setdefault("cache_embedder", "hashing")
    settings.setdefault("pyodide_pool_size", 0)  # no warm Pyodide interpreters unless a test asks
    if os.environ.get("CODE_MODE_TEST_DENO_ISOLATES"):  # the suite again with the deno runner's isolate mode
        settings.setdefault("deno_isolates", os.environ["CODE_MODE_TEST_DENO_ISOLATES"] not in ("0", "false"))
    return CodeModeConfig.from_servers(servers, settings=Settings(**settings), env=dict(os.environ))


@pytest.fixture(scope="module")
def shared_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("servers")
    files = base / "files"
    files.mkdir()
    return {"files": files, "memory": base / "memory.jsonl", "runs": base / "runs"}


@pytest.fixture(scope="module")
async def engine(shared_dirs: dict[str, Path]) -> AsyncIterator[CodeMode]:
    """One engine over filesystem, memory and fixture servers, shared by a test module."""
    config = make_config(
        {
            "filesystem": filesystem_entry(shared_dirs["files"]),
            "memory": memory_entry(shared_dirs["memory"]),
            "fixture": fixture_entry(),
        },
        workspace_dir=shared_dirs["runs"],
        # The tests' HTTP servers on loopback stand for hosts on the internet: opened to the egress proxy
        # (tests/e2e/test_egress.py proves what a default policy refuses).
        network_allow_private="127.0.0.1",
    )
    async with CodeMode(config) as cm:
        yield cm


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0); it is gone for our purposes
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # it went between the two looks (read() says ESRCH)
        return False


def child_pids(parent: int) -> set[int]:
    """Every descendant of ``parent``, from /proc."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent:
            found.add(int(entry.name))
            found |= child_pids(int(entry.name))
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    """A real ``mcp-code-mode serve`` child process."""

    process: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def write_config(path: Path, servers: dict[str, dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"servers": servers}), encoding="utf-8")
    return path


def server_env(**settings: str) -> dict[str, str]:
    """The test process's environment without CODE_MODE_* settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_MODE_")}
    return env | {f"CODE_MODE_{k.upper()}": v for k, v in settings.items()}


def http_server(config: Path, log: Path, *args: str, **settings: str) -> AbstractContextManager[ServerProcess]:
    """Start ``mcp-code-mode serve --http`` on a free loopback port with this process's environment plus
    ``settings``, and wait until it answers /healthz."""
    return http_server_in(server_env(**settings), config, log, *args)


@contextmanager
def http_server_in(
    env: dict[str, str], config: Path, log: Path, *args: str, cwd: Path | None = None
) -> Generator[ServerProcess]:
    """``http_server`` in ``env``: the whole environment (e.g. a desktop client's minimal one)."""
    port = free_port()
    argv = [sys.executable, "-m", "mcp_code_mode.cli", "serve", "--http", "--port", str(port), "--config", str(config)]
    with log.open("wb") as sink:
        process = subprocess.Popen([*argv, *args], stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, env=env, cwd=cwd)
    server = ServerProcess(process, log, f"http://127.0.0.1:{port}/mcp")
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited with {process.returncode}:\n{server.log_text()}")
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer within 60 s:\n{server.log_text()}")
            time.sleep(0.05)  # polling a port: there is no event to wait on
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def http_client(url: str, token: str | None = None, **options: Any) -> AsyncGenerator[Client]:
    """A real MCP client over streamable HTTP, sending ``token`` as a bearer token."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy", **options) as client:
            yield client


@asynccontextmanager
async def executing(client: Client, code: str) -> AsyncGenerator[list[dict[str, Any]]]:
    """Run ``code`` (Python, cache off) as ``execute_code`` in the background while the body runs; the
    list it yields gets the result's structured content once the call answers (empty until then)."""
    done: list[dict[str, Any]] = []

    async def call() -> None:
        result = await client.call_tool("execute_code", {"language": "python", "code": code, "cache": "off"})
        assert result.structured_content is not None
        done.append(result.structured_content)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            yield done
