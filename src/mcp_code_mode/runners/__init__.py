"""Runners: one module per runner behind the ``Runner`` protocol (``base.py``).

``build_runners`` is the one place that decides which runners a server has.
"""

from __future__ import annotations

from ..config import Settings
from .base import Runner
from .local import LocalRunner
from .pyodide import PyodideRunner

# The languages a script may name, with their aliases.
LANGUAGE_ALIASES: dict[str, str] = {"python": "python", "py": "python", "python3": "python"}


def build_runners(settings: Settings) -> dict[str, Runner]:
    """Every runner this build offers, by name (not yet started)."""
    runners: list[Runner] = [
        LocalRunner(pool_size=settings.pool_size, workspace_root=settings.workspace_dir),
        PyodideRunner(settings),
    ]
    return {runner.name: runner for runner in runners}


def default_runner(settings: Settings, language: str) -> str:
    """The runner used for ``language`` when a request names none."""
    return {"python": settings.python_runner}.get(language, "")


__all__ = ["LANGUAGE_ALIASES", "Runner", "build_runners", "default_runner"]
