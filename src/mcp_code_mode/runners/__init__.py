"""Runners: one module per runner behind the ``Runner`` protocol (``base.py``).

``build_runners`` is the one place that decides which runners a server has.
"""

from __future__ import annotations

from ..config import Settings
from ..packages import Whitelist
from ..sandbox import Profile, Sandbox
from .base import Runner
from .cpython import CPythonRunner
from .deno import DenoRunner, default_deno_dir
from .local import LocalRunner
from .pyodide import PyodideRunner

# The languages a script may name, with their aliases.
LANGUAGE_ALIASES: dict[str, str] = {
    "python": "python",
    "py": "python",
    "python3": "python",
    "javascript": "javascript",
    "js": "javascript",
    "typescript": "typescript",
    "ts": "typescript",
}


def build_runners(settings: Settings, sandbox: Sandbox, whitelist: Whitelist) -> dict[str, Runner]:
    """Every runner this build offers, by name (not yet started)."""
    profile = Profile(network=settings.allow_network)
    runners: list[Runner] = [
        LocalRunner(sandbox=sandbox, pool_size=settings.pool_size, default_profile=profile),
        CPythonRunner(sandbox=sandbox, pool_size=settings.cpython_pool_size, default_profile=profile),
        DenoRunner(
            sandbox=sandbox,
            pool_size=settings.pool_size,
            deno_dir=default_deno_dir(settings),
            whitelist=whitelist,
        ),
        PyodideRunner(settings, sandbox, whitelist),
    ]
    return {runner.name: runner for runner in runners}


def default_runner(settings: Settings, language: str) -> str:
    """The runner used for ``language`` when a request names none."""
    return {"python": settings.python_runner, "javascript": "deno", "typescript": "deno"}.get(language, "")


__all__ = ["LANGUAGE_ALIASES", "Runner", "build_runners", "default_runner"]
