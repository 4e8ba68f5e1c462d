"""The default Python runner's first worker, started before the engine exists.

``serve`` starts it while it imports the engine and the MCP SDK (about half a second): a client's first run,
sent as soon as it is initialized, then finds a warm worker instead of waiting for one to start. The worker
is started exactly as the runner's pool would start it (the same launcher, kind, preload and profile: the
pool's own ``sandbox.spec``, uid slot, cgroup and gate), and before any script exists, so it has served
nobody. ``claim`` gives it to that pool, which adopts it in place of its first start; a worker nobody
claims (the engine chose other runners, or another profile) is killed and its sandbox released.

Only the ``CODE_MODE_EAGER_RUNNERS=default`` start (the default) of a ``local`` or ``cpython`` default runner
is started this way; anything else starts as before, when the engine does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..config import Settings
from ..errors import CodeModeError
from ..packages import Whitelist
from ..sandbox import Profile, Sandbox
from . import cpython, local
from ._pool import Worker, open_worker
from ._zygote import ZygoteRunner
from .base import Runner, RunnerContext

_BUILDS = {local.INFO.name: local.build, cpython.INFO.name: cpython.build}
"""The zygote runners, built here as the engine builds them: their launcher, preload and profile are theirs."""


@dataclass
class EarlyWorker:
    kind: str
    preload: tuple[str, ...]
    profile: Profile
    worker: Worker
    sandbox: Sandbox

    async def discard(self) -> None:
        """Kill the worker and release its sandbox (a worker nobody claimed)."""
        await self.worker.kill()


def early_kind(settings: Settings) -> str | None:
    """The zygote kind to start early under these settings, or None."""
    kind = settings.python_runner or local.INFO.name
    words = {w.strip() for w in settings.eager_runners.split(",") if w.strip()}
    return kind if words == {"default"} and kind in _BUILDS else None


async def start_early(settings: Settings, sandbox: Sandbox) -> EarlyWorker | None:
    """Start the default Python runner's first zygote now (None when these settings start none early, or it
    could not start: the engine then starts it as usual, and reports what stopped it)."""
    kind = early_kind(settings)
    if kind is None:
        return None
    try:
        runner = _BUILDS[kind](RunnerContext(settings, sandbox, Whitelist.load(settings.allowed_packages)))
        profile = runner.workers.default_profile
        worker = await open_worker(runner.workers.launcher(profile), sandbox.release, sandbox.release)
    except (CodeModeError, OSError):
        return None
    return EarlyWorker(runner.kind, runner.preload, profile, worker, sandbox)


def claim(early: EarlyWorker, runners: Mapping[str, Runner], eager: frozenset[str]) -> bool:
    """Give ``early`` to its runner's default pool if the engine starts that runner eagerly and would start its
    workers the same way; False if nobody claims it (``discard`` it then)."""
    runner = runners.get(early.kind)
    if early.kind not in eager or not isinstance(runner, ZygoteRunner):
        return False
    same = (runner.kind, runner.preload, runner.sandbox, runner.workers.default_profile) == (
        early.kind,
        early.preload,
        early.sandbox,
        early.profile,
    )
    if not same:
        return False
    runner.workers.adopt_early(early.worker)
    return True


__all__ = ["EarlyWorker", "claim", "early_kind", "start_early"]
