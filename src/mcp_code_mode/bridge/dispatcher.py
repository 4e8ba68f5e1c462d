"""The host's side of a tool call: resolve the name, call the pool, count, limit, convert the result.

``ToolDispatcher.handle`` answers one ``call`` message of a run. The sandbox never holds a session
or a credential; what it sends (server, tool, arguments) is untrusted and checked here. The observer (the
audit log) is told of answered calls by ``report``, which the host loop calls once an answer is on its way
to the run (so that the run goes on meanwhile) and once more when the run is over: in batches of up to
``REPORT_BATCH`` calls, or of what waited ``REPORT_SECONDS``, and always every call before the loop returns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import mcp_types as types

from ..downstream.pool import SERVER_CALLS, ToolPool
from ..downstream.tools import ToolInfo
from ..errors import DownstreamError
from ..observability.savings import SavingsMeter
from ..stubs.index import StubIndex, ToolSpec

_STATES = {
    "disabled": "disabled in the servers file",
    "starting": "still starting",
    "failed": "it failed to start",
    "crashed": "its process died",
    "stopped": "it was stopped",
}
"""A server state in words, for a down server that left no error message."""


def content_to_value(block: types.ContentBlock) -> Any:
    """One content block as a plain value: text (parsed when JSON), or a dict for images, audio, resources."""
    if isinstance(block, types.TextContent):
        return parse_text(block.text)
    if isinstance(block, types.ImageContent | types.AudioContent):
        return {"type": block.type, "data": block.data, "mimeType": block.mime_type}
    return block.model_dump(mode="json", by_alias=True, exclude_none=True)


def parse_text(text: str) -> Any:
    stripped = text.strip()
    if stripped[:1] in ("{", "[") or stripped in ("true", "false", "null"):
        try:
            return json.loads(stripped)
        except ValueError:
            return text
    return text


def result_to_value(result: types.CallToolResult) -> Any:
    """The value a stub returns: structured content, else the content (one block unwrapped)."""
    if result.structured_content is not None:
        return result.structured_content
    values = [content_to_value(block) for block in result.content]
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    if all(isinstance(v, str) for v in values):
        return "\n".join(values)
    return values


REPORT_BATCH = 64
"""At most this many answered calls wait for ``ToolDispatcher.report`` to tell the observer of them ..."""
REPORT_SECONDS = 0.25
"""... and none waits longer than this once the next answer is sent."""

OFF_LOOP_CHARS = 32_768
"""A result with more text than this is read for personal data in a worker thread (other runs go on)."""


def _text_size(result: types.CallToolResult) -> int:
    return sum(len(b.text) for b in result.content if isinstance(b, types.TextContent))


async def _take(limiter: anyio.CapacityLimiter | None) -> None:
    """A slot of ``limiter`` for the current task: at once when one is free (no turn of the event loop, as
    ``acquire`` takes), else in turn."""
    if limiter is None:
        return
    try:
        limiter.acquire_nowait()
    except anyio.WouldBlock:
        await limiter.acquire()


def error_text(result: types.CallToolResult) -> str:
    texts = [b.text for b in result.content if isinstance(b, types.TextContent)]
    return "\n".join(texts).strip() or "the tool reported an error without a message"


@dataclass
class ToolCallRecord:
    server: str
    tool: str
    ok: bool
    ms: float
    schema_hash: str | None
    decision: str = "allowed"
    """What the gate decided: ``allowed``, ``approved``, ``denied``, ``planned``, ``over_cap``, ``refused``."""
    error: str | None = None
    called: bool = True
    """Whether the call reached its server (a planned, denied or refused call did not)."""
    pii: dict[str, Any] | None = None
    """What was done to the tokens in its arguments (``privacy.PiiNote``), when it had any."""
    at_ns: int = 0
    """When the call began (``time.time_ns()``), for its trace span."""


@dataclass(frozen=True)
class Admission:
    """A gate's answer about one call: let it through, answer it without calling, or refuse it."""

    decision: str = "allowed"
    error: str | None = None
    """Refuse with this ``ToolError`` message."""
    answered: bool = False
    value: Any = None
    """With ``answered``: the call's value, given without calling the tool (a planned call's placeholder)."""


class CallGate(Protocol):
    """What decides each call before it reaches its server (``engine._gate.RunGate``: policy, approvals, plans)."""

    async def admit(
        self, tool: ToolInfo, arguments: dict[str, Any], position: int, line: int | None = None
    ) -> Admission: ...


