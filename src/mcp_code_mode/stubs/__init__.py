"""Stubs: what a downstream tool looks like inside the sandbox, per stub language.

``RENDERERS`` maps a stub language to a function that renders the module a runner loads
(``index``, optional ``selection`` of server name → tools) → source text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .index import StubIndex, ToolSpec
from .python import render_module as render_python
from .typescript import render_module as render_typescript

Renderer = Callable[[StubIndex, Mapping[str, Iterable[ToolSpec]] | None], str]

RENDERERS: dict[str, Renderer] = {"python": render_python, "typescript": render_typescript}

__all__ = ["RENDERERS", "Renderer", "StubIndex", "ToolSpec"]
