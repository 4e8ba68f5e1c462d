"""Asking the person about a run's gated (``ask``) calls while the run waits.

A run is a live process: a gated call simply waits for the answer, and so do calls made together with
it (``Promise.all``): the ``Approver`` collects the calls that arrive within ``window`` of each other (for
at most ``MAX_GATHER``) and asks about all of them in one elicitation (form mode) with three choices,
*allow once* (these calls), *allow for this run* (these tools, for the rest of the run) and *deny*. While
a question is open the run's clock stands still (``RunClock.stopped``); the question has its own timeout
(``CODE_MODE_APPROVAL_TIMEOUT``), after which the calls are denied. The server layer supplies
``elicit`` (``ctx.elicit`` of the MCP tool call that started the run); a client without elicitation
gets no ``Approver``, and the dispatcher refuses gated calls saying how to get them approved.
"""

from __future__ import annotations

import contextlib
import json
import time
import unicodedata
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio
from pydantic import BaseModel, Field


class Clock(Protocol):
    """The run's clock (``bridge.RunClock``): it stands still while ``stopped()`` lasts."""

    def stopped(self) -> AbstractContextManager[None]: ...


Choice = Literal["allow_once", "allow_run", "deny"]
Elicit = Callable[[str], Awaitable["Choice | None"]]
"""Ask the person ``message``; their choice, or None when they declined or cancelled the question."""
LISTED = 20
"""Calls listed one by one in a question; the rest are summed up per tool."""


class ApprovalForm(BaseModel):
    """What the elicitation asks for (primitive fields only, as form mode requires)."""

    decision: Choice = Field(
        title="Decision",
        description="allow_once: these calls; allow_run: these tools for the rest of this run; deny: refuse them",
    )


@dataclass(frozen=True)
class Gated:
    """A call that waits for approval."""

    server: str
    tool: str
    arguments: Mapping[str, Any]
    position: int
    """The call's number in its run (1 for the first call)."""
    rule: str
    """What gated it (``filesystem: tools["write_*"]``)."""
    line: int | None = None
    """The script's line that made it, when the sandbox said."""


@dataclass(frozen=True)
class Answer:
    allowed: bool
    how: str
    """``approved once``, ``approved for the rest of this run``, ``denied by the person``, ... (for errors and
    the audit log)."""


@dataclass
class _Waiting:
    call: Gated
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: Answer | None = None