class CallPrivacy(Protocol):
    """Tokens in a call's arguments and the personal data in its results (``privacy.RunPrivacy``)."""

    def restore(self, server: str, tool: str, arguments: Any) -> tuple[Any, Any]:
        """The arguments the tool receives, and a note (falsy when there were no tokens)."""
        ...

    def harvest(self, server: str, value: Any) -> None:
        """Note what a result (or an error message) of ``server`` carried, on its way to the script."""
        ...


CallObserver = Callable[[ToolCallRecord, dict[str, Any]], None]
"""Told of every call after it is answered, with its arguments (the audit log): by ``ToolDispatcher.report``,
every call of a run before the host loop returns."""


@dataclass
class ToolDispatcher:
    """Host side of the bridge for one run: resolves names, calls the pool, counts and limits."""

    pool: ToolPool
    index: StubIndex
    max_calls: int
    calls: list[ToolCallRecord] = field(default_factory=list)
    started: int = 0
    """Calls begun (several may be in flight at once: the cap counts these, not the finished ones)."""
    gate: CallGate | None = None
    observe: CallObserver | None = None
    concurrency: int = 16
    """Calls of this run made to servers at once (``CODE_MODE_MAX_CONCURRENT_CALLS``); a call waiting for a
    person's approval holds no slot, so the calls sent together are asked about together."""
    privacy: CallPrivacy | None = None
    """Restores tokens in arguments before the gate and the call; notes what results carry."""
    server_concurrency: Mapping[str, int] | None = None
    """Calls of this run made to one server at once, by server name; None: each server's
    ``maxConcurrentCalls`` in the servers file (the pool's configs). A server without a limit has only
    the run's (``concurrency``)."""
    savings: SavingsMeter = field(default_factory=SavingsMeter)
    """The results that reached the run (kept within a bound, counted after it: ``observability.savings``)."""

    def __post_init__(self) -> None:
        self._slots = anyio.CapacityLimiter(max(1, self.concurrency))
        self._server_slots: dict[str, anyio.CapacityLimiter | None] = {}
        self._specs: dict[tuple[str, str], ToolSpec] = {}
        self._unreported: list[tuple[ToolCallRecord, dict[str, Any]]] = []
        self._waiting_since = 0.0

    def report(self, *, everything: bool = False) -> None:
        """Tell the observer of the calls answered since the last report: all of them with ``everything`` (the
        run is over), else once ``REPORT_BATCH`` are waiting or the first has waited ``REPORT_SECONDS``."""
        waiting = self._unreported
        if not waiting or self.observe is None:
            return
        if not everything and len(waiting) < REPORT_BATCH and time.monotonic() - self._waiting_since < REPORT_SECONDS:
            return
        self._unreported = []
        for record, arguments in waiting:
            self.observe(record, arguments)

    def _observed(self, record: ToolCallRecord, arguments: dict[str, Any]) -> None:
        """``record`` is answered (or about to be): the next ``report`` tells the observer."""
        self.calls.append(record)
        if self.observe is not None:
            if not self._unreported:
                self._waiting_since = time.monotonic()
            self._unreported.append((record, arguments))

    def _server_limiter(self, server: str) -> anyio.CapacityLimiter | None:
        """The run's limiter of calls to ``server`` (made on its first call), or None when it has no limit."""
        try:
            return self._server_slots[server]
        except KeyError:
            pass
        limit: int | None
        if self.server_concurrency is not None:
            limit = self.server_concurrency.get(server)
        else:
            entry = self.pool.servers.get(server)
            limit = getattr(getattr(entry, "config", None), "max_concurrent_calls", None)
        limiter = anyio.CapacityLimiter(limit) if isinstance(limit, int) and 0 < limit < self.concurrency else None
        self._server_slots[server] = limiter
        return limiter

    @property
    def reached(self) -> list[ToolCallRecord]:
        """The calls that reached a server (what makes a run not replayable, and what its hash names)."""
        return [c for c in self.calls if c.called]

    async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
        """Answer one ``call`` message: ``{"value": ...}`` or ``{"error": {"message", "server", "tool"}}``.

        Every name a script can use (a stub, ``call_tool`` with the original or the sanitised names, any
        casing the index accepts) resolves here to the server's original names first; the gate decides on
        those, so no spelling gets around a policy."""
        spec = self._specs.get((server, tool))
        if spec is None:  # the index does not change during a run: each spelling of a tool is looked up once
            spec = self.index.tool(server, tool) or self._server_call(server, tool)
            if spec is not None:  # (the names of no tool are not kept: a script could send any number)
                self._specs[server, tool] = spec
        real_server, real_tool = (spec.server, spec.name) if spec else (server, tool)
        where = {"server": real_server, "tool": real_tool}
        if self.started >= self.max_calls:
            return {"error": {"message": f"the run reached its limit of {self.max_calls} tool calls", **where}}
        self.started += 1
        position = self.started
        at_ns = time.time_ns()
        refusal = None
        if not isinstance(arguments, dict):
            refusal = "arguments must be an object (a dict)"
        elif spec is None:
            refusal = self._unknown(server, tool)
        if refusal is not None or spec is None:  # still a call the run asked for: listed and audited
            message = refusal or self._unknown(server, tool)
            record = ToolCallRecord(
                real_server, real_tool, False, 0.0, None, "refused", message, called=False, at_ns=at_ns
            )
            self._observed(record, arguments if isinstance(arguments, dict) else {"arguments": repr(arguments)[:200]})
            return {"error": {"message": message, **where}}
        started = time.perf_counter()
        record = ToolCallRecord(real_server, real_tool, False, 0.0, spec.info.schema_hash, called=False, at_ns=at_ns)
        if self.privacy is not None:  # the gate judges, and the tool receives, what the tokens stand for
            arguments, note = self.privacy.restore(real_server, real_tool, arguments)
            if note:
                record.pii = note.to_json()
        try:
            admission = await self.gate.admit(spec.info, arguments, position, line) if self.gate else Admission()
            record.decision = admission.decision
            if admission.error is not None:
                record.error = admission.error
                return {"error": {"message": admission.error, **where}}
            if admission.answered:
                record.ok = True
                return {"value": admission.value}
            record.called = True
            limiter = self._server_limiter(real_server)
            # The server's limit first: calls waiting for a busy server hold none of the run's slots.
            await _take(limiter)
            try:
                await _take(self._slots)
                try:
                    if real_tool in SERVER_CALLS and self.pool.find(real_server, real_tool) is None:  # not a tool
                        return await self._answer_server_call(real_server, real_tool, arguments, record, where)
                    result = await self.pool.call_tool(real_server, real_tool, arguments)
                finally:
                    self._slots.release()
            finally:
                if limiter is not None:
                    limiter.release()
            self.savings.add(result)
            if result.is_error:
                record.error = error_text(result)
                if self.privacy is not None:
                    self.privacy.harvest(real_server, record.error)
                return {"error": {"message": record.error, **where}}
            record.ok = True
            value = result_to_value(result)
            if self.privacy is not None:
                if _text_size(result) > OFF_LOOP_CHARS:  # a large result is read off the event loop
                    await anyio.to_thread.run_sync(self.privacy.harvest, real_server, value)
                else:
                    self.privacy.harvest(real_server, value)
            return {"value": value}
        except DownstreamError as exc:
            record.error = str(exc)
            return {"error": {"message": record.error, **where}}
        finally:
            record.ms = (time.perf_counter() - started) * 1000
            self._observed(record, arguments)

    def _server_call(self, server: str, op: str) -> ToolSpec | None:
        """A server's resources or prompts (``SERVER_CALLS``) as a call the gate decides like a tool's (its policy
        sees the reserved name, e.g. ``resources/read``), or None when ``op`` is not one or there is no server."""
        if op not in SERVER_CALLS:
            return None
        spec = self.index.server(server)
        if spec is None or self.index.unavailable_reason(spec) is not None:
            return None
        info = ToolInfo(spec.name, op, "", {"type": "object"}, None, annotations={"readOnlyHint": True})
        return ToolSpec(info=info, namespace=spec.namespace, func=op, params=())

    async def _answer_server_call(
        self, server: str, op: str, arguments: dict[str, Any], record: ToolCallRecord, where: dict[str, str]
    ) -> dict[str, Any]:
        try:
            value = await self.pool.server_call(server, op, arguments)
        except ValueError as exc:
            record.error = f"{op}: {exc}"
            self.savings.add_text(record.error)
            return {"error": {"message": record.error, **where}}
        record.ok = True
        self.savings.add_value(value)
        if self.privacy is not None:  # what a resource or prompt holds is noted like a tool's result
            await anyio.to_thread.run_sync(self.privacy.harvest, server, value)
        return {"value": value}

    def _unknown(self, server: str, tool: str) -> str:
        spec = self.index.server(server)
        if spec is None:  # a server outside a tenant's view is as unknown as one never configured
            return f"unknown server {server!r} ({self.index.known()})"
        down = self.index.unavailable_reason(spec)
        entry = self.pool.servers.get(spec.name)
        if down is None and entry is not None and entry.state != "ready" and not spec.tools:
            down = entry.error or _STATES.get(entry.state, entry.state)
        if down is not None:
            return f"server {spec.name!r} is not available: {down}"
        names = ", ".join(t.name for t in spec.tools) or "none"
        return f"server {spec.name!r} has no tool {tool!r} (its tools: {names})"
