"""``RunnerHosts``: each runner started on its first use, or at once when it is eager, in a task of its own.

A runner's ``start`` enters task groups (its pools') that must be left by the task that entered them, and a
run's request task ends before the server does: so each runner lives in its own host task, inside the
engine's task group, from ``start`` to ``aclose``. An eager runner (``CODE_MODE_EAGER_RUNNERS``) is started
when the engine starts and then warmed (``ready``: a warm worker, within ``warmup_timeout``), in the
background: the server answers meanwhile. Any other runner starts when a request first needs it, and that
request waits for its start only (its first run then waits for a worker like any run that finds none idle).
A runner whose start fails stays failed: its runs are refused with the reason, the other runners serve.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from ..errors import RunnerError
from ..runners import Runner

logger = logging.getLogger(__name__)


@dataclass
class _Hosted:
    started: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    stopped: anyio.Event = field(default_factory=anyio.Event)
    problem: str | None = None


class RunnerHosts:
    """The runners of an engine, each started once, when first needed or (eager) with the engine."""

    def __init__(self, runners: Mapping[str, Runner], *, eager: frozenset[str], warmup_timeout: float) -> None:
        self.runners = runners
        self.eager = frozenset(name for name in eager if name in runners)
        self._warmup_timeout = warmup_timeout
        self._hosted: dict[str, _Hosted] = {}
        self._tg: TaskGroup | None = None

    def open(self, tg: TaskGroup) -> None:
        """Start the eager runners in ``tg`` (in the background)."""
        self._tg = tg
        for name in self.runners:
            if name in self.eager:
                self._host(name, warm=True)

    def started(self, name: str) -> bool:
        hosted = self._hosted.get(name)
        return hosted is not None and hosted.started.is_set() and hosted.problem is None

    async def get(self, name: str) -> Runner:
        """The runner, started (``RunnerError`` when its start failed)."""
        hosted = self._hosted.get(name) or self._host(name, warm=False)
        await hosted.started.wait()
        if hosted.problem is not None:
            raise RunnerError(f"the {name} runner could not start: {hosted.problem}")
        return self.runners[name]

    async def ready(self, names: Iterable[str] | None = None) -> None:
        """Start every runner (or the named ones) and wait (at most ``warmup_timeout``) until each has a warm
        worker."""
        chosen = [n for n in (self.runners if names is None else names) if n in self.runners]
        with anyio.move_on_after(self._warmup_timeout):
            async with anyio.create_task_group() as tg:
                for name in chosen:
                    tg.start_soon(self._ready, name)

    async def _ready(self, name: str) -> None:
        try:
            runner = await self.get(name)
        except RunnerError:
            return
        await runner.ready()

    def _host(self, name: str, *, warm: bool) -> _Hosted:
        if self._tg is None:
            raise RunnerError("the engine is not started (use it as an async context manager)")
        hosted = self._hosted[name] = _Hosted()
        self._tg.start_soon(self._serve, name, hosted, warm, name=f"runner {name}")
        return hosted

    async def _serve(self, name: str, hosted: _Hosted, warm: bool) -> None:
        runner = self.runners[name]
        # No cancel scope around start or aclose: the task groups a runner enters in ``start`` are left in
        # ``aclose``, at the same depth of this task (its pools shield what must finish, the killing of workers).
        try:
            try:
                await runner.start()
            except Exception as exc:  # the boundary of one runner: the others serve
                hosted.problem = str(exc) or type(exc).__name__
                logger.error("runner %s could not start: %s", name, hosted.problem)
                await runner.aclose()  # whatever it had started goes
                return
            except BaseException:
                await runner.aclose()
                raise
            finally:
                hosted.started.set()
            try:
                if warm and self._warmup_timeout > 0:
                    began = time.monotonic()
                    with anyio.move_on_after(self._warmup_timeout) as scope:
                        await runner.ready()
                    if scope.cancelled_caught:
                        logger.warning("runner %s: no warm worker after %.0f s", name, self._warmup_timeout)
                    else:
                        logger.info("runner %s: warm in %.2f s", name, time.monotonic() - began)
                await hosted.stop.wait()
            finally:
                await runner.aclose()
        finally:
            hosted.stopped.set()

    async def aclose(self) -> None:
        """Stop every started runner (each in its own task, last started first)."""
        for hosted in reversed(list(self._hosted.values())):
            hosted.stop.set()
            await hosted.stopped.wait()
        self._hosted.clear()


def eager_names(setting: str, runners: Mapping[str, Runner], defaults: Mapping[str, str]) -> frozenset[str]:
    """``CODE_MODE_EAGER_RUNNERS``: ``default`` (the Python default runner), ``all``, ``none``, or runner names."""
    words = {w.strip() for w in setting.split(",") if w.strip()}
    chosen: set[str] = set()
    for word in words:
        if word == "all":
            chosen.update(runners)
        elif word == "default":
            if "python" in defaults:
                chosen.add(defaults["python"])
        elif word != "none":
            chosen.add(word)
    return frozenset(chosen)


__all__ = ["RunnerHosts", "eager_names"]
