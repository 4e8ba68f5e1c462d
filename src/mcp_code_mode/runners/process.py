"""Host side of runners whose worker is a child process: warm pools, the run loop, hard timeouts.

A Python worker is a zygote (see ``worker.py``): it forks a fresh child for each run and never runs a
script itself, so every run starts from a pristine interpreter and an empty workspace without paying
start-up. Any worker that speaks the bridge protocol fits here; one that exits after its run is
simply replaced.

Workers are launched by a ``Launcher`` (the sandbox decides argv, environment and workspace), one
pool per ``Profile`` (a worker with network access is a different sandbox from one without). A run
that times out, or whose worker misbehaves, costs that worker: it is killed with everything it
started, and a new one is started in the background.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from ..bridge import MAX_MESSAGE_BYTES, ToolDispatcher, encode
from ..errors import RunnerError
from ..sandbox import Profile, Sandbox, SandboxSpec, sandbox_environment
from ..sandbox.core import make_workspace
from .base import ErrorInfo, FileInfo, RunOutcome, RunRequest, StubBundle

logger = logging.getLogger(__name__)

WORKER_START_TIMEOUT = 60.0
_STDERR_LINES = 40

Launcher = Callable[[Profile], SandboxSpec]
"""Makes the argv, environment and workspace of one new worker for a profile."""


def plain_launcher(argv: Sequence[str], workspace_root: Path | None, env: Mapping[str, str] | None = None) -> Launcher:
    """Launch ``argv`` as it is (a worker that isolates itself, e.g. Deno) in a fresh host workspace.

    The worker's cwd is the workspace; its environment is ``sandbox_environment`` plus ``env``.
    """

    def launch(profile: Profile) -> SandboxSpec:
        workspace = make_workspace(workspace_root)
        return SandboxSpec(list(argv), sandbox_environment(str(workspace)) | dict(env or {}), workspace, workspace)

    return launch


@dataclass
class Worker:
    process: Process
    stream: BufferedByteReceiveStream
    spec: SandboxSpec
    release: Callable[[SandboxSpec], None]
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=_STDERR_LINES))
    stubs_version: int | None = None
    child_pid: int | None = None
    """The running child's pid as the host sees it (unknown inside a pid namespace)."""
    killed: bool = False

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(encode(message))

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the worker closed its end (exited)."""
        try:
            line = await self.stream.receive_until(b"\n", MAX_MESSAGE_BYTES)
        except anyio.DelimiterNotFound:
            raise RunnerError(
                f"the worker sent a message over {MAX_MESSAGE_BYTES} bytes (flooding the bridge)"
            ) from None
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return None
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise RunnerError(f"the worker sent a malformed message: {exc}") from None
        if not isinstance(message, dict):
            raise RunnerError("the worker sent a malformed message")
        return message  # pyright: ignore[reportUnknownVariableType]

    async def kill(self) -> None:
        """Kill the worker, its child and their process groups, and release its sandbox (once)."""
        if self.killed:
            return
        self.killed = True
        pgids = [self.process.pid] + ([self.child_pid] if self.child_pid and self.spec.host_pids else [])
        for pgid in pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        if self.process.returncode is None:
            # os.kill, not process.kill(): Popen.send_signal() polls first, which can reap the child
            # before asyncio's child watcher does (it then logs "Unknown child process").
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
        with anyio.CancelScope(shield=True):  # runs to the end even when the caller is being cancelled
            with anyio.move_on_after(5):
                await self.process.wait()
            await self.process.aclose()
        self.release(self.spec)

    def stderr_tail(self) -> str:
        return "".join(self.stderr).strip()


class WorkerPool:
    """Idle workers of one profile, ready for a run.

    ``size`` workers are kept in existence (idle, busy or starting); a run that finds none idle
    starts one on the spot. After a clean run a zygote comes back; up to ``max_idle`` are kept.
    """

    def __init__(
        self,
        launcher: Launcher,
        *,
        size: int,
        label: str,
        profile: Profile | None = None,
        release: Callable[[SandboxSpec], None] | None = None,
        max_idle: int = 8,
    ) -> None:
        self._launcher = launcher
        self._profile = profile or Profile()
        self._release = release or SandboxSpec.cleanup
        self._size = size
        self._max_idle = max(size, max_idle)
        self._label = label
        self._ready: deque[Worker] = deque()
        self._busy = 0
        self._starting = 0
        self._tg: TaskGroup | None = None
        self._closed = False
        self._stubs: StubBundle | None = None
        self._live: set[Worker] = set()
        self._arrived = anyio.Event()
        self._waiters = 0
        self.spawned = 0
        self.spawn_delay = 0.0
        """Seconds a background start waits first, so that the answer of the run that freed the slot goes out
        before the next worker is forked (for pools whose workers serve one run each)."""

    async def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        self._refill()

    def set_stubs(self, stubs: StubBundle) -> None:
        """Stubs that newly started workers load before they are handed out."""
        self._stubs = stubs

    def _refill(self) -> None:
        if self._tg is None or self._closed:
            return
        while len(self._ready) + self._busy + self._starting < self._size:
            self._starting += 1
            self._tg.start_soon(self._spawn_into_pool)

    async def _spawn_into_pool(self) -> None:
        try:
            if self.spawn_delay > 0:
                await anyio.sleep(self.spawn_delay)
            worker = await self.spawn()
        except RunnerError as exc:
            if not self._closed:
                logger.error("%s: could not start a warm worker: %s", self._label, exc)
            return
        finally:
            self._starting -= 1
            self._notify()
        if self._closed:
            await worker.kill()
            return
        self._push(worker)

    def _push(self, worker: Worker) -> None:
        self._ready.append(worker)
        self._notify()

    def _notify(self) -> None:
        """Wake acquirers waiting for a worker: one arrived, or one they counted on will not."""
        self._arrived.set()
        self._arrived = anyio.Event()

    async def changed(self) -> None:
        """Wait until a worker became ready or a start ended."""
        await self._arrived.wait()

    def resize(self, size: int) -> None:
        """Keep ``size`` workers from now on (starting more at once when it grew)."""
        self._size = size
        self._max_idle = max(self._max_idle, size)
        self._refill()

    @property
    def starting(self) -> int:
        return self._starting

    async def spawn(self) -> Worker:
        """Start one worker and wait until it says it is ready (with the current stubs loaded)."""
        spec = self._launcher(self._profile)
        process: Process | None = None
        try:
            with anyio.CancelScope(shield=True):  # a process started here is always tracked, never lost
                process = await anyio.open_process(
                    spec.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=spec.cwd,
                    env=spec.env,
                    start_new_session=True,
                )
        except OSError as exc:
            self._release(spec)
            raise RunnerError(f"cannot start the worker ({spec.argv[0]}): {exc}") from exc
        assert process is not None and process.stdout is not None
        worker = Worker(process, BufferedByteReceiveStream(process.stdout), spec, self._forget)
        self._live.add(worker)
        if self._tg is not None:
            self._tg.start_soon(self._drain_stderr, worker)
        self.spawned += 1
        try:
            with anyio.fail_after(WORKER_START_TIMEOUT):
                hello = await worker.receive()
                if hello is not None and hello.get("op") == "ready" and self._stubs is not None:
                    stubs = self._stubs
                    await worker.send({"op": "prepare", "stubs": stubs.source, "version": stubs.version})
                    worker.stubs_version = stubs.version
        except (TimeoutError, RunnerError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            hello = None
        except BaseException:  # cancelled while starting (the runner is closing): leave nothing behind
            with anyio.CancelScope(shield=True):
                await worker.kill()
            raise
        if hello is None or hello.get("op") != "ready":
            with anyio.move_on_after(1):
                await worker.process.wait()
            await worker.kill()
            raise RunnerError(f"the worker did not start: {worker.stderr_tail() or 'no output'}")
        return worker

    async def _drain_stderr(self, worker: Worker) -> None:
        stderr = worker.process.stderr
        if stderr is None:
            return
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            async for chunk in stderr:
                worker.stderr.append(chunk.decode("utf-8", "replace"))

    async def acquire(self) -> Worker:
        """An idle worker; else one that is about to be (back from a run, or starting); else a new one."""
        self._busy += 1
        try:
            while True:
                while self._ready:
                    worker = self._ready.popleft()
                    if worker.process.returncode is None:
                        return worker
                    await worker.kill()
                if self._starting <= self._waiters:
                    return await self.spawn()
                arrived = self._arrived
                self._waiters += 1
                try:
                    with anyio.move_on_after(WORKER_START_TIMEOUT):
                        await arrived.wait()
                finally:
                    self._waiters -= 1
        except BaseException:
            self._busy -= 1
            raise
        finally:
            self._refill()

    def release(self, worker: Worker, *, clean: bool) -> None:
        """Give a worker back after its run: kept when the run ended cleanly, else killed and replaced."""
        self._busy -= 1
        if self._tg is None or self._closed or not clean:
            self._discard(worker)
            return
        self._starting += 1  # counted as starting until it says ready again
        self._tg.start_soon(self._await_ready, worker)

    async def _await_ready(self, worker: Worker) -> None:
        try:
            with anyio.move_on_after(10):
                while (message := await worker.receive()) is not None:
                    if message.get("op") != "ready":
                        continue  # e.g. the zygote's report of how the child exited
                    if not self._closed and len(self._ready) < self._max_idle:
                        worker.child_pid = None
                        self._push(worker)
                        return
                    break
        except RunnerError:
            pass
        except BaseException:  # cancelled (the runner is closing): the worker goes too
            await worker.kill()
            raise
        finally:
            self._starting -= 1
        self._notify()
        await worker.kill()
        self._refill()

    def _forget(self, spec: SandboxSpec) -> None:
        self._live = {w for w in self._live if w.spec is not spec}
        self._release(spec)

    def _discard(self, worker: Worker) -> None:
        if self._tg is not None:
            self._tg.start_soon(worker.kill)
            self._refill()

    async def aclose(self) -> None:
        """Kill every worker of this pool: idle, busy, starting or on its way back."""
        self._closed = True
        self._ready.clear()
        with anyio.CancelScope(shield=True):
            for worker in list(self._live):
                await worker.kill()

    @property
    def warm(self) -> int:
        return len(self._ready)

    @property
    def idle_workers(self) -> list[Worker]:
        return list(self._ready)


class ProcessRunner:
    """A runner whose code runs in worker processes, one warm pool per profile."""

    name = "process"
    languages: tuple[str, ...] = ("python",)
    stub_language = "python"
    reuse_workers = True
    """Whether a worker serves another run after a clean one (false: one run per worker process)."""

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
        if worker.stubs_version != request.stubs.version:
            message["stubs"] = request.stubs.source
        return message

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunOutcome:
        return await self.run_with(request, dispatcher, {})

    async def run_with(self, request: RunRequest, dispatcher: ToolDispatcher, extra: Mapping[str, Any]) -> RunOutcome:
        """Run on a pooled worker; ``extra`` fields are added to the ``run`` message."""
        pool = self._pool_for(self.profile_for(request))
        worker = await pool.acquire()
        output: list[str] = []
        kept = 0
        started = time.perf_counter()
        outcome: RunOutcome | None = None
        clean = False
        try:
            await worker.send({**self.run_message(request, worker), **extra})
            worker.stubs_version = request.stubs.version
            with anyio.move_on_after(request.timeout):
                while outcome is None:
                    message = await worker.receive()
                    if message is None:
                        outcome = await self._died(worker, None)
                        break
                    op = message.get("op")
                    if op == "output":
                        data = str(message.get("data", ""))[: max(0, request.max_output - kept)]
                        kept += len(data)
                        output.append(data)
                        if data and request.on_output is not None:
                            await request.on_output(data)
                    elif op == "call":
                        reply = await dispatcher.handle(
                            str(message.get("server")), str(message.get("tool")), message.get("arguments")
                        )
                        await worker.send({"op": "result", "id": message.get("id"), **reply})
                    elif op == "started":
                        pid = message.get("pid")
                        worker.child_pid = pid if isinstance(pid, int) else None
                    elif op == "done":
                        outcome = self._done(message)
                        clean = True
                    elif op == "exit":
                        outcome = await self._died(worker, str(message.get("status")))
                        clean = True  # the zygote survived its child and will say ready
            if outcome is None:
                outcome = RunOutcome(
                    success=False,
                    error=ErrorInfo("TimeoutError", f"the run did not finish within {request.timeout * 1000:.0f} ms"),
                )
        except RunnerError as exc:
            outcome = RunOutcome(success=False, error=ErrorInfo("RunnerError", str(exc)))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            outcome = await self._died(worker, None)
        finally:
            if not clean:
                # Kill now, before answering: nothing the script started may outlive its run.
                with anyio.CancelScope(shield=True):
                    await worker.kill()
            pool.release(worker, clean=clean and self.reuse_workers)
        outcome.duration = time.perf_counter() - started
        outcome.output = "".join(output)
        if kept >= request.max_output or outcome.truncated:
            outcome.truncated = True
        return outcome

    def _done(self, message: dict[str, Any]) -> RunOutcome:
        error = message.get("error")
        if isinstance(error, dict) and error.get("type") == "MemoryError" and not error.get("message"):
            error["message"] = f"out of memory: a run may use {self.sandbox.limits.memory_mb} MB"
        return RunOutcome(
            success=bool(message.get("success")),
            return_value=message.get("returnValue"),
            truncated=bool(message.get("dropped")),
            files=[
                FileInfo(str(f.get("path")), int(f.get("size", 0)))
                for f in message.get("files") or []
                if isinstance(f, dict)
            ],
            error=ErrorInfo(
                type=str(error.get("type", "Error")),
                message=str(error.get("message", "")),
                line=error.get("line") if isinstance(error.get("line"), int) else None,
                traceback=error.get("traceback"),
            )
            if isinstance(error, dict)
            else None,
        )

    async def _died(self, worker: Worker, status: str | None) -> RunOutcome:
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
    worker = Path(__file__).with_name("worker.py")
    return [str(worker), kind, "--preload", ",".join(preload)]


def python_launcher(kind: str, sandbox: Sandbox, preload: Sequence[str] = ()) -> Launcher:
    argv = python_worker_argv(kind, preload)

    def launch(profile: Profile) -> SandboxSpec:
        return sandbox.spec(argv, profile)

    return launch


__all__ = ["Launcher", "ProcessRunner", "Worker", "WorkerPool", "plain_launcher", "python_launcher"]
