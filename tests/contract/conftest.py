"""One engine for the runner contract suite: the fixture server, a small output cap, every runner warm.

The cases in this folder run the same script on every runner (``local``, ``cpython``, ``pyodide`` and
``monty`` in Python, ``deno`` in JavaScript) and expect the same ``RunResult``. A runner whose program is missing on
this host (Deno, Pyodide's files) is skipped with the reason; everything else runs.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mcp_code_mode import CodeMode

from ..conftest import ROOT, fixture_entry, make_config

RUNNERS = ("local", "cpython", "pyodide", "deno", "monty")

MAX_OUTPUT_CHARS = 1000
"""The engine's output cap (``CODE_MODE_MAX_OUTPUT_CHARS``), also the cap of a return value's JSON."""

# Pyodide's memory snapshot is keyed by the versions of Pyodide, Deno and the worker's sources, so a
# folder kept between sessions is safe and saves the several seconds of making it on every run.
PYODIDE_CACHE = Path(tempfile.gettempdir()) / "mcp-code-mode-contract-pyodide"


def find_deno() -> str | None:
    """Deno from the PyPI package ``deno`` (what the runners use), else one on PATH."""
    with contextlib.suppress(ImportError, OSError, RuntimeError):
        from deno import find_deno_bin

        path = find_deno_bin()
        if path and Path(path).exists():
            return str(path)
    return shutil.which("deno")


def unavailable(runner: str) -> str | None:
    """Why ``runner`` cannot run on this host, or None."""
    if runner in ("deno", "pyodide") and find_deno() is None:
        return "Deno is not installed (the PyPI package `deno`: make install)"
    if runner == "pyodide" and not (ROOT / "node_modules" / "pyodide" / "pyodide.mjs").exists():
        return "Pyodide is not installed (node_modules/pyodide: make install)"
    if runner == "monty":
        from mcp_code_mode.runners.monty import find_monty

        found = find_monty()
        return found if isinstance(found, str) else None
    return None


def available(name: str) -> str:
    """The runner's name, or the test skipped saying why this host lacks it."""
    if (reason := unavailable(name)) is not None:
        pytest.skip(f"runner {name} unavailable: {reason}")
    return name


@pytest.fixture(params=RUNNERS)
def runner(request: pytest.FixtureRequest) -> str:
    return available(request.param)


@pytest.fixture(scope="module")
async def engine(shared_dirs: dict[str, Path]) -> AsyncIterator[CodeMode]:
    """One engine over the fixture server, shared by every case and runner of a module."""
    config = make_config(
        {"fixture": fixture_entry()},
        workspace_dir=shared_dirs["runs"],
        max_output_chars=MAX_OUTPUT_CHARS,
        pool_size=2,
        cpython_pool_size=1,
        pyodide_pool_size=2,
        pyodide_cache_dir=PYODIDE_CACHE,
        warmup_timeout=120,
    )
    async with CodeMode(config) as cm:
        await cm.ready()  # every runner warm: each case times its own run, not a worker's start
        yield cm
