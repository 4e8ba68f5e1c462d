"""The one host loop: what the host does with a run's channel while the run goes on.

Every runner hands its run channel to ``serve_run``. It reads only what a run may say (see
``messages``): tool calls are answered through the dispatcher, up to ``max_calls`` of them being handled
at once (the loop reads no further call while that many are in hand; each answer goes to its caller by
id, as soon as it is ready; the dispatcher bounds how many reach servers at once, per run and per
server). A call marked ``wait`` (its worker sends nothing more until it is answered: a plain, blocking
stub call) is answered inline, without a task of its own; the mark is only a hint about scheduling. Each
call's id must be greater than the previous call's (so no two calls in hand share one); anything else is a
protocol error. Once an answer is on its way, the dispatcher's ``report`` tells the audit log of the calls
answered so far (in batches, while the run reads its answer), and of every call before the loop returns.
Output is kept up to the cap and passed on. A ``progress`` (the script's ``report_progress``) is
passed on at the host's pace: at most one every ``PROGRESS_INTERVAL`` seconds (the latest wins; the last
one before ``done`` goes out before the loop returns), at most ``MAX_PROGRESS_REPORTS`` per run, and none
without an ``on_progress``; a flood costs the loop a parse per message and the client nothing. The first
valid ``done`` ends the run;
nothing is read after it, and calls still being answered finish within the run's time (their answers are
not sent). Anything malformed ends the run with a ``ProtocolError`` outcome. The loop never raises for
what the run sent.

The run's timeout is a ``RunClock``, which stands still while the run waits for a person (an approval).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio

from ..errors import ProtocolError
from .messages import Call, FilePart, Image, Output, Progress, parse_run_message
from .outcome import ErrorDetail, RunResult


class RunChannel(Protocol):
    """A run's channel as the host sees it (``framing.LineChannel``, or ``fake.FakeWorker``)."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def receive(self) -> dict[str, Any] | None:
        """The next message (``ProtocolError`` when it is not one), or None once the run closed its end."""
        ...


PROGRESS_INTERVAL = 0.1
"""Seconds between two ``progress`` reports of one run passed on to ``on_progress``."""
MAX_PROGRESS_REPORTS = 1000
"""``progress`` reports of one run passed on at most; later ones are ignored."""

ProgressSink = Callable[[Progress], Awaitable[None]]
"""Receives a run's ``progress`` reports, at the host's pace (``serve_run``)."""


class CallHandler(Protocol):
    """What answers a run's tool calls (``ToolDispatcher``, or a test's fake). One that also has
    ``report(*, everything: bool = False)`` (``ToolDispatcher.report``) is told each time an answer is on its
    way to the run, and with ``everything=True`` once the run is over, before ``serve_run`` returns."""

    async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]: ...


class FileSink(Protocol):
    """Where a run's ``file`` and ``image`` messages go (``artifacts.RunFiles``): it counts what arrives and
    keeps only what its caps allow; it never raises for what the run sent."""

    def caps(self) -> dict[str, int]:
        """What the run message tells the sandbox (``artifacts``), so that it sends nothing over a cap."""
        ...

    def write(self, path: str, data: bytes, end: bool) -> None: ...

    def show(self, data: bytes, mime_type: str) -> None: ...


Ended = Literal["done", "closed", "timeout", "refused"]


class RunClock:
    """A run's deadline, which stands still while the run waits for a person (``paused``)."""

    def __init__(self) -> None:
        self._scope: anyio.CancelScope | None = None
        self._waiting = 0
        self._since = 0.0
        self._left = 0.0
        self.paused = 0.0
        """Seconds the clock stood still so far."""

    def attach(self, scope: anyio.CancelScope) -> None:
        self._scope = scope
        if self._waiting:
            self._left, scope.deadline = scope.deadline - anyio.current_time(), math.inf

    @contextlib.contextmanager
    def stopped(self) -> Generator[None]:
        """While the block runs (however many at once), the run's time stands still."""
        now = anyio.current_time()
        self._waiting += 1
        if self._waiting == 1:
            self._since = now
            if self._scope is not None:
                self._left, self._scope.deadline = self._scope.deadline - now, math.inf
        try:
            yield
        finally:
            self._waiting -= 1
            if self._waiting == 0:
                now = anyio.current_time()
                self.paused += now - self._since
                if self._scope is not None:
                    self._scope.deadline = now + self._left


