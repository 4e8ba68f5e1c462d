"""Packages for the ``pyodide`` runner: which ones a run may ask for, and where their files come from.

Requests arrive validated against the package whitelist (``packages.policy``). A package is

- a whitelisted package with a pure-Python wheel: the host resolves it and its dependencies with pip
  (``py3-none-any`` wheels for Pyodide's Python only) into the wheel cache, and the worker unpacks
  them into the fresh interpreter before the script runs (Deno itself needs no network for this);
- or a package that Pyodide builds itself (numpy, pandas: listed in ``pyodide-lock.json`` with a
  WebAssembly wheel): loaded by Pyodide from ``CODE_MODE_PYODIDE_INDEX_URL`` where one is set.

Anything else is refused with an error that names the package.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..errors import PackageError
from ..packages import Whitelist

logger = logging.getLogger(__name__)

PIP_TIMEOUT = 180.0
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")


def canonical(name: str) -> str:
    """PEP 503 normalized name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class PackagePlan:
    wheels: tuple[str, ...] = ()
    """File names in the wheel cache to unpack, dependencies included."""
    pyodide: tuple[str, ...] = ()
    """Names for Pyodide's ``loadPackage`` (from the configured index)."""


class PyodidePackages:
    """Turns a run's ``packages`` into a ``PackagePlan``; resolutions are cached for the server's life."""

    def __init__(
        self, *, wheels_dir: Path, lock: Mapping[str, Any], index_url: str | None, whitelist: Whitelist
    ) -> None:
        self.wheels_dir = wheels_dir
        self.whitelist = whitelist
        self.index_url = index_url
        info = lock.get("info") or {}
        self.python_version = ".".join(str(info.get("python", "3.12")).split(".")[:2])
        self._builds: dict[str, str] = {}
        for name, entry in (lock.get("packages") or {}).items():
            file_name = str(entry.get("file_name", ""))
            if file_name and not file_name.endswith("-none-any.whl"):
                self._builds[canonical(str(entry.get("name", name)))] = str(name)
        self._resolved: dict[tuple[str, ...], tuple[str, ...]] = {}

    async def plan(self, requested: Sequence[str]) -> PackagePlan:
        pure: list[str] = []
        builds: list[str] = []
        for spec in requested:
            match = _NAME.match(spec)
            if match is None:
                raise PackageError(f"{spec!r} is not a package requirement")
            name = canonical(match.group(1))
            if name in self._builds:
                if not self.index_url:
                    raise PackageError(
                        f"{name} needs Pyodide's own build (it has no pure-Python wheel); set "
                        "CODE_MODE_PYODIDE_INDEX_URL to a Pyodide package index to use it"
                    )
                builds.append(self._builds[name])
            elif name in self.whitelist.python:
                pure.append(spec.strip())
            else:
                raise PackageError(f"{name} is not in the allowed packages (see list_allowed_packages)")
        wheels = await self.resolve(pure) if pure else ()
        return PackagePlan(wheels=wheels, pyodide=tuple(builds))

    async def resolve(self, specs: Sequence[str]) -> tuple[str, ...]:
        """Pure-Python wheels for ``specs`` and their dependencies, downloaded into the wheel cache."""
        key = tuple(sorted(specs))
        if key in self._resolved:
            return self._resolved[key]
        self.wheels_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="wheels-", dir=self.wheels_dir) as scratch:
            result = await self._pip(["download", "--only-binary=:all:", *self._target(), "-d", scratch, *specs])
            if result.returncode != 0:
                raise PackageError(self._explain(result.stderr.decode("utf-8", "replace"), specs))
            names: list[str] = []
            for wheel in sorted(Path(scratch).glob("*.whl")):
                shutil.move(str(wheel), self.wheels_dir / wheel.name)
                names.append(wheel.name)
        self._resolved[key] = tuple(names)
        return self._resolved[key]

    async def micropip(self, version: str) -> Path | None:
        """micropip's PyPI wheel in the wheel cache (downloaded once), or None where pip cannot get it."""
        found = sorted(self.wheels_dir.glob(f"micropip-{version}-*.whl"))
        if found:
            return found[0]
        self.wheels_dir.mkdir(parents=True, exist_ok=True)
        args = ["download", "--no-deps", "--only-binary=:all:", *self._target(), "-d", str(self.wheels_dir)]
        result = await self._pip([*args, f"micropip=={version}"])
        if result.returncode != 0:
            logger.warning("pyodide: micropip is not available: %s", result.stderr.decode("utf-8", "replace")[-500:])
            return None
        found = sorted(self.wheels_dir.glob(f"micropip-{version}-*.whl"))
        return found[0] if found else None

    def _target(self) -> list[str]:
        return ["--python-version", self.python_version, "--implementation", "py", "--abi", "none", "--platform", "any"]

    async def _pip(self, args: list[str]) -> subprocess.CompletedProcess[bytes]:
        argv = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet", *args]
        with anyio.fail_after(PIP_TIMEOUT):
            return await anyio.run_process(argv, check=False)

    def _explain(self, stderr: str, specs: Sequence[str]) -> str:
        missing = _NO_MATCH.search(stderr)
        if missing is not None:
            requirement = missing.group(1)
            source = "" if self.index_url else " and no Pyodide package index is set (CODE_MODE_PYODIDE_INDEX_URL)"
            return f"{requirement} has no pure-Python wheel for Pyodide's Python {self.python_version}{source}"
        lines = [line for line in stderr.strip().splitlines() if line.strip() and "Location" not in line]
        detail = lines[-1] if lines else "pip failed"
        return f"cannot install {', '.join(specs)} for the pyodide runner: {detail}"
