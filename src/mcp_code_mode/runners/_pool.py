"""Warm pools of worker processes: each ``Worker`` is one process speaking the bridge protocol.

``WorkerPool`` keeps ``size`` workers of one profile in existence (idle, busy or starting), hands one
out per run, takes it back after a clean run (a zygote says ``ready`` again) or kills and replaces
it, and never loses track of a process: closing the pool kills every worker it started.

A worker's stdin and stdout are its control channel. A zygote (``SandboxSpec.zygote``) also gets a
socket (``--runs-fd``) on which it passes the host one new run channel per pre-forked child, right
before each ``ready``; a worker that runs user code itself has no other channel, says ``ready`` once,
before any user code, and serves one run (its runner sets ``reuse_workers = False``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup, UNIXSocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from ..bridge import MAX_MESSAGE_BYTES, LineChannel, decode, encode
from ..errors import ProtocolError, RunnerError
from ..sandbox import Profile, SandboxSpec
from .base import StubBundle

logger = logging.getLogger(__name__)

WORKER_START_TIMEOUT = 60.0
REAP_TIMEOUT = 3.0
"""Seconds a zygote has, after its run said ``done`` or closed its channel, to report the run's end."""
READY_TIMEOUT = 10.0
"""Seconds a zygote has, after that, to clean up and say ``ready`` again."""
_STDERR_LINES = 40

ISOLATE_EXIT_TIMEOUT = 0.1
"""Seconds a supervisor's ended run has for its isolate's thread to go (see ``Worker.isolates_gone``)."""
MAX_SPARES = 4
"""Isolates a supervisor may keep warm (``deno_supervisor.ts``'s ``SPARES``; more in its ``exit`` is refused)."""
_SUPERVISOR_COMM = "deno"
_ISOLATE_THREAD = "worker-"
"""How Deno names the thread of a web Worker (``worker-1``, ``worker-2``, ...)."""

Launcher = Callable[[Profile], SandboxSpec]
"""Makes the argv, environment and workspace of one new worker for a profile."""