def visible(text: str, limit: int) -> str:
    """``text`` on one line as the person will read it: line breaks, control and format characters (bidi
    overrides, zero-width ones) shown as ``\\uXXXX``, cut to ``limit`` characters. The model writes a run's
    description and arguments: it must not be able to draw fake lines into the question."""
    shown = "".join(c if c == " " or unicodedata.category(c)[0] not in "CZ" else f"\\u{ord(c):04x}" for c in text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def shorten(arguments: Mapping[str, Any], limit: int = 160) -> str:
    return visible(json.dumps(arguments, ensure_ascii=False, default=repr, separators=(", ", ": ")), limit)


def question(calls: list[Gated], description: str | None) -> str:
    """The elicitation's message: the run, then each call (server, tool, shortened arguments, its position)."""
    run = f"The script “{visible(description, 200)}”" if description else "A script"
    many = "a tool call that needs" if len(calls) == 1 else f"{len(calls)} tool calls that need"
    lines = [f"{run} wants to make {many} your approval:"]
    for number, call in enumerate(calls[:LISTED], 1):
        at = f", line {call.line}" if call.line else ""
        where = f"(call {call.position} of the run{at}; {call.rule})"
        lines.append(f"{number}. {call.server}.{call.tool} {shorten(call.arguments)} {where}")
    rest: dict[str, int] = {}
    for call in calls[LISTED:]:
        rest[f"{call.server}.{call.tool}"] = rest.get(f"{call.server}.{call.tool}", 0) + 1
    if rest:
        lines.append("… and " + ", ".join(f"{count} more of {name}" for name, count in rest.items()))
    lines.append(
        "allow_once: these calls only · allow_run: these tools for the rest of this run · deny: the script gets "
        "ToolError"
    )
    return "\n".join(lines)


MAX_GATHER = 0.5
"""Seconds an approval question waits, at most, for more calls to join it while they keep arriving."""


class Approver:
    """Asks about one run's gated calls (see the module docstring); ``running()`` while the run lasts."""

    def __init__(
        self,
        elicit: Elicit,
        *,
        timeout: float,
        description: str | None = None,
        clock: Clock | None = None,
        window: float = 0.05,
    ) -> None:
        self._elicit = elicit
        self.timeout = timeout
        self.description = description
        self.clock = clock
        self.window = window
        self.allowed_tools: set[tuple[str, str]] = set()
        """Tools the person allowed for the rest of this run."""
        self.questions = 0
        """Elicitations sent so far."""
        self._queue: list[_Waiting] = []
        self._wake = anyio.Event()
        self._open = False

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncGenerator[Approver]:
        async with anyio.create_task_group() as tg:
            self._open = True
            tg.start_soon(self._serve)
            try:
                yield self
            finally:
                self._open = False
                tg.cancel_scope.cancel()
                for waiting in self._queue:  # the run is over: nothing left is allowed
                    self._answer(waiting, Answer(False, "the run ended before the answer"))
                self._queue = []

    async def decide(self, call: Gated) -> Answer:
        """Wait for the person's answer about ``call`` (the run's clock stands still meanwhile)."""
        if (call.server, call.tool) in self.allowed_tools:
            return Answer(True, "allowed for the rest of this run")
        if not self._open:
            return Answer(False, "no one is asking: the run is not open for approvals")
        waiting = _Waiting(call)
        self._queue.append(waiting)
        self._wake.set()
        with self.clock.stopped() if self.clock is not None else contextlib.nullcontext():
            await waiting.done.wait()
        assert waiting.answer is not None
        return waiting.answer

    def _answer(self, waiting: _Waiting, answer: Answer) -> None:
        waiting.answer = answer
        waiting.done.set()

    async def _serve(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            # Calls sent together join this question: wait until none has arrived for ``window`` (a busy host
            # may take longer than that to read fifty calls sent at once), at most ``MAX_GATHER`` in all.
            started, seen = time.monotonic(), -1
            while len(self._queue) != seen and time.monotonic() - started < MAX_GATHER:
                seen = len(self._queue)
                await anyio.sleep(self.window)
            batch, self._queue = self._queue, []
            pending: list[_Waiting] = []
            for waiting in batch:
                if (waiting.call.server, waiting.call.tool) in self.allowed_tools:
                    self._answer(waiting, Answer(True, "allowed for the rest of this run"))
                else:
                    pending.append(waiting)
            if pending:
                answer = await self._ask([w.call for w in pending])
                for waiting in pending:
                    self._answer(waiting, answer)

    async def _ask(self, calls: list[Gated]) -> Answer:
        self.questions += 1
        choice: Choice | None = None
        with anyio.move_on_after(self.timeout) as waited:
            try:
                choice = await self._elicit(question(calls, self.description))
            except Exception as exc:  # the client failed the request: nothing is approved
                return Answer(False, f"the approval request failed: {exc}")
        if waited.cancelled_caught:
            return Answer(False, f"no answer within {self.timeout:g} s (CODE_MODE_APPROVAL_TIMEOUT)")
        if choice == "allow_once":
            return Answer(True, "approved once")
        if choice == "allow_run":
            self.allowed_tools.update((c.server, c.tool) for c in calls)
            return Answer(True, "approved for the rest of this run")
        if choice == "deny":
            return Answer(False, "denied by the person")
        return Answer(False, "the person declined to answer")


__all__ = ["Answer", "ApprovalForm", "Approver", "Choice", "Elicit", "Gated", "question", "shorten"]
