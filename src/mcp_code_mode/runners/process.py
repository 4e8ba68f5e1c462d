"""Host side of runners whose worker is a child process: warm pools, the run loop, hard timeouts.

A Python worker is a zygote (see ``sandboxed/worker.py``): it forks a fresh child for each run and
never runs a script itself, so every run starts from a pristine interpreter and an empty workspace
without paying start-up. Any worker that speaks the bridge protocol fits here; one that exits after its run is
simply replaced.

Workers are launched by a ``Launcher`` (the sandbox decides argv, environment and workspace), one
``WorkerPool`` (``pool.py``) per ``Profile`` (a worker with network access is a different sandbox
from one without). A run that times out, or whose worker misbehaves, costs that worker: it is killed with everything it
started, and a new one is started in the background.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..bridge import ToolDispatcher, serve_run
from ..errors import RunnerError
from ..sandbox import Profile, Sandbox, SandboxSpec
from .base import ErrorInfo, RunOutcome, RunRequest, StubBundle
from .pool import Launcher, Worker, WorkerPool

logger = logging.getLogger(__name__)


def command_launcher(
    sandbox: Sandbox,
    argv: Sequence[str],
    *,
    reads: Callable[[], Sequence[str | Path]],
    env: Mapping[str, str],
    memory_mb: int | None = None,
) -> Launcher:
    """Launch ``argv``, a program that runs user code itself (a Deno worker), in the sandbox: its own
    namespaces where they exist, ``reads()`` (evaluated at each launch) bound read-only, and the rlimits
    of ``Limits.for_process`` applied before it starts."""

    def launch(profile: Profile) -> SandboxSpec:
        limits = sandbox.limits.for_process(memory_mb=memory_mb)
        return sandbox.command_spec(argv, profile, reads=reads(), env=env, limits=limits)

    return launch


class ProcessRunner:
    """A runner whose code runs in worker processes, one warm pool per profile."""

    name = "process"
    languages: tuple[str, ...] = ("python",)
    stub_language = "python"
    reuse_workers = True
    """Whether a worker serves another run after a clean one (false: one run per worker process)."""
    spawn_delay = 0.0
    """Seconds a pool waits before it starts a replacement worker (see ``WorkerPool.spawn_delay``)."""

    def __init__(self, launcher: Launcher, *, sandbox: Sandbox, pool_size: int, default_profile: Profile) -> None:
        self.sandbox = sandbox
        self._launcher = launcher
        self._pool_size = pool_size
        self._default_profile = default_profile
        self._pools: dict[Profile, WorkerPool] = {}
        self._stubs: StubBundle | None = None
        self._tg: TaskGroup | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def isolation(self) -> str:
        return self.sandbox.isolation

    @property
    def pool(self) -> WorkerPool:
        """The pool of the default profile."""
        return self._pool_for(self._default_profile)

    def _pool_for(self, profile: Profile) -> WorkerPool:
        pool = self._pools.get(profile)
        if pool is None:
            size = self._pool_size if profile == self._default_profile else min(self._pool_size, 1)
            pool = WorkerPool(
                self._launcher, size=size, label=f"{self.name} {profile}", profile=profile, release=self.sandbox.release
            )
            pool.spawn_delay = self.spawn_delay
            if self._stubs is not None:
                pool.set_stubs(self._stubs)
            self._pools[profile] = pool
            if self._tg is not None:
                self._tg.start_soon(pool.start, self._tg)
        return pool

    async def start(self) -> None:
        stack = contextlib.AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        for pool in [self._pool_for(self._default_profile), *self._pools.values()]:
            await pool.start(self._tg)

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()
        if self._stack is not None:
            assert self._tg is not None
            self._tg.cancel_scope.cancel()
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def ready(self) -> None:
        await self._pool_for(self._default_profile).ready()

    def set_stubs(self, stubs: StubBundle) -> None:
        self._stubs = stubs
        for pool in self._pools.values():
            pool.set_stubs(stubs)

    def profile_for(self, request: RunRequest) -> Profile:
        return Profile(network=request.allow_network, environment=request.environment, preload=request.preload)

    def run_message(self, request: RunRequest, worker: Worker) -> dict[str, Any]:
        message: dict[str, Any] = {
            "op": "run",
            "code": request.code,
            "max_output": request.max_output,
            "namespaces": list(request.stubs.namespaces),
            "imports": list(request.authorized_imports),
            "version": request.stubs.version,
            "limits": self.sandbox.limits.for_run(request.timeout),
        }
        if not worker.zygote and worker.stubs_version != request.stubs.version:
            message["stubs"] = request.stubs.source
        return message

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunOutcome:
        return await self.run_with(request, dispatcher, {})

    async def run_with(self, request: RunRequest, dispatcher: ToolDispatcher, extra: Mapping[str, Any]) -> RunOutcome:
        """Run on a pooled worker; ``extra`` fields are added to the ``run`` message.

        The run's channel is served by the bridge's host loop (``serve_run``), which believes nothing
        but the run's own ``call``, ``output`` and ``done``. The worker goes back to its pool only when
        it is a zygote (``reuse_workers``) that reports the run's end and says ``ready`` again.
        """
        pool = self._pool_for(self.profile_for(request))
        worker = await pool.acquire()
        started = time.perf_counter()
        clean = done = False
        try:
            if worker.zygote and worker.stubs_version != request.stubs.version:
                if not await worker.prepare(request.stubs):
                    raise RunnerError(f"the worker did not load the tool stubs: {worker.stderr_tail() or 'no output'}")
            channel = worker.run_channel()
            await worker.send({**self.run_message(request, worker), **extra})
            worker.stubs_version = request.stubs.version
            hosted = await serve_run(
                channel,
                dispatcher,
                timeout=request.timeout,
                max_output=request.max_output,
                on_output=request.on_output,
            )
            outcome = hosted.outcome
            if hosted.ended == "done":
                done = True
                clean = worker.zygote
                self._explain_memory(outcome)
            elif hosted.ended == "closed":
                outcome.error = (await self._died(worker)).error
                clean = worker.zygote and worker.exit_status is not None
        except RunnerError as exc:
            outcome = RunOutcome(success=False, error=ErrorInfo("RunnerError", str(exc)))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            outcome = await self._died(worker)
        finally:
            with anyio.CancelScope(shield=True):
                await worker.drop_channel()  # nothing more is read from this run
                if done and not worker.zygote:
                    # A one-run worker after its done: killed now, reaped by the pool after the answer.
                    worker.signal()
                elif not clean:
                    # Kill now, before answering: nothing the script started may outlive its run.
                    await worker.kill()
            pool.release(worker, clean=clean and self.reuse_workers)
        outcome.duration = time.perf_counter() - started
        return outcome

    def _explain_memory(self, outcome: RunOutcome) -> None:
        error = outcome.error
        if error is not None and error.type == "MemoryError" and not error.message:
            error.message = f"out of memory: a run may use {self.sandbox.limits.memory_mb} MB"

    async def _died(self, worker: Worker) -> RunOutcome:
        """The run's channel closed before ``done``: say how its process ended (a zygote reports it)."""
        status = await worker.await_exit() if worker.zygote else None
        if status is None:
            with anyio.move_on_after(2):
                await worker.process.wait()
            code = worker.process.returncode
            status = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            message = f"the worker process ended ({status}) before the run finished"
        else:
            message = f"the script's process ended ({status}) before the run finished"
        detail = worker.stderr_tail()
        if detail:
            message += f": {detail[-1500:]}"
        return RunOutcome(success=False, error=ErrorInfo("WorkerDied", message))


def python_worker_argv(kind: str, preload: Sequence[str] = ()) -> list[str]:
    """The worker script and its arguments (the sandbox adds the interpreter and its own flags)."""
    worker = Path(__file__).with_name("sandboxed") / "worker.py"
    return [str(worker), kind, "--preload", ",".join(preload)]


def python_launcher(kind: str, sandbox: Sandbox, preload: Sequence[str] = ()) -> Launcher:
    argv = python_worker_argv(kind, preload)

    def launch(profile: Profile) -> SandboxSpec:
        spec = sandbox.spec(argv, profile)
        spec.zygote = True
        return spec

    return launch


__all__ = ["Launcher", "ProcessRunner", "Worker", "WorkerPool", "command_launcher", "python_launcher"]
