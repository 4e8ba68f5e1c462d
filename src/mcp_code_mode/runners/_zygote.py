"""Runners whose worker is the Python zygote (``sandboxed/worker.py``): ``local`` and ``cpython``.

One class, parametrised by the plug-in's ``RunnerInfo`` and the zygote's ``kind``; the difference between
the two is inside the sandbox (``kind`` selects the interpreter) and in what ``authorized_imports`` says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from ..bridge import RunResult
from ..egress import NetworkGrant
from ..sandbox import Profile, Sandbox
from ..validate import check_python
from ._pool import Worker
from ._pooled import PooledRunner, WorkerPools, python_run_message, zygote_launcher
from .base import CheckRequest, RunnerInfo, RunRequest, distribution_version


class ZygoteDialect:
    """The ``run`` message of the Python zygote; a zygote serves run after run."""

    reuse_workers = True
    spawn_delay = 0.0
    concurrent_calls = True  # parallel(...) and asyncio.gather send calls without waiting for each answer

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def profile_for(self, request: RunRequest) -> Profile:
        return Profile(network=request.allow_network, environment=request.environment, preload=request.preload)

    def run_message(self, request: RunRequest, worker: Worker) -> dict[str, Any]:
        limits = self.sandbox.limits.for_run(request.timeout)
        if request.session_memory_mb is not None:
            # A session's child applies its limits once, at its first run: memory for the session, CPU time for
            # all its runs together (each run's wall time is the host's timeout).
            limits["as"] = request.session_memory_mb * 1024 * 1024
            limits["cpu"] = self.sandbox.limits.cpu_seconds
        return {**python_run_message(request, worker), "limits": limits}

    def grant_for(self, request: RunRequest) -> NetworkGrant | None:
        return request.network

    def explain(self, result: RunResult, stderr_tail: str) -> None:
        return None

    @property
    def memory_limit_mb(self) -> int | None:
        return None


class ZygoteRunner(PooledRunner):
    """A runner on the Python zygote's warm workers."""

    def __init__(
        self,
        info: RunnerInfo,
        *,
        kind: str,
        sandbox: Sandbox,
        pool_size: int,
        default_profile: Profile,
        preload: tuple[str, ...] = (),
        imports: Callable[[tuple[str, ...]], tuple[str, ...] | None] = lambda _: None,
        distributions: tuple[str, ...] = (),
        extra_check: Callable[[str], list[dict[str, Any]]] | None = None,
        max_environments: int = 4,
    ) -> None:
        self.info = info
        self.kind = kind
        self.preload = tuple(preload)
        self.sandbox = sandbox
        self._imports = imports
        self._extra_check = extra_check
        self._distributions = distributions
        self.workers = WorkerPools(
            info.name,
            zygote_launcher(kind, sandbox, preload),
            ZygoteDialect(sandbox),
            sandbox=sandbox,
            pool_size=pool_size,
            default_profile=default_profile,
            max_environments=max_environments,
        )

    @property
    def isolation(self) -> str:
        extra = "+interpreter" if self.info.keeps_off_network else ""
        return self.sandbox.isolation + extra

    def authorized_imports(self, package_imports: tuple[str, ...]) -> tuple[str, ...] | None:
        return self._imports(package_imports)

    async def check(self, request: CheckRequest) -> list[dict[str, Any]]:
        allowed = self.authorized_imports(request.package_imports)
        checked = await check_python(request.code, request.index, allowed, max_bytes=request.max_bytes)
        findings: list[dict[str, Any]] = list(checked.get("findings", []))
        if self._extra_check is not None and not any(f.get("kind") in ("syntax", "size", "nesting") for f in findings):
            findings.extend(await anyio.to_thread.run_sync(self._extra_check, request.code, abandon_on_cancel=True))
        return sorted(findings, key=lambda f: (f.get("line") or 0, f.get("column") or 0))

    def identity(self) -> dict[str, str]:
        return {name: distribution_version(name) for name in self._distributions}


__all__ = ["ZygoteDialect", "ZygoteRunner"]
