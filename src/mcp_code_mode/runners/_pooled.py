"""Runs on pooled worker processes, composed from three parts instead of a subclass tree.

- a **launcher** (``Launcher``: the sandbox decides argv, environment and workspace of a new worker for a
  ``Profile``): ``zygote_launcher`` for the Python workers, ``command_launcher`` for a program that runs
  user code itself (Deno);
- a **dialect** (``Dialect``): the ``run`` message a worker understands, whether a worker serves more
  than one run, and how to explain a worker that died;
- the **pools** (``WorkerPools``): one ``WorkerPool`` (``_pool.py``) per profile, the least recently used
  package environments' pools closed beyond a cap, and the one run loop (``serve_run`` of the bridge).

A Python worker is a zygote (see ``sandboxed/worker.py``): it forks a fresh child for each run and never
runs a script itself, so every run starts from a pristine interpreter and an empty workspace without
paying start-up. A run that times out, or whose worker misbehaves, costs that worker: it is killed with
everything it started, and a new one is started in the background.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup

from ..bridge import ErrorDetail, NetworkUse, RunResult, serve_run
from ..egress import NetworkGrant, serve_gate
from ..errors import RunnerError, UnsupportedError
from ..sandbox import Profile, Sandbox, SandboxSpec
from ._pool import Launcher, Worker, WorkerPool
from .base import Declared, RunnerSession, RunRequest, StubBundle

if TYPE_CHECKING:
    from ..bridge import ToolDispatcher

logger = logging.getLogger(__name__)

MAX_CALLS_IN_HAND = 1024
"""Calls of one run the host loop holds at once (waiting for approval included); the dispatcher bounds how
many reach servers at once (``CODE_MODE_MAX_CONCURRENT_CALLS``)."""


MAX_SUPERVISED_RUNS = 100
"""Runs one supervisor (the ``deno`` runner's isolate mode) serves before it is replaced."""


class Dialect(Protocol):
    """What a kind of worker speaks and how it is used."""

    reuse_workers: bool
    """Whether a worker serves another run after a clean one (false: one run per worker process)."""
    spawn_delay: float
    """Seconds a pool waits before it starts a replacement worker (see ``WorkerPool.spawn_delay``)."""
    concurrent_calls: bool
    """Whether the worker's stubs send calls without waiting for each answer (``Promise.all``): the host then
    answers several at once; otherwise one at a time, on the fast path."""

    def profile_for(self, request: RunRequest) -> Profile:
        """The sandbox profile a request's worker needs (network, package environment)."""
        ...

    def run_message(self, request: RunRequest, worker: Worker) -> dict[str, Any]:
        """The ``run`` message for this request."""
        ...

    def grant_for(self, request: RunRequest) -> NetworkGrant | None:
        """What the run's worker may reach through its egress gate while the run lasts (None: nothing)."""
        ...

    def explain(self, result: RunResult, stderr_tail: str) -> None:
        """Make a failure's error say what happened (out of memory, a promise that never settles)."""
        ...

    @property
    def memory_limit_mb(self) -> int | None:
        """The memory a run may use when the worker's own cap is not the sandbox's (None: the sandbox's)."""
        ...


def command_launcher(
    sandbox: Sandbox,
    argv: Sequence[str],
    *,
    reads: Callable[[], Sequence[str | Path]],
    env: Mapping[str, str],
    memory_mb: int | None = None,
    supervisor: bool = False,
) -> Launcher:
    """Launch ``argv``, a program that runs user code itself (a Deno worker), in the sandbox: its own
    namespaces where they exist, ``reads()`` (evaluated at each launch) bound read-only, and the rlimits
    of ``Limits.for_process`` applied before it starts. ``supervisor``: a program that runs each run in an
    isolate of its own, on a control channel at fds 3 and 4 (``SandboxSpec.supervisor``)."""

    def launch(profile: Profile) -> SandboxSpec:
        limits = sandbox.limits.for_process(memory_mb=memory_mb)
        return sandbox.command_spec(argv, profile, reads=reads(), env=env, limits=limits, supervisor=supervisor)

    return launch


def python_worker_argv(kind: str, preload: Sequence[str] = ()) -> list[str]:
    """The zygote script and its arguments (the sandbox adds the interpreter and its own flags)."""
    worker = Path(__file__).with_name("sandboxed") / "worker.py"
    return [str(worker), kind, "--preload", ",".join(preload)]


def zygote_launcher(kind: str, sandbox: Sandbox, preload: Sequence[str] = ()) -> Launcher:
    """Launch the Python zygote that runs scripts as ``kind`` (``local`` or ``cpython``)."""
    argv = python_worker_argv(kind, preload)

    def launch(profile: Profile) -> SandboxSpec:
        spec = sandbox.spec(argv, profile)
        spec.zygote = True
        return spec

    return launch


def python_run_message(request: RunRequest, worker: Worker) -> dict[str, Any]:
    """The ``run`` message of a Python worker (the zygote's child, or Pyodide's prelude). A worker that is not a
    zygote gets the stubs' source with the run when it has not loaded this version (a zygote loads them in
    ``prepare``)."""
    message: dict[str, Any] = {
        "op": "run",
        "code": request.code,
        "max_output": request.max_output,
        "namespaces": list(request.stubs.namespaces),
        "imports": list(request.authorized_imports),
        "version": request.stubs.version,
    }
    if not worker.zygote and worker.stubs_version != request.stubs.version:
        message["stubs"] = request.stubs.source
    if request.stubs.skills:
        message["skills"] = [dict(s) for s in request.stubs.skills]
    return message


class WorkerPools:
    """The pools of one runner, one per profile, and the run loop on their workers.

    The default profile's pool keeps ``pool_size`` workers warm; any other profile (network off, a package
    environment) keeps one. At most ``max_environments`` profiles with a package environment keep a pool:
    the least recently used one is closed (its workers killed) when another is needed.
    """

    def __init__(
        self,
        label: str,
        launcher: Launcher,
        dialect: Dialect,
        *,
        sandbox: Sandbox,
        pool_size: int,
        default_profile: Profile,
        max_environments: int = 4,
    ) -> None:
        self.label = label
        self.sandbox = sandbox
        self.dialect = dialect
        self.max_environments = max_environments
        self._launcher = launcher
        self._pool_size = pool_size
        self.default_profile = default_profile
        self._pools: OrderedDict[Profile, WorkerPool] = OrderedDict()
        self._stubs: StubBundle | None = None
        self._tg: TaskGroup | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self.evicted = 0

    @property
    def pool(self) -> WorkerPool:
        """The pool of the default profile."""
        return self.pool_for(self.default_profile)

    def pool_for(self, profile: Profile) -> WorkerPool:
        pool = self._pools.get(profile)
        if pool is not None:
            self._pools.move_to_end(profile)
            return pool
        size = self._pool_size if profile == self.default_profile else min(self._pool_size, 1)
        pool = WorkerPool(
            self._launcher, size=size, label=f"{self.label} {profile}", profile=profile, release=self.sandbox.release
        )
        pool.spawn_delay = self.dialect.spawn_delay
        if self._stubs is not None:
            pool.set_stubs(self._stubs)
        self._pools[profile] = pool
        if self._tg is not None:
            self._tg.start_soon(pool.start, self._tg)
        self._evict()
        return pool

    def _evict(self) -> None:
        """Close the least recently used environments' pools beyond the cap (never one in use)."""
        environments = [p for p in self._pools if p.environment is not None]
        for profile in environments[: max(0, len(environments) - self.max_environments)]:
            pool = self._pools[profile]
            if pool.busy or pool.detached:
                continue
            del self._pools[profile]
            self.evicted += 1
            logger.info("%s: closing the warm workers of %s (least recently used)", self.label, profile)
            if self._tg is not None:
                self._tg.start_soon(pool.aclose)

    @property
    def environments(self) -> int:
        """Package environments with a warm pool now."""
        return sum(1 for p in self._pools if p.environment is not None)

    def resize(self, size: int) -> None:
        self._pool_size = size
        self.pool.resize(size)

    @property
    def launcher(self) -> Launcher:
        """What starts a worker of these pools for a profile."""
        return self._launcher

    def adopt_early(self, worker: Worker) -> None:
        """The default profile's pool takes ``worker`` (started with this pool's launcher before the engine
        existed: ``runners._early``) when it starts, in place of its first start."""
        self.pool.expect(worker)

    async def start(self) -> None:
        stack = contextlib.AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        for pool in list(self._pools.values()):
            await pool.start(self._tg)

    @property
    def task_group(self) -> TaskGroup | None:
        return self._tg

    async def start_default(self) -> None:
        """Start the default profile's pool (``start`` must have run)."""
        assert self._tg is not None
        await self.pool.start(self._tg)

    async def aclose(self) -> None:
        for pool in list(self._pools.values()):
            await pool.aclose()
        if self._stack is not None:
            assert self._tg is not None
            self._tg.cancel_scope.cancel()
            stack, self._stack = self._stack, None
            await stack.aclose()

    async def ready(self) -> None:
        await self.pool.ready()

    def set_stubs(self, stubs: StubBundle) -> None:
        self._stubs = stubs
        for pool in self._pools.values():
            pool.set_stubs(stubs)

    def describe(self) -> dict[str, Any]:
        return {
            "warmWorkers": self.pool.warm if self.default_profile in self._pools else 0,
            "poolSize": self._pool_size,
            "warmEnvironments": self.environments,
            "maxWarmEnvironments": self.max_environments,
        }

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher, extra: Mapping[str, Any] = {}) -> RunResult:
        """Run on a pooled worker; ``extra`` fields are added to the ``run`` message.

        The run's channel is served by the bridge's host loop (``serve_run``), which believes nothing
        but the run's own ``call``, ``output`` and ``done``. The worker goes back to its pool only when
        it is a zygote (``reuse_workers``) that reports the run's end and says ``ready`` again, or a supervisor
        that does so, whose run's isolate is gone, and which keeps serving the run's owner (``_keep_supervisor``).
        """
        pool = self.pool_for(self.dialect.profile_for(request))
        worker = await pool.acquire(request.owner)
        started = time.perf_counter()
        clean = done = False
        try:
            message = {**self.dialect.run_message(request, worker), **extra}
            result, ended = await self._serve(worker, request, dispatcher, message)
            if ended == "done":
                done = True
                clean = worker.zygote or (worker.supervisor and self._keep_supervisor(worker, request, started))
                self._explain_memory(result)
            elif ended == "closed":
                result.error = (await self._died(worker)).error
                clean = worker.zygote and worker.exit_status is not None
        except RunnerError as exc:
            result = RunResult(success=False, error=ErrorDetail("RunnerError", str(exc)))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            result = await self._died(worker)
        finally:
            with anyio.CancelScope(shield=True):
                await worker.drop_channel()  # nothing more is read from this run
                if done and not clean and not worker.zygote:
                    # A one-run worker after its done: killed now, reaped by the pool after the answer.
                    worker.signal()
                elif not clean:
                    # Kill now, before answering: nothing the script started may outlive its run.
                    await worker.kill()
            pool.release(worker, clean=clean and self.dialect.reuse_workers)
        result.execution_time = round((time.perf_counter() - started) * 1000)
        return result

    def _keep_supervisor(self, worker: Worker, request: RunRequest, started: float) -> bool:
        """Whether a supervisor serves another run after this clean one: only for the same owner (a run without
        one costs it), and within ``MAX_SUPERVISED_RUNS`` and half its CPU rlimit in runs' wall time."""
        worker.runs_served += 1
        worker.run_seconds += time.perf_counter() - started
        if request.owner is None or worker.owner not in (None, request.owner):
            return False
        worker.owner = request.owner
        budget = self.sandbox.limits.cpu_seconds / 2
        return worker.runs_served < MAX_SUPERVISED_RUNS and worker.run_seconds < budget

    async def open_session(self, request: RunRequest) -> PooledSession:
        """A worker for a session, taken out of its profile's pool (which starts a replacement)."""
        profile = self.dialect.profile_for(request)
        pool = self.pool_for(profile)
        worker = await pool.acquire()
        pool.detach(worker)
        return PooledSession(self, pool, worker, profile)

    async def session_run(
        self, session: PooledSession, request: RunRequest, dispatcher: ToolDispatcher, extra: Mapping[str, Any]
    ) -> RunResult:
        """One run of a session on its own worker. Its ``run`` message says ``session`` (the worker keeps its
        interpreter after ``done``) and the run's number, which its ``done`` must echo (a late ``done`` of an
        earlier run is not this run's end). A zygote's first run goes through the zygote to its pre-forked
        child, later ones straight on the child's run channel, which the host keeps between runs. Anything but
        the run's own ``done`` (a timeout, a closed channel, a refused message, a cancelled call) kills the worker
        and ends the session."""
        worker = session.worker
        session.runs += 1
        number = session.runs
        started = time.perf_counter()
        reason = "its run was cancelled"
        ok = False
        try:
            message = {**self.dialect.run_message(request, worker), **extra, "session": True, "run": number}
            later = number > 1
            result, ended = await self._serve(
                worker, request, dispatcher, message, prepare=not later, on_child=later and worker.zygote, run=number
            )
            if ended == "done":
                ok = True
                self._explain_memory(result)
            elif ended == "closed":
                result.error = (await self._died(worker)).error
                reason = "its worker ended"
            elif ended == "timeout":
                reason = "a run timed out"
            else:
                reason = "its worker sent a message the bridge refused"
        except RunnerError as exc:
            result = RunResult(success=False, error=ErrorDetail("RunnerError", str(exc)))
            reason = "its worker failed"
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            result = await self._died(worker)
            reason = "its worker ended"
        finally:
            if not ok:
                session.ended = reason
                with anyio.CancelScope(shield=True):
                    await session.aclose()
        result.execution_time = round((time.perf_counter() - started) * 1000)
        return result

    async def _serve(
        self,
        worker: Worker,
        request: RunRequest,
        dispatcher: ToolDispatcher,
        message: dict[str, Any],
        *,
        prepare: bool = True,
        on_child: bool = False,
        run: int | None = None,
    ) -> tuple[RunResult, str]:
        """What every run shares, plain or a session's: the stubs loaded (a zygote that has not, when ``prepare``),
        the egress gate opened for the run's grant, the ``run`` message sent (with the run's artifact caps) on the
        control channel or, ``on_child``, straight on a session child's run channel, the run served by the bridge's
        host loop, and the network's figures. The result and how the host loop ended."""
        if prepare and worker.zygote and worker.stubs_version != request.stubs.version:
            if not await worker.prepare(request.stubs):
                raise RunnerError(f"the worker did not load the tool stubs: {worker.stderr_tail() or 'no output'}")
        channel = worker.run_channel()
        spec = worker.spec
        grant = self.dialect.grant_for(request) if spec.egress is not None else None
        log = grant.log() if grant is not None else None
        if request.files is not None:
            message = {**message, "artifacts": request.files.caps()}
        async with contextlib.AsyncExitStack() as gate:
            if grant is not None and log is not None and spec.egress is not None:
                # The gate opens before the run's message goes out and closes, with every connection it
                # carried, when the run's channel is done: the next run of this worker starts with none.
                await gate.enter_async_context(serve_gate(spec.egress, grant, log, owner=spec.egress_owner))
            await (channel.send(message) if on_child else worker.send(message))
            worker.stubs_version = request.stubs.version
            hosted = await serve_run(
                channel,
                dispatcher,
                timeout=request.timeout,
                max_output=request.max_output,
                on_output=request.on_output,
                max_calls=MAX_CALLS_IN_HAND if self.dialect.concurrent_calls else 1,
                clock=request.clock,
                on_progress=request.on_progress,
                run=run,
                files=request.files,
            )
        result = hosted.outcome
        if log is not None:
            result.network = NetworkUse.model_validate(log.summary())
        return result, hosted.ended

    def _explain_memory(self, result: RunResult) -> None:
        error = result.error
        if error is not None and error.type == "MemoryError" and not error.message:
            limit = self.dialect.memory_limit_mb or self.sandbox.limits.memory_mb
            error.message = f"out of memory: a run may use {limit} MB"

    async def _died(self, worker: Worker) -> RunResult:
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
        result = RunResult(success=False, error=ErrorDetail("WorkerDied", message))
        self.dialect.explain(result, detail)
        return result


