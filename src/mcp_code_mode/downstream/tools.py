"""One downstream tool as its server lists it (a leaf: the stubs, the bridge and the pool all use it)."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import mcp_types as types  # the SDK's types (about 0.2 s to import): for annotations only here


@dataclass(frozen=True)
class ToolInfo:
    """One downstream tool as listed by its server."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    title: str | None = None
    annotations: dict[str, Any] | None = None
    """The tool's MCP annotations as its server sent them (``readOnlyHint``, ``destructiveHint``, ...):
    untrusted hints, used only where the operator asks (``CODE_MODE_POLICY=annotations``)."""

    @functools.cached_property
    def schema_hash(self) -> str:
        """A short hash of the tool's name and schemas: it changes when the tool's contract changes.
        Computed once (the bridge records it with every call)."""
        blob = json.dumps([self.name, self.input_schema, self.output_schema], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @classmethod
    def from_mcp(cls, server: str, tool: types.Tool) -> ToolInfo:
        return cls(
            server=server,
            name=tool.name,
            description=(tool.description or "").strip(),
            input_schema=dict(tool.input_schema or {}),
            output_schema=dict(tool.output_schema) if tool.output_schema else None,
            title=tool.title,
            annotations=tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None,
        )


__all__ = ["ToolInfo"]
