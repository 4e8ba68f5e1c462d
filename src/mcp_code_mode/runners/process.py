"""Host side of runners whose worker is a child process: a warm pool, the run loop, hard timeouts.

A worker is a zygote (see ``worker.py``): it forks a fresh child for each run and never runs a
script itself, so every run starts from a pristine interpreter and an empty workspace without paying
start-up. The pool keeps ``size`` idle zygotes. A run that times out, or whose worker misbehaves,
costs that zygote: it is killed with everything it started, and a new one is started in the
background.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

from ..bridge import MAX_MESSAGE_BYTES, ToolDispatcher, encode
from ..errors import RunnerError
from .base import ErrorInfo, FileInfo, RunOutcome, RunRequest, StubBundle

logger = logging.getLogger(__name__)

WORKER_START_TIMEOUT = 60.0
_STDERR_LINES = 40


def sandbox_environment(workspace: Path) -> dict[str, str]:
    """The whole environment of a worker: nothing from the host's."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": str(workspace),
        "TMPDIR": str(workspace),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONUNBUFFERED": "1",
    }


@dataclass
class Worker:
    process: Process
    stream: BufferedByteReceiveStream
    workspace: Path
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=_STDERR_LINES))
    stubs_version: int | None = None
    ready_at: float = 0.0
    child_pid: int | None = None
    """The running child's pid as the host sees it (unknown inside a pid namespace)."""
    runs: int = 0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(encode(message))

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the worker closed its end (exited)."""
        try:
            line = await self.stream.receive_until(b"\n", MAX_MESSAGE_BYTES)
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
        """Kill the zygote, its child and their process groups, and remove the workspace."""
        for pgid in (self.child_pid, self.process.pid):
            if pgid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await self.process.wait()
        await self.process.aclose()
        shutil.rmtree(self.workspace, ignore_errors=True)

    def stderr_tail(self) -> str:
        return "".join(self.stderr).strip()


class WorkerPool:
    """Idle zygotes, ready for a run.

    ``size`` zygotes are kept in existence (idle, busy or starting); a run that finds none idle
    starts one on the spot. After a clean run a zygote comes back; up to ``max_idle`` are kept.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        size: int,
        workspace_root: Path | None,
        label: str,
        max_idle: int = 8,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._argv = list(argv)
        self._env = dict(env or {})
        """Variables added to ``sandbox_environment`` (e.g. where Deno keeps its cache)."""
        self._size = size
        self._max_idle = max(size, max_idle)
        self._workspace_root = workspace_root
        self._label = label
        self._ready: deque[Worker] = deque()
        self._busy = 0
        self._starting = 0
        self._tg: TaskGroup | None = None
        self._closed = False
        self._stubs: StubBundle | None = None
        self._changed = anyio.Event()
        self.spawned = 0
        self.spawn_delay = 0.0
        """Seconds a background start waits first, so that the answer of the run that freed the slot goes out
        before the next worker is forked (for pools whose workers serve one run each)."""
        self.wait_for_starting = False
        """Whether a run that finds no idle worker waits for one being started rather than starting its own
        (for workers that take long to start)."""

    async def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        self._refill()

    def set_stubs(self, stubs: StubBundle) -> None:
        """Stubs that newly started zygotes compile before they are handed out."""
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
            logger.error("%s: could not start a warm worker: %s", self._label, exc)
            return
        finally:
            self._starting -= 1
            self._notify()
        if self._closed:
            await worker.kill()
            return
        self._ready.append(worker)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def changed(self) -> None:
        """Wait until a worker became ready or a start ended."""
        await self._changed.wait()

    def resize(self, size: int) -> None:
        """Keep ``size`` workers from now on (starting more at once when it grew)."""
        self._size = size
        self._max_idle = max(self._max_idle, size)
        self._refill()

    @property
    def starting(self) -> int:
        return self._starting

    async def spawn(self) -> Worker:
        """Start one zygote and wait until it says it is ready (with the current stubs compiled)."""
        root = self._workspace_root
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        workspace = Path(tempfile.mkdtemp(prefix="mcp-code-mode-run-", dir=root))
        try:
            process = await anyio.open_process(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workspace,
                env=sandbox_environment(workspace) | self._env,
                start_new_session=True,
            )
        except OSError as exc:
            shutil.rmtree(workspace, ignore_errors=True)
            raise RunnerError(f"cannot start the worker ({self._argv[0]}): {exc}") from exc
        assert process.stdout is not None
        worker = Worker(process, BufferedByteReceiveStream(process.stdout), workspace)
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
        except BaseException:  # cancelled while starting (the pool is closing): the worker must not outlive it
            with anyio.CancelScope(shield=True):
                await worker.kill()
            raise
        if hello is None or hello.get("op") != "ready":
            await worker.kill()
            raise RunnerError(f"the worker did not start: {worker.stderr_tail() or 'no output'}")
        worker.ready_at = time.monotonic()
        return worker

    async def _drain_stderr(self, worker: Worker) -> None:
        stderr = worker.process.stderr
        if stderr is None:
            return
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            async for chunk in stderr:
                worker.stderr.append(chunk.decode("utf-8", "replace"))

    async def acquire(self) -> Worker:
        """An idle zygote if one is waiting, else a newly started one."""
        self._busy += 1
        try:
            while True:
                while self._ready:
                    worker = self._ready.popleft()
                    if worker.process.returncode is None:
                        return worker
                    await worker.kill()
                if not (self.wait_for_starting and self._starting > 0 and not self._closed):
                    return await self.spawn()
                await self._changed.wait()
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
        self._starting += 1  # counted as starting until its zygote says ready again
        self._tg.start_soon(self._await_ready, worker)

    async def _await_ready(self, worker: Worker) -> None:
        try:
            with anyio.move_on_after(10):
                message = await worker.receive()
                if message is not None and message.get("op") == "ready":
                    if not self._closed and len(self._ready) < self._max_idle:
                        worker.child_pid = None
                        self._ready.append(worker)
                        self._notify()
                        return
        except RunnerError:
            pass
        finally:
            self._starting -= 1
            self._notify()
        await worker.kill()
        self._refill()

    def _discard(self, worker: Worker) -> None:
        if self._tg is not None:
            self._tg.start_soon(worker.kill)
            self._refill()

    async def aclose(self) -> None:
        self._closed = True
        self._notify()
        while self._ready:
            await self._ready.popleft().kill()

    @property
    def warm(self) -> int:
        return len(self._ready)