@dataclass
class Worker:
    process: Process
    stream: BufferedByteReceiveStream
    """The control channel's receiving side (the worker's stdout)."""
    spec: SandboxSpec
    release: Callable[[SandboxSpec], None]
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=_STDERR_LINES))
    stubs_version: int | None = None
    child_pid: int | None = None
    """The pre-forked child's pid, as the zygote reported it (used only where pids are the host's, and
    only after checking that the process is the zygote's child)."""
    runs: UNIXSocketStream | None = None
    """A zygote's socket on which each run channel arrives."""
    channel: LineChannel | None = None
    """The run channel of the next run (a zygote's child), once received."""
    exit_status: str | None = None
    """How the last run's process ended, as the zygote reported it."""
    killed: bool = False
    owner: str | None = None
    """Whose runs a supervisor has served (``RunRequest.owner``): it serves nobody else's. None: no run yet."""
    runs_served: int = 0
    run_seconds: float = 0.0
    """Wall time of the runs a supervisor has served (their CPU counts against its one CPU rlimit)."""
    program_pid: int | None = None
    spares: int | None = None
    """The isolates a supervisor keeps warm for its next runs, as its last ``exit`` said (at most ``MAX_SPARES``)."""

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    @property
    def zygote(self) -> bool:
        return self.runs is not None

    @property
    def supervisor(self) -> bool:
        """A worker that serves run after run on its control channel, each in an isolate of its own."""
        return self.spec.supervisor

    async def isolates_gone(self) -> bool:
        """After a supervisor reported a run's end: within ``ISOLATE_EXIT_TIMEOUT``, the process has no isolate
        thread left but the spares it keeps for the next runs (a run's Worker in a loop of synchronous ops outlives
        its ``terminate()``). Checked here, in the host's view of the process (``/proc/<pid>/task``); False
        when it cannot be checked. Then the supervisor may start spares again (``checked``): none starts between
        its ``exit`` and this count."""
        expected = self.spares
        pid = self.program_pid or _program_pid(self.process.pid, _SUPERVISOR_COMM)
        if pid is None or expected is None:
            return False
        self.program_pid = pid
        deadline = anyio.current_time() + ISOLATE_EXIT_TIMEOUT
        while True:
            threads = _isolate_threads(pid)
            if threads is not None and threads <= expected:
                await self.send({"op": "checked"})
                return True
            if threads is None or anyio.current_time() >= deadline:
                return False
            await anyio.sleep(0.001)

    async def send(self, message: dict[str, Any]) -> None:
        """Send on the control channel (the worker's stdin)."""
        assert self.process.stdin is not None
        await self.process.stdin.send(encode(message))

    async def receive(self) -> dict[str, Any] | None:
        """The next control message, or None when the worker closed its end (exited)."""
        try:
            line = await self.stream.receive_until(b"\n", MAX_MESSAGE_BYTES)
        except anyio.DelimiterNotFound:
            raise ProtocolError(
                f"the worker sent a message over {MAX_MESSAGE_BYTES} bytes (flooding the bridge)"
            ) from None
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return None
        return decode(line)

    async def prepare(self, stubs: StubBundle) -> bool:
        """Have the worker load ``stubs`` ahead of its run. A zygote forks a new child with them and says
        ``ready`` again (with a new run channel); False if it did not."""
        await self.send({"op": "prepare", "stubs": stubs.source, "version": stubs.version})
        self.stubs_version = stubs.version
        return await self.await_ready() if self.zygote else True

    def run_channel(self) -> LineChannel:
        """Where the next run speaks: a zygote child's own socket, else the worker's stdin and stdout."""
        if self.zygote:
            if self.channel is None:
                raise RunnerError("the worker has no run channel")
            return self.channel
        assert self.process.stdin is not None
        return LineChannel(self.process.stdin, self.stream)

    async def await_exit(self) -> str | None:
        """How the run's process ended, as the zygote reports it within ``REAP_TIMEOUT`` (else None)."""
        with anyio.move_on_after(REAP_TIMEOUT):
            while self.exit_status is None:
                message = await self.receive()
                if message is None:
                    break
                if message.get("op") == "exit":
                    self._record_exit(message)
        return self.exit_status

    def _record_exit(self, message: dict[str, Any]) -> None:
        status = message.get("status")
        self.exit_status = status[:200] if isinstance(status, str) else "unknown"
        spares = message.get("spares")
        valid = isinstance(spares, int) and not isinstance(spares, bool) and 0 <= spares <= MAX_SPARES
        self.spares = spares if valid else None

    async def await_ready(self) -> bool:
        """Read control messages until ``ready`` (True, with the next run channel taken), or the end (False)."""
        while (message := await self.receive()) is not None:
            op = message.get("op")
            if op == "exit":
                self._record_exit(message)
            elif op == "ready":
                child = message.get("child")
                self.child_pid = child if isinstance(child, int) and not isinstance(child, bool) else None
                if self.runs is not None:
                    await self._take_channel()
                return True
        return False

    async def _take_channel(self) -> None:
        assert self.runs is not None
        _, fds = await self.runs.receive_fds(1, 1)
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise RunnerError("the zygote said ready without a run channel")
        await self.drop_channel()
        stream = await UNIXSocketStream.from_socket(socket.socket(fileno=fds[0]))
        self.channel = LineChannel(stream, stream)

    async def drop_channel(self) -> None:
        """Close the host's end of the current run channel: nothing more is read from that run."""
        channel, self.channel = self.channel, None
        if channel is not None:
            await channel.aclose()

    def _host_child(self) -> int | None:
        """The zygote's child, when pids are the host's and the process really is the worker's child."""
        pid = self.child_pid
        if pid is None or not self.spec.host_pids or pid <= 1:
            return None
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return pid if fields[1:2] == [str(self.process.pid)] else None

    def signal(self) -> None:
        """SIGKILL the worker, its child and their process groups now; ``kill`` reaps them and releases."""
        if self.killed or self.process.returncode is not None:
            return
        child = self._host_child()
        for pgid in [self.process.pid] + ([child] if child else []):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        if self.process.returncode is None:
            # os.kill, not process.kill(): Popen.send_signal() polls first, which can reap the child
            # before asyncio's child watcher does (it then logs "Unknown child process").
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)

    async def kill(self) -> None:
        """Kill the worker, its child and their process groups, and release its sandbox (once)."""
        if self.killed:
            return
        self.signal()
        self.killed = True
        with anyio.CancelScope(shield=True):  # runs to the end even when the caller is being cancelled
            with anyio.move_on_after(5):
                await self.process.wait()
            await self.process.aclose()
            await self.drop_channel()
            if self.runs is not None:
                with contextlib.suppress(OSError, anyio.BrokenResourceError):
                    await self.runs.aclose()
        self.release(self.spec)

    def stderr_tail(self) -> str:
        return "".join(self.stderr).strip()


def _program_pid(root: int, comm: str) -> int | None:
    """The process named ``comm`` at or below ``root`` (the worker's sandbox: bwrap, its init, the program)."""
    frontier, looked = [root], 0
    while frontier and looked < 16:
        pid = frontier.pop(0)
        looked += 1
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8") as name:
                if name.read().strip() == comm:
                    return pid
            with open(f"/proc/{pid}/task/{pid}/children", encoding="utf-8") as children:
                frontier += [int(child) for child in children.read().split()]
        except (OSError, ValueError):
            continue
    return None