class PooledSession:
    """A session on one worker of ``WorkerPools`` (see ``WorkerPools.session_run``)."""

    def __init__(self, pools: WorkerPools, pool: WorkerPool, worker: Worker, profile: Profile) -> None:
        self.pools = pools
        self.pool = pool
        self.worker = worker
        self.profile = profile
        self.runs = 0
        self.ended: str | None = None
        self._closed = False

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher, extra: Mapping[str, Any] = {}) -> RunResult:
        if self.ended is not None or self._closed:
            raise UnsupportedError(f"the session has ended: {self.ended or 'it was closed'}")
        if self.worker.process.returncode is not None:
            self.ended = "its worker ended"
            await self.aclose()
            raise UnsupportedError("the session has ended: its worker ended")
        if self.pools.dialect.profile_for(request) != self.profile:
            raise UnsupportedError(
                "a session's network and packages are those of its first run: run with the same ones, or open a "
                "new session"
            )
        return await self.pools.session_run(self, request, dispatcher, extra)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self.worker.kill()
        self.pool.forget_detached()


_: type[RunnerSession] = PooledSession


class PooledRunner(Declared):
    """A runner whose runs go to its ``workers`` (``WorkerPools``): the lifecycle, the stubs, the state and the run
    are theirs. A runner overrides only what it does besides (Deno's import map, Pyodide's snapshot)."""

    workers: WorkerPools

    @property
    def pool(self) -> WorkerPool:
        return self.workers.pool

    async def start(self) -> None:
        await self.workers.start()
        await self.workers.start_default()

    async def aclose(self) -> None:
        await self.workers.aclose()

    async def ready(self) -> None:
        await self.workers.ready()

    def set_stubs(self, stubs: StubBundle) -> None:
        self.workers.set_stubs(stubs)

    def describe(self) -> dict[str, Any]:
        return self.workers.describe()

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult:
        return await self.workers.run(request, dispatcher)

    async def open_session(self, request: RunRequest) -> RunnerSession:
        """A session on a worker of its own (only for runners whose ``info.sessions`` says so)."""
        return await self.workers.open_session(request)


__all__ = [
    "Dialect",
    "PooledRunner",
    "PooledSession",
    "Launcher",
    "Worker",
    "WorkerPool",
    "WorkerPools",
    "command_launcher",
    "python_run_message",
    "python_worker_argv",
    "zygote_launcher",
]
