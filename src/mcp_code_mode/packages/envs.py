"""Content-addressed package environments that install once.

A Python environment is a directory made by ``uv pip install --target`` under
``<cache dir>/envs/<key>``, where the key hashes (language, runner, sorted requirements,
interpreter version). Sandboxes mount it read-only. Concurrent requests for the same set install
once (a file lock, across processes too); an install happens in a temporary directory that is
renamed into place only when complete, so a failed or interrupted install leaves nothing behind.
Only wheels are installed: building an sdist would run its code on the host, outside any sandbox.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ..errors import PackageError

logger = logging.getLogger(__name__)

COMPLETE = ".complete.json"
LOCK_POLL = 0.05


@dataclass(frozen=True)
class Environment:
    key: str
    path: Path
    requirements: tuple[str, ...]
    installed: bool
    """True when this call installed it (false: it was already there)."""
    seconds: float
    """Time spent installing or waiting for another installer."""


def uv_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """uv's environment: this process's, with the operating system's certificate store trusted.

    uv otherwise trusts only its own bundle (webpki roots), so behind a TLS-inspecting proxy every install
    fails with ``invalid peer certificate: UnknownIssuer`` unless the environment says otherwise. Newer uv
    releases read ``UV_SYSTEM_CERTS``, older ones ``UV_NATIVE_TLS``; ``SSL_CERT_FILE``, when set, is honoured by
    both. A value the user set for either is kept.
    """
    env = dict(os.environ if environ is None else environ)
    for name in ("UV_SYSTEM_CERTS", "UV_NATIVE_TLS"):
        env.setdefault(name, "1")
    return env


def find_uv() -> str | None:
    try:
        from uv import find_uv_bin  # pyright: ignore[reportMissingImports, reportUnknownVariableType]

        return str(find_uv_bin())  # pyright: ignore[reportUnknownArgumentType]
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


class PythonEnvironments:
    """Installs whitelisted requirements with uv into cached, read-only-mounted directories."""

    def __init__(self, root: Path, *, python: Path | None = None, install_timeout: float = 300.0) -> None:
        self.root = root
        self.python = python or Path(getattr(sys, "_base_executable", sys.executable))
        self.install_timeout = install_timeout
        self.version = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"

    def key(self, runner: str, requirements: list[str]) -> str:
        blob = json.dumps(["python", runner, sorted(requirements), self.version, sys.platform], separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    async def ensure(self, runner: str, requirements: list[str]) -> Environment:
        """The environment for these (validated) requirements, installing it first if needed."""
        key = self.key(runner, requirements)
        path = self.root / key
        started = time.perf_counter()
        if (path / COMPLETE).is_file():
            self._touch(path)
            return Environment(key, path, tuple(requirements), False, time.perf_counter() - started)
        self.root.mkdir(parents=True, exist_ok=True)
        async with self._lock(key):
            if (path / COMPLETE).is_file():  # another process or task installed it while we waited
                self._touch(path)
                return Environment(key, path, tuple(requirements), False, time.perf_counter() - started)
            await self._install(path, runner, requirements)
        return Environment(key, path, tuple(requirements), True, time.perf_counter() - started)

    @contextlib.asynccontextmanager
    async def _lock(self, key: str):  # type: ignore[no-untyped-def]
        with open(self.root / f"{key}.lock", "a+", encoding="utf-8") as handle:
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await anyio.sleep(LOCK_POLL)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    async def _install(self, path: Path, runner: str, requirements: list[str]) -> None:
        uv = find_uv()
        if uv is None:
            raise PackageError("cannot install packages: uv is not installed (pip install uv)")
        temporary = self.root / f".tmp-{path.name}-{uuid.uuid4().hex[:8]}"
        temporary.mkdir(mode=0o755)
        argv = [
            uv, "pip", "install", "--target", str(temporary), "--python", str(self.python),
            "--only-binary", ":all:", "--no-progress", "--quiet", *requirements,
        ]  # fmt: skip
        logger.info("installing %s for %s", " ".join(requirements), runner)
        try:
            with anyio.fail_after(self.install_timeout):
                proc = await anyio.run_process(argv, check=False, stdin=subprocess.DEVNULL, env=uv_environment())
            if proc.returncode != 0:
                raise PackageError(f"installing {' '.join(requirements)} failed: {_summary(proc.stderr)}")
            meta = {"requirements": requirements, "runner": runner, "python": self.version, "created": time.time()}
            (temporary / COMPLETE).write_text(json.dumps(meta), encoding="utf-8")
            _make_readable(temporary)
            os.rename(temporary, path)
        except TimeoutError:
            raise PackageError(
                f"installing {' '.join(requirements)} took longer than {self.install_timeout:g} s"
            ) from None
        finally:
            shutil.rmtree(temporary, ignore_errors=True)

    def _touch(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            os.utime(path / COMPLETE)

    # ----- management ----------------------------------------------------------------------

    def environments(self) -> Iterator[tuple[Path, dict[str, Any], float]]:
        """(path, metadata, last use) of every complete environment."""
        if not self.root.is_dir():
            return
        for path in sorted(self.root.iterdir()):
            marker = path / COMPLETE
            if path.is_dir() and marker.is_file():
                try:
                    meta = json.loads(marker.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    meta = {}
                yield path, meta, marker.stat().st_mtime

    def stats(self) -> dict[str, Any]:
        count, size = 0, 0
        for path, _, _ in self.environments():
            count += 1
            size += sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        return {"count": count, "bytes": size, "root": str(self.root)}

    def prune(self, unused_for: float) -> list[str]:
        """Remove environments not used for ``unused_for`` seconds (and leftovers of interrupted installs)."""
        removed: list[str] = []
        cutoff = time.time() - unused_for
        for path, meta, last_used in list(self.environments()):
            if last_used < cutoff:
                shutil.rmtree(path, ignore_errors=True)
                (self.root / f"{path.name}.lock").unlink(missing_ok=True)
                removed.append(f"{path.name} ({' '.join(meta.get('requirements', []))})")
        if self.root.is_dir():
            for leftover in self.root.glob(".tmp-*"):
                if leftover.stat().st_mtime < cutoff:
                    shutil.rmtree(leftover, ignore_errors=True)
        return removed


def _summary(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    interesting = [line for line in lines if not line.startswith(("Using ", "Resolved ", "Prepared "))]
    return " | ".join((interesting or lines)[-6:])[:1500] or "uv gave no reason"


def _make_readable(root: Path) -> None:
    """Sandboxed workers run as another uid: everything must be world-readable (and dirs traversable)."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            with contextlib.suppress(OSError):
                mode = os.lstat(os.path.join(dirpath, name)).st_mode
                os.chmod(os.path.join(dirpath, name), (mode | 0o444) & 0o755)
        del dirnames  # walked by os.walk itself
