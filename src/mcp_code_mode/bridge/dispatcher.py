"""The host's side of a tool call: resolve the name, call the pool, count, limit, convert the result.

``ToolDispatcher.handle`` answers one ``call`` message of a run. The sandbox never holds a session
or a credential; what it sends (server, tool, arguments) is untrusted and checked here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from ..downstream.pool import ToolPool
from ..errors import DownstreamError
from ..stubs.index import StubIndex

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


@dataclass
class ToolDispatcher:
    """Host side of the bridge for one run: resolves names, calls the pool, counts and limits."""

    pool: ToolPool
    index: StubIndex
    max_calls: int
    calls: list[ToolCallRecord] = field(default_factory=list)
    started: int = 0
    """Calls begun (several may be in flight at once: the cap counts these, not the finished ones)."""

    async def handle(self, server: str, tool: str, arguments: Any) -> dict[str, Any]:
        """Answer one ``call`` message: ``{"value": ...}`` or ``{"error": {"message", "server", "tool"}}``."""
        spec = self.index.tool(server, tool)
        real_server, real_tool = (spec.server, spec.name) if spec else (server, tool)
        where = {"server": real_server, "tool": real_tool}
        if self.started >= self.max_calls:
            return {"error": {"message": f"the run reached its limit of {self.max_calls} tool calls", **where}}
        self.started += 1
        if not isinstance(arguments, dict):
            return {"error": {"message": "arguments must be an object (a dict)", **where}}
        if spec is None:
            return {"error": {"message": self._unknown(server, tool), **where}}
        started = time.perf_counter()
        ok = False
        try:
            result = await self.pool.call_tool(real_server, real_tool, arguments)
            if result.is_error:
                return {"error": {"message": error_text(result), **where}}
            ok = True
            return {"value": result_to_value(result)}
        except DownstreamError as exc:
            return {"error": {"message": str(exc), **where}}
        finally:
            self.calls.append(
                ToolCallRecord(
                    real_server, real_tool, ok, (time.perf_counter() - started) * 1000, spec.info.schema_hash
                )
            )

    def _unknown(self, server: str, tool: str) -> str:
        spec = self.index.server(server)
        if spec is None:
            known = ", ".join(s.name for s in self.index.servers) or "none"
            return f"unknown server {server!r} (configured: {known})"
        down = self.index.unavailable_reason(spec)
        entry = self.pool.servers.get(spec.name)
        if down is None and entry is not None and entry.state != "ready" and not spec.tools:
            down = entry.error or _STATES.get(entry.state, entry.state)
        if down is not None:
            return f"server {spec.name!r} is not available: {down}"
        names = ", ".join(t.name for t in spec.tools) or "none"
        return f"server {spec.name!r} has no tool {tool!r} (its tools: {names})"
