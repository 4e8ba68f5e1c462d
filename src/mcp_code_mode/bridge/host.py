"""The one host loop: what the host does with a run's channel while the run goes on.

Every runner hands its run channel to ``serve_run``. It reads only what a run may say (see
``messages``): tool calls are answered through the dispatcher, output is kept up to the cap and
passed on, and the first valid ``done`` ends the run; nothing is read after it. Anything malformed
ends the run with a ``ProtocolError`` outcome. The loop never raises for what the run sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio

from ..errors import ProtocolError
from .messages import Call, Output, parse_run_message
from .outcome import ErrorDetail, RunResult


class RunChannel(Protocol):
    """A run's channel as the host sees it (``framing.LineChannel``, or ``fake.FakeWorker``)."""

    async def send(self, message: dict[str, Any]) -> None: ...

    async def receive(self) -> dict[str, Any] | None:
        """The next message (``ProtocolError`` when it is not one), or None once the run closed its end."""
        ...


class CallHandler(Protocol):
    """What answers a run's tool calls (``ToolDispatcher``, or a test's fake)."""

    async def handle(self, server: str, tool: str, arguments: Any) -> dict[str, Any]: ...


Ended = Literal["done", "closed", "timeout", "refused"]


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
) -> HostRun:
    """Serve one run until its ``done``, its channel's end, a malformed message or ``timeout`` seconds."""
    output: list[str] = []
    kept = 0
    started = time.perf_counter()
    ended: Ended = "timeout"
    outcome = RunResult(
        success=False, error=ErrorDetail("TimeoutError", f"the run did not finish within {timeout * 1000:.0f} ms")
    )
    with anyio.move_on_after(timeout):
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
                elif isinstance(message, Call):
                    reply = await dispatcher.handle(message.server, message.tool, message.arguments)
                    try:
                        await channel.send({"op": "result", "id": message.id, **reply})
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        ended, outcome = "closed", RunResult(success=False)
                        break
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
    outcome.output = "".join(output)
    outcome.truncated = outcome.truncated or kept >= max_output
    outcome.return_value, cut = cap_value(outcome.return_value, max_output)
    outcome.truncated = outcome.truncated or cut
    outcome.execution_time = round((time.perf_counter() - started) * 1000)
    return HostRun(ended, outcome)


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
