"""Shared fixtures: the real downstream servers (npm filesystem and memory, the Python fixture server)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.config import CodeModeConfig, Settings
from mcp_code_mode.engine import CodeMode

ROOT = Path(__file__).resolve().parent.parent
NODE_BIN = ROOT / "node_modules" / ".bin"
FIXTURE_SERVER = Path(__file__).resolve().parent / "fixtures" / "fixture_server.py"


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
    """A config over ``servers``; no warm Pyodide interpreters unless a test asks (each is a Deno process)."""
    settings.setdefault("pyodide_pool_size", 0)
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
    except FileNotFoundError:
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