class ProgressRelay:
    """Passes a run's ``progress`` reports on, the latest at most every ``interval`` seconds, ``cap`` in all."""

    def __init__(self, sink: ProgressSink, interval: float = PROGRESS_INTERVAL, cap: int = MAX_PROGRESS_REPORTS):
        self._sink = sink
        self._interval = interval
        self._cap = cap
        self._latest: Progress | None = None
        self._wake = anyio.Event()
        self._closing = anyio.Event()
        self._next = 0.0
        self.sent = 0

    def put(self, progress: Progress) -> None:
        """The run's newest report: replaces one not passed on yet; never waits."""
        if self.sent < self._cap:
            self._latest = progress
            self._wake.set()

    def close(self) -> None:
        """The run said ``done``: what is pending goes out now, and ``serve`` returns."""
        self._closing.set()
        self._wake.set()

    async def serve(self) -> None:
        while not self._closing.is_set() or self._latest is not None:
            await self._wake.wait()
            self._wake = anyio.Event()
            delay = self._next - anyio.current_time()
            if delay > 0 and not self._closing.is_set():
                with anyio.move_on_after(delay):
                    await self._closing.wait()
            latest, self._latest = self._latest, None
            if latest is not None and self.sent < self._cap:
                self.sent += 1
                self._next = anyio.current_time() + self._interval
                await self._sink(latest)


@dataclass
class HostRun:
    ended: Ended
    """``done``: the run said so; ``closed``: its channel closed first; ``timeout``; ``refused``: it sent
    something that is not a valid message (the outcome says what)."""
    outcome: RunResult


