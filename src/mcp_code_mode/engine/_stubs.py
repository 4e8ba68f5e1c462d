"""The stubs every run sees: the tool index at the pool's version and one bundle per stub language."""

from __future__ import annotations

from ..discovery import select_tools
from ..downstream.pool import ToolPool, down_servers
from ..errors import UnsupportedError
from ..runners import StubBundle
from ..stubs import RENDERERS, StubIndex, ToolSpec

STUB_LANGUAGES: dict[str, str] = {
    "python": "python",
    "py": "python",
    "python3": "python",
    "typescript": "typescript",
    "ts": "typescript",
    "javascript": "typescript",
    "js": "typescript",
}
"""What ``get_tool_stubs``' ``language`` may be, and the stub module it means."""


class StubBook:
    """Rebuilds the index and the bundles when the downstream tools change (``ToolPool.version``)."""

    def __init__(self, pool: ToolPool) -> None:
        self.pool = pool
        self._index: StubIndex | None = None
        self._bundles: dict[str, StubBundle] = {}
        self._built_for = -1

    def stale(self) -> bool:
        return self._index is None or self._built_for != self.pool.version

    @property
    def index(self) -> StubIndex:
        """Namespaces and functions of every downstream tool, at the pool's current version."""
        if self.stale():
            self._built_for = self.pool.version
            servers = [(name, s.config.description) for name, s in self.pool.servers.items()]
            down = down_servers(self.pool.servers)
            self._index = StubIndex.build(servers, self.pool.tools(), unavailable=down)
            self._bundles.clear()
        assert self._index is not None
        return self._index

    def bundle(self, stub_language: str) -> StubBundle:
        """The full stub module for one stub language at the current version."""
        index = self.index
        if stub_language not in self._bundles:
            source = RENDERERS[stub_language](index, None)
            namespaces = tuple(s.namespace for s in index.servers)
            functions = {s.namespace: tuple(t.func for t in s.tools) for s in index.servers}
            unavailable = dict(index.unavailable)
            self._bundles[stub_language] = StubBundle(source, self._built_for, namespaces, functions, unavailable)
        return self._bundles[stub_language]

    def render(self, language: str, servers: list[str] | None = None, names: list[str] | None = None) -> str:
        """The stubs (all servers, the named servers, or the named tools) exactly as the sandbox defines them."""
        stub_language = STUB_LANGUAGES.get(language.strip().lower())
        if stub_language is None:
            raise UnsupportedError(
                f"stubs for {language!r} are not supported (supported: {', '.join(sorted(STUB_LANGUAGES))})"
            )
        renderer = RENDERERS[stub_language]
        index = self.index
        if names:
            return renderer(index, select_tools(index, names))
        if servers is None:
            return self.bundle(stub_language).source
        selection: dict[str, tuple[ToolSpec, ...]] = {}
        for name in servers:
            spec = index.server(name)
            if spec is None:
                raise UnsupportedError(
                    f"unknown server {name!r} (configured: {', '.join(s.name for s in index.servers)})"
                )
            selection[spec.name] = spec.tools
        return renderer(index, selection)


__all__ = ["STUB_LANGUAGES", "StubBook"]