class ProcessRunner:
    """A runner whose code runs in a worker process from a ``WorkerPool``."""

    name = "process"
    languages: tuple[str, ...] = ("python",)
    stub_language = "python"
    isolation = "process"
    host_pids = True
    """Whether a pid the worker reports is valid on the host (false inside a pid namespace)."""
    reuse_workers = True
    """Whether a worker serves another run after a clean one (false: one run per worker process)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        pool_size: int,
        workspace_root: Path | None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._pool = WorkerPool(argv, size=pool_size, workspace_root=workspace_root, label=self.name, env=env)
        self._tg: TaskGroup | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def pool(self) -> WorkerPool:
        return self._pool

    async def start(self) -> None:
        stack = contextlib.AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        await self._pool.start(self._tg)

    async def aclose(self) -> None:
        await self._pool.aclose()
        if self._stack is not None:
            assert self._tg is not None
            self._tg.cancel_scope.cancel()
            stack, self._stack = self._stack, None
            await stack.aclose()

    def set_stubs(self, stubs: StubBundle) -> None:
        self._pool.set_stubs(stubs)

    def run_message(self, request: RunRequest, worker: Worker) -> dict[str, Any]:
        message: dict[str, Any] = {
            "op": "run",
            "code": request.code,
            "max_output": request.max_output,
            "namespaces": list(request.stubs.namespaces),
            "imports": list(request.authorized_imports),
            "version": request.stubs.version,
        }
        if worker.stubs_version != request.stubs.version:
            message["stubs"] = request.stubs.source
        return message

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunOutcome:
        return await self.run_with(request, dispatcher, {})

    async def run_with(self, request: RunRequest, dispatcher: ToolDispatcher, extra: Mapping[str, Any]) -> RunOutcome:
        """Run on a pooled worker; ``extra`` fields are added to the ``run`` message."""
        worker = await self._pool.acquire()
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
                        outcome = await self._died(worker)
                        break
                    op = message.get("op")
                    if op == "output":
                        data = str(message.get("data", ""))[: max(0, request.max_output - kept)]
                        kept += len(data)
                        output.append(data)
                    elif op == "call":
                        reply = await dispatcher.handle(
                            str(message.get("server")), str(message.get("tool")), message.get("arguments")
                        )
                        await worker.send({"op": "result", "id": message.get("id"), **reply})
                    elif op == "started":
                        pid = message.get("pid")
                        worker.child_pid = pid if isinstance(pid, int) and self.host_pids else None
                    elif op == "done":
                        outcome = self._done(message)
                        clean = True
            if outcome is None:
                outcome = RunOutcome(
                    success=False,
                    error=ErrorInfo("TimeoutError", f"the run did not finish within {request.timeout * 1000:.0f} ms"),
                )
        except RunnerError as exc:
            outcome = RunOutcome(success=False, error=ErrorInfo("RunnerError", str(exc)))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            outcome = await self._died(worker)
        finally:
            if not clean:
                # Kill now, before answering: nothing the script started may outlive its run.
                with anyio.CancelScope(shield=True):
                    await worker.kill()
            self._pool.release(worker, clean=clean and self.reuse_workers)
        outcome.duration = time.perf_counter() - started
        outcome.output = "".join(output)
        if kept >= request.max_output or outcome.truncated:
            outcome.truncated = True
        return outcome

    def _done(self, message: dict[str, Any]) -> RunOutcome:
        error = message.get("error")
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

    async def _died(self, worker: Worker) -> RunOutcome:
        with anyio.move_on_after(2):
            await worker.process.wait()
        code = worker.process.returncode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
        detail = worker.stderr_tail()
        message = f"the worker process {how} before the run finished"
        if detail:
            message += f": {detail[-1500:]}"
        return RunOutcome(success=False, error=ErrorInfo("WorkerDied", message))


def python_worker_argv(kind: str, preload: Sequence[str] = ()) -> list[str]:
    worker = Path(__file__).with_name("worker.py")
    return [sys.executable, "-I", str(worker), kind, ",".join(preload)]
