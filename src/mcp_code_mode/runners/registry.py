"""The runner registry: every runner plug-in this build has, found without naming one outside its module.

A runner is a module in this package that defines ``PLUGIN = RunnerPlugin(...)`` at its top level; only such
modules are imported (sandbox-side programs such as the Pyodide prelude live here too and are never imported
by the host), and modules whose name starts with ``_`` are not runners. A separately installed package can
add one through the ``mcp_code_mode.runners`` entry-point group (``name = "package.module:PLUGIN"``).
Plug-ins are listed by their ``order``, then name; a name declared twice stops start-up.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import pkgutil
from collections.abc import Mapping
from pathlib import Path

from ..config import Settings
from ..errors import ConfigError, RunnerError
from ..packages import Whitelist
from ..sandbox import Sandbox
from .base import Runner, RunnerContext, RunnerPlugin

logger = logging.getLogger(__name__)

ENTRY_POINTS = "mcp_code_mode.runners"
_NOT_RUNNERS = frozenset({"base", "registry", "npm"})


@functools.cache
def plugins() -> tuple[RunnerPlugin, ...]:
    """Every runner plug-in, in listing order."""
    found: dict[str, RunnerPlugin] = {}

    def add(plugin: object, where: str) -> None:
        if not isinstance(plugin, RunnerPlugin):
            return
        if plugin.info.name in found:
            raise ConfigError(f"two runners are named {plugin.info.name!r} (the second in {where})")
        found[plugin.info.name] = plugin

    for folder in _package_path():
        for module in pkgutil.iter_modules([folder]):
            if module.name.startswith("_") or module.name in _NOT_RUNNERS or module.ispkg:
                continue
            try:
                source = (Path(folder) / f"{module.name}.py").read_text(encoding="utf-8")
            except OSError:
                continue
            if "\nPLUGIN = " not in source:
                continue
            imported = importlib.import_module(f"{__package__}.{module.name}")
            add(getattr(imported, "PLUGIN", None), imported.__name__)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINTS):
        try:
            add(entry.load(), entry.value)
        except Exception as exc:  # a broken third-party plug-in must not stop the built-in runners
            logger.warning("runner plug-in %s could not be loaded: %s", entry.value, exc)
    return tuple(sorted(found.values(), key=lambda p: (p.info.order, p.info.name)))


def _package_path() -> list[str]:
    from . import __path__ as path

    return list(path)


def plugin(name: str) -> RunnerPlugin | None:
    return next((p for p in plugins() if p.info.name == name), None)


def names() -> list[str]:
    return [p.info.name for p in plugins()]


def default_runners(settings: Settings) -> dict[str, str]:
    """The runner of each language when a request names none (``ConfigError`` for an unknown setting)."""
    chosen: dict[str, str] = {}
    for p in plugins():
        for language in p.info.default_for:
            chosen.setdefault(language, p.info.name)
    if settings.python_runner:
        named = plugin(settings.python_runner)
        if named is None or "python" not in named.info.languages:
            valid = [p.info.name for p in plugins() if "python" in p.info.languages]
            raise ConfigError(
                f"CODE_MODE_PYTHON_RUNNER={settings.python_runner!r} is not a Python runner (valid: {', '.join(valid)})"
            )
        chosen["python"] = named.info.name
    return chosen


def build_runners(
    settings: Settings, sandbox: Sandbox, whitelist: Whitelist
) -> tuple[dict[str, Runner], dict[str, str]]:
    """Every runner this host can offer, by name (built, not yet started), and why each other one cannot be
    built here (a ``RunnerError`` of its ``build``, e.g. Deno missing): the server serves without it."""
    context = RunnerContext(settings=settings, sandbox=sandbox, whitelist=whitelist)
    built: dict[str, Runner] = {}
    missing: dict[str, str] = {}
    for p in plugins():
        try:
            built[p.info.name] = p.build(context)
        except RunnerError as exc:
            missing[p.info.name] = str(exc)
            logger.warning("runner %s unavailable: %s", p.info.name, exc)
    return built, missing


def languages(runners: Mapping[str, Runner]) -> list[str]:
    return sorted({lang for r in runners.values() for lang in r.languages})


__all__ = ["ENTRY_POINTS", "build_runners", "default_runners", "languages", "names", "plugin", "plugins"]
