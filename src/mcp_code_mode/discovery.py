"""``search_tools`` and ``get_tool_stubs``: finding the few downstream tools a script needs.

Tools are ranked with the script cache's hybrid machinery (``cache.search.MemoryIndex``: FTS5 BM25
over name, description and parameters, plus embeddings, fused by reciprocal rank). The index is
in memory and rebuilt whenever the pool's tool version changes, so a server that adds or removes
tools is reflected by the next call.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, Literal

from .cache.describe import split_identifier
from .cache.embed import Embedder
from .cache.search import MemoryIndex
from .errors import UnsupportedError
from .stubs.index import StubIndex, ToolSpec
from .stubs.python import render_server, render_tool

Detail = Literal["name", "summary", "full"]
DETAILS: tuple[str, ...] = ("name", "summary", "full")
ToolKey = tuple[str, str]
"""``(server name, tool name)``."""

_FIELDS = {"name": 4.0, "description": 1.5, "params": 1.0, "server": 1.0}


def first_sentence(text: str, limit: int = 160) -> str:
    """The first sentence (or line) of a description, at most ``limit`` characters."""
    line = " ".join(text.strip().split("\n\n", 1)[0].split())
    for end in (". ", "? ", "! "):
        if end in line:
            line = line.split(end, 1)[0] + end.strip()
            break
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _document(spec: ToolSpec, server_description: str | None) -> tuple[ToolKey, dict[str, str], str]:
    name_words = " ".join(dict.fromkeys([*split_identifier(spec.name), *split_identifier(spec.func), spec.name]))
    params = " ".join(f"{' '.join(split_identifier(p.name))} {p.description}" for p in spec.params)
    server = " ".join([spec.server, spec.namespace, server_description or ""])
    fields = {"name": name_words, "description": spec.info.description, "params": params, "server": server}
    text = f"{spec.namespace} {' '.join(split_identifier(spec.func))}. {spec.info.description} {params}"
    return (spec.server, spec.name), fields, text


class ToolSearch:
    """Ranks the downstream tools of a ``StubIndex``; rebuilt when the index's version changes."""

    def __init__(self, embedder: Embedder | None) -> None:
        self._embedder = embedder
        self._index: MemoryIndex[ToolKey] | None = None
        self._version = -1

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

    def _ensure(self, stubs: StubIndex, version: int) -> MemoryIndex[ToolKey]:
        if self._index is None or version != self._version:
            self.close()
            index: MemoryIndex[ToolKey] = MemoryIndex(_FIELDS, self._embedder)
            index.add([_document(t, s.description) for s in stubs.servers for t in s.tools])
            self._index, self._version = index, version
        return self._index

    def search(
        self,
        stubs: StubIndex,
        version: int,
        query: str,
        *,
        server: str | None = None,
        detail: str = "summary",
        limit: int = 10,
    ) -> dict[str, Any]:
        """The best ``limit`` tools for ``query`` (optionally on one ``server``) at the chosen ``detail``."""
        if detail not in DETAILS:
            raise UnsupportedError(f"detail must be one of {', '.join(DETAILS)}, got {detail!r}")
        only: str | None = None
        if server:
            spec = stubs.server(server)
            if spec is None:
                known = ", ".join(s.name for s in stubs.servers) or "none"
                raise UnsupportedError(f"unknown server {server!r} (connected: {known})")
            only = spec.name
        index = self._ensure(stubs, version)
        allowed = (lambda key: key[0] == only) if only else None
        hits = index.search(query, max(1, min(limit, 50)), allowed)
        tools: list[dict[str, Any]] = []
        for hit in hits:
            spec = stubs.tool(*hit.key)
            if spec is not None:
                tools.append({**describe_tool(spec, stubs, detail), "score": round(hit.score, 5)})  # pyright: ignore[reportArgumentType]
        return {"query": query, "detail": detail, "tools": tools}


def describe_tool(spec: ToolSpec, stubs: StubIndex, detail: Detail) -> dict[str, Any]:
    """One tool at a detail level: its name; plus one line and signature; or its complete Python stub."""
    out: dict[str, Any] = {"tool": spec.qualified, "server": spec.server}
    if spec.name != spec.func:
        out["originalName"] = spec.name
    if detail == "name":
        return out
    if detail == "summary":
        rendered = render_tool(spec)
        return {**out, "summary": first_sentence(spec.info.description), "signature": rendered.summary}
    server = stubs.server(spec.server)
    assert server is not None
    return {**out, "stub": render_server(server, [spec], {s.namespace for s in stubs.servers})}


def select_tools(stubs: StubIndex, names: Iterable[str]) -> dict[str, list[ToolSpec]]:
    """Resolve tool names (``server.tool``, ``namespace.func`` or a tool name unique across servers).

    Raises ``UnsupportedError`` naming every unknown or ambiguous name, with close matches.
    """
    selection: dict[str, list[ToolSpec]] = {}
    problems: list[str] = []
    every = stubs.tools()
    for raw in names:
        name = raw.strip()
        found: list[ToolSpec] = []
        if "." in name:
            server, tool = name.split(".", 1)
            spec = stubs.tool(server, tool)
            found = [spec] if spec else []
        else:
            found = [t for t in every if name in (t.name, t.func)]
        if len(found) == 1:
            selection.setdefault(found[0].server, [])
            if found[0] not in selection[found[0].server]:
                selection[found[0].server].append(found[0])
        elif found:
            problems.append(f"{name!r} is ambiguous: {', '.join(t.qualified for t in found)}")
        else:
            close = difflib.get_close_matches(name, [t.qualified for t in every] + [t.func for t in every], n=3)
            problems.append(f"unknown tool {name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    if problems:
        raise UnsupportedError("; ".join(problems))
    # keep the config's server order
    return {s.name: selection[s.name] for s in stubs.servers if s.name in selection}