async def serve_run(
    channel: RunChannel,
    dispatcher: CallHandler,
    *,
    timeout: float,
    max_output: int,
    on_output: Callable[[str], Awaitable[None]] | None = None,
    max_calls: int = 1024,
    clock: RunClock | None = None,
    on_progress: ProgressSink | None = None,
    run: int | None = None,
    files: FileSink | None = None,
) -> HostRun:
    """Serve one run until its ``done``, its channel's end, a malformed message or ``timeout`` seconds (plus
    the time ``clock`` stood still); at most ``max_calls`` tool calls are answered at once; the run's
    ``progress`` reports go to ``on_progress`` (coalesced, capped); its files and shown images to ``files``
    (ignored without one).

    ``run``: the number of a session's run; a ``done`` that does not echo it (a previous run's, sent late by
    something that run left running) is ignored."""
    output: list[str] = []
    kept = 0
    started = time.perf_counter()
    ended: Ended = "timeout"
    outcome = RunResult(
        success=False, error=ErrorDetail("TimeoutError", f"the run did not finish within {timeout * 1000:.0f} ms")
    )
    slots = anyio.CapacityLimiter(max(1, max_calls))
    sending = anyio.Lock(fast_acquire=True)  # no turn of the event loop when no other answer is being sent
    closed = anyio.Event()
    report: Callable[..., None] = getattr(dispatcher, "report", None) or _nothing

    async def answer(message: Call) -> None:  # with a slot already taken for it
        try:
            reply = await dispatcher.handle(message.server, message.tool, message.arguments, message.line)
        finally:
            slots.release_on_behalf_of(message.id)
        async with sending:
            try:
                await channel.send({"op": "result", "id": message.id, **reply})
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                closed.set()
        report()

    one_at_a_time = max_calls <= 1  # a worker that waits for each answer: no task per call (a fast path)
    last_id: int | None = None

    with _reported(report), anyio.CancelScope(deadline=anyio.current_time() + timeout) as scope:
        if clock is not None:
            clock.attach(scope)
        async with anyio.create_task_group() as calls:

            async def watch_closed() -> None:  # the run's end of the channel broke while answering
                await closed.wait()
                if ended != "done":
                    calls.cancel_scope.cancel()

            calls.start_soon(watch_closed)
            relay = ProgressRelay(on_progress) if on_progress is not None else None
            if relay is not None:
                calls.start_soon(relay.serve)
            try:
                while True:
                    raw = await channel.receive()
                    if raw is None:
                        ended, outcome = "closed", RunResult(success=False)
                        break
                    message = parse_run_message(raw)
                    if isinstance(message, Output):
                        data = message.data[: max(0, max_output - kept)]
                        kept += len(data)
                        output.append(data)
                        if data and on_output is not None:
                            await on_output(data)
                    elif isinstance(message, Progress):
                        if relay is not None:
                            relay.put(message)
                    elif isinstance(message, FilePart):
                        if files is not None:
                            files.write(message.path, message.data, message.end)
                    elif isinstance(message, Image):
                        if files is not None:
                            files.show(message.data, message.mime_type)
                    elif isinstance(message, Call):
                        if last_id is not None and message.id <= last_id:
                            raise ProtocolError(
                                f"the run sent a 'call' whose id {message.id} is not greater than the last ({last_id})"
                            )
                        last_id = message.id
                        if one_at_a_time or message.wait:
                            reply = await dispatcher.handle(
                                message.server, message.tool, message.arguments, message.line
                            )
                            try:
                                async with sending:
                                    await channel.send({"op": "result", "id": message.id, **reply})
                            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                                closed.set()
                                break
                            report()  # while the run reads its answer
                        else:
                            try:  # at most max_calls in hand (a free slot is taken without a turn of the loop)
                                slots.acquire_on_behalf_of_nowait(message.id)
                            except anyio.WouldBlock:
                                await slots.acquire_on_behalf_of(message.id)
                            calls.start_soon(answer, message)
                    elif run is not None and message.run != run:
                        continue  # an earlier run's done of the same session: not this run's end
                    else:
                        ended = "done"
                        outcome = RunResult(
                            success=message.success,
                            return_value=message.return_value,
                            error=message.error,
                            files=message.files,
                            truncated=message.dropped > 0,
                        )
                        break
            except ProtocolError as exc:
                ended, outcome = "refused", RunResult(success=False, error=ErrorDetail("ProtocolError", str(exc)))
            if ended == "done":  # calls the script did not wait for still finish (within the timeout)
                closed.set()  # the watcher goes without cancelling them
                if relay is not None:
                    relay.close()  # its last report goes out before the loop returns
            else:
                calls.cancel_scope.cancel()  # calls still being answered belong to a run that is over
        if closed.is_set() and ended == "timeout":
            ended, outcome = "closed", RunResult(success=False)
    outcome.output = "".join(output)
    outcome.truncated = outcome.truncated or kept >= max_output
    outcome.return_value, cut = cap_value(outcome.return_value, max_output)
    outcome.truncated = outcome.truncated or cut
    outcome.execution_time = round((time.perf_counter() - started) * 1000)
    return HostRun(ended, outcome)


def _nothing(*, everything: bool = False) -> None:
    """The ``report`` of a call handler that has none."""


@contextlib.contextmanager
def _reported(report: Callable[..., None]) -> Generator[None]:
    """Once the block is left (however: done, refused, timed out, cancelled), every answered call is reported."""
    try:
        yield
    finally:
        report(everything=True)


def cap_value(value: Any, cap: int) -> tuple[Any, bool]:
    """A run's return value within ``cap`` characters, and whether it had to be cut.

    Every runner's sandbox cuts its own value the same way; the host does it again, because what a run
    sends is not believed: a string longer than ``cap`` keeps its first ``cap`` characters, any other value
    whose JSON is longer becomes the first ``cap`` characters of that JSON text (a value the sandbox already
    cut is within the cap, so cutting is idempotent)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value, False
    if isinstance(value, str):
        return (value, False) if len(value) <= cap else (value[:cap], True)
    text = json.dumps(value, ensure_ascii=False, default=repr)
    if len(text) <= cap:
        return value, False
    return text[:cap], True
