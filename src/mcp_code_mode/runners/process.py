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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..bridge import ToolDispatcher
from ..errors import RunnerError
from ..sandbox import Profile, Sandbox, SandboxSpec, sandbox_environment
from ..sandbox.core import make_workspace
from .base import ErrorInfo, FileInfo, RunOutcome, RunRequest, StubBundle
from .pool import Launcher, Worker, WorkerPool

logger = logging.getLogger(__name__)


def plain_launcher(argv: Sequence[str], workspace_root: Path | None, env: Mapping[str, str] | None = None) -> Launcher:
    """Launch ``argv`` as it is (a worker that isolates itself, e.g. Deno) in a fresh host workspace.

    The worker's cwd is the workspace; its environment is ``sandbox_environment`` plus ``env``.
    """

    def launch(profile: Profile) -> SandboxSpec:
        workspace = make_workspace(workspace_root)
        return SandboxSpec(list(argv), sandbox_environment(str(workspace)) | dict(env or {}), workspace, workspace)

    return launch


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
    worker = Path(__file__).with_name("sandboxed") / "worker.py"
    return [str(worker), kind, "--preload", ",".join(preload)]


def python_launcher(kind: str, sandbox: Sandbox, preload: Sequence[str] = ()) -> Launcher:
    argv = python_worker_argv(kind, preload)

    def launch(profile: Profile) -> SandboxSpec:
        return sandbox.spec(argv, profile)

    return launch


__all__ = ["Launcher", "ProcessRunner", "Worker", "WorkerPool", "plain_launcher", "python_launcher"]