def _isolate_threads(pid: int) -> int | None:
    """How many isolate threads the process has now (None: it cannot be read)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    count = 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/comm", encoding="utf-8") as name:
                count += name.read().startswith(_ISOLATE_THREAD)
        except OSError:
            continue  # a thread that just ended
    return count


async def open_worker(
    spec: SandboxSpec, release: Callable[[SandboxSpec], None], on_failure: Callable[[SandboxSpec], None]
) -> Worker:
    """Start the process ``spec`` describes (a zygote gets its socket for run channels); not yet ready.
    ``release`` is called with the spec when the worker is gone; ``on_failure`` if it could not start."""
    process: Process | None = None
    runs_host: socket.socket | None = None
    runs_child: socket.socket | None = None
    argv = list(spec.argv)
    if spec.zygote:
        runs_host, runs_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv += ["--runs-fd", str(runs_child.fileno())]
    try:
        with anyio.CancelScope(shield=True):  # a process started here is always tracked, never lost
            process = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec.cwd,
                env=spec.env,
                start_new_session=True,
                pass_fds=[runs_child.fileno()] if runs_child is not None else [],
            )
    except OSError as exc:
        if runs_host is not None:
            runs_host.close()
        on_failure(spec)
        raise RunnerError(f"cannot start the worker ({spec.argv[0]}): {exc}") from exc
    finally:
        if runs_child is not None:
            runs_child.close()
    assert process is not None and process.stdout is not None
    runs = await UNIXSocketStream.from_socket(runs_host) if runs_host is not None else None
    return Worker(process, BufferedByteReceiveStream(process.stdout), spec, release, runs=runs)


class WorkerPool:
    """Idle workers of one profile, ready for a run.

    Up to ``size`` workers are kept in existence (idle, busy or starting); a run that finds none idle
    starts one on the spot. The pool keeps one until a run after the first finds no worker idle and none on
    its way back from a run (two runs at once, or one-run workers used back to back): from then on it keeps
    ``size``. A server used one run at a time thus holds one warm worker. After a clean run a zygote comes back; up to
    ``max_idle`` are kept.
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
        self._target = min(size, 1)
        """Workers kept now: one until a run needs more (see the class), then ``size``."""
        self._returning = 0
        """Workers on their way back from a clean run (counted in ``_starting`` too)."""
        self._served = 0
        """Runs handed a worker so far."""
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
        self._expected: Worker | None = None
        self._wanted = anyio.Event()
        """Set when a run starts waiting for a worker: a start in its ``spawn_delay`` goes at once."""
        self.detached = 0
        """Workers taken out for sessions (``detach``): never back in this pool, killed at its close too."""
        self.spawned = 0
        self.spawn_delay = 0.0
        """Seconds a background start waits first, so that the answer of the run that freed the slot goes out
        before the next worker is forked (for pools whose workers serve one run each). A run that waits for the
        worker cuts it short: a pool's first start, which the first run waits for, has none."""

    async def start(self, tg: TaskGroup) -> None:
        self._tg = tg
        expected, self._expected = self._expected, None
        if expected is not None:
            self._adopt(expected)
        self._refill()

    def expect(self, worker: Worker) -> None:
        """Adopt ``worker`` (started before this pool) when the pool starts, in place of its first start."""
        self._expected = worker

    def set_stubs(self, stubs: StubBundle) -> None:
        """Stubs that newly started workers load before they are handed out."""
        self._stubs = stubs

    def _refill(self) -> None:
        if self._tg is None or self._closed:
            return
        while len(self._ready) + self._busy + self._starting < self._target:
            self._starting += 1
            self._tg.start_soon(self._spawn_into_pool)

    async def _spawn_into_pool(self) -> None:
        try:
            if self.spawn_delay > 0 and self._waiters == 0:
                wanted = self._wanted
                with anyio.move_on_after(self.spawn_delay):
                    await wanted.wait()
            if self._wanted.is_set():
                self._wanted = anyio.Event()
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
        self._size = self._target = size
        self._max_idle = max(self._max_idle, size)
        self._refill()

    @property
    def starting(self) -> int:
        return self._starting

    async def ready(self) -> None:
        """Return once a worker is idle, or when none is on its way (an empty pool, a failed start)."""
        while not self._ready and self._starting > 0 and not self._closed:
            await self.changed()

    async def spawn(self) -> Worker:
        """Start one worker and wait until it says it is ready (with the current stubs loaded)."""
        return await self._admit(await open_worker(self._launcher(self._profile), self._forget, self._release))

    def _adopt(self, worker: Worker) -> None:
        """Take in the worker ``expect`` named (started before the pool, ``runners._early``): it counts as
        starting until it says ready, and is then the pool's like any."""
        assert self._tg is not None
        worker.release = self._forget
        self._starting += 1
        self._tg.start_soon(self._adopt_into_pool, worker)

    async def _adopt_into_pool(self, worker: Worker) -> None:
        failed = False
        try:
            ready = await self._admit(worker)
        except RunnerError as exc:
            failed = True
            if not self._closed:
                logger.error("%s: the worker started early did not start: %s", self._label, exc)
            return
        finally:
            self._starting -= 1
            self._notify()
            if failed:
                self._refill()  # a start of the pool's own instead
        if self._closed:
            await ready.kill()
            return
        self._push(ready)

    async def _admit(self, worker: Worker) -> Worker:
        """Track a started worker and wait until it says it is ready (with the current stubs loaded)."""
        self._live.add(worker)
        if self._tg is not None:
            self._tg.start_soon(self._drain_stderr, worker)
        self.spawned += 1
        ready = False
        try:
            with anyio.fail_after(WORKER_START_TIMEOUT):
                ready = await worker.await_ready()
                if ready and self._stubs is not None:
                    ready = await worker.prepare(self._stubs)
        except (TimeoutError, RunnerError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
            ready = False
        except BaseException:  # cancelled while starting (the runner is closing): leave nothing behind
            with anyio.CancelScope(shield=True):
                await worker.kill()
            raise
        if not ready:
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

    def _take(self, owner: str | None) -> Worker | None:
        """An idle worker this owner may have: one that served only its runs, else one that served none."""
        for wanted in ((owner,) if owner is not None else ()) + (None,):
            for worker in self._ready:
                if worker.owner == wanted:
                    self._ready.remove(worker)
                    return worker
        return None

    async def acquire(self, owner: str | None = None) -> Worker:
        """An idle worker; else one that is about to be (back from a run, or starting); else a new one. A worker
        that served another owner's runs (a supervisor's ``Worker.owner``) is never handed out: when it is all
        that is idle, the oldest such one is killed to make room."""
        self._busy += 1
        if not self._ready and self._returning == 0 and self._served > 0:
            self._target = self._size  # a run that needs a new worker: the pool keeps its full size from now on
        self._served += 1
        try:
            while True:
                while (worker := self._take(owner)) is not None:
                    if worker.process.returncode is None:
                        return worker
                    await worker.kill()
                if self._ready:  # idle, but another owner's
                    await self._ready.popleft().kill()
                if self._starting <= self._waiters:
                    return await self.spawn()
                arrived = self._arrived
                self._waiters += 1
                self._wanted.set()
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

    def detach(self, worker: Worker) -> None:
        """Take an acquired worker out of the pool for a session: a replacement starts, and the worker never
        comes back (the session kills it; ``forget_detached`` then). Closing the pool still kills it."""
        self._busy -= 1
        self.detached += 1
        self._refill()

    def forget_detached(self) -> None:
        self.detached -= 1

    def release(self, worker: Worker, *, clean: bool) -> None:
        """Give a worker back after its run: kept when the run ended cleanly, else killed and replaced."""
        self._busy -= 1
        if self._tg is None or self._closed or not clean:
            self._discard(worker)
            return
        self._starting += 1  # counted as starting until it says ready again
        self._returning += 1
        self._tg.start_soon(self._await_ready, worker)

    async def _await_ready(self, worker: Worker) -> None:
        """After a clean run: the zygote (or supervisor) reports the run's end within ``REAP_TIMEOUT`` and is ready
        again within ``READY_TIMEOUT``, or it is killed (a run whose process, or a supervisor's run whose isolate,
        outlives its ``done`` costs its worker)."""
        ready = False
        try:
            if await worker.await_exit() is not None and (not worker.supervisor or await worker.isolates_gone()):
                with anyio.move_on_after(READY_TIMEOUT):
                    ready = await worker.await_ready()
        except (RunnerError, anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
            ready = False
        except BaseException:  # cancelled (the runner is closing): the worker goes too
            await worker.kill()
            raise
        finally:
            self._starting -= 1
            self._returning -= 1
        if ready and not self._closed and len(self._ready) < self._max_idle:
            worker.exit_status = None
            self._push(worker)
            return
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
    def busy(self) -> int:
        """Workers out on a run now."""
        return self._busy

    @property
    def idle_workers(self) -> list[Worker]:
        return list(self._ready)
