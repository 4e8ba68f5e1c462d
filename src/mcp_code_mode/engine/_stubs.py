"""The stubs every run sees: the tool index at the pool's version and one bundle per stub language; and a
tenant's view of both when its servers are a subset (``tenants.Tenant.servers``): only those servers."""

from __future__ import annotations

import itertools

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


_VIEW_VERSIONS = itertools.count(1 << 40)
"""Versions of tenants' bundles: never a pool's version nor another view's, so a worker that loaded one
bundle's stubs never takes another's for the same (``StubBundle.version``)."""


class StubBook:
    """Rebuilds the index and the bundles when the downstream tools change (``ToolPool.version``)."""

    def __init__(self, pool: ToolPool) -> None:
        self.pool = pool
        self._index: StubIndex | None = None
        self._bundles: dict[str, StubBundle] = {}
        self._built_for = -1
        self._views: dict[tuple[frozenset[str], str], StubIndex] = {}
        self._view_bundles: dict[tuple[frozenset[str], str, str], StubBundle] = {}

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
            self._views.clear()
            self._view_bundles.clear()
        assert self._index is not None
        return self._index

    def view(self, allowed: frozenset[str] | None, tenant: str = "") -> StubIndex:
        """The index as ``tenant`` sees it: its ``allowed`` servers only (None: every server)."""
        index = self.index
        if allowed is None:
            return index
        key = (allowed, tenant)
        if key not in self._views:
            self._views[key] = index.only(allowed, tenant)
        return self._views[key]

    def bundle(self, stub_language: str, allowed: frozenset[str] | None = None, tenant: str = "") -> StubBundle:
        """The stub module for one stub language at the current version: every server's, or only the ``allowed``
        ones' (rendered from the tenant's view, under a version of its own)."""
        index = self.view(allowed, tenant)
        if allowed is not None:
            key = (allowed, tenant, stub_language)
            if key not in self._view_bundles:
                self._view_bundles[key] = _bundle(index, stub_language, next(_VIEW_VERSIONS))
            return self._view_bundles[key]
        if stub_language not in self._bundles:
            self._bundles[stub_language] = _bundle(index, stub_language, self._built_for)
        return self._bundles[stub_language]

    def render(
        self,
        language: str,
        servers: list[str] | None = None,
        names: list[str] | None = None,
        allowed: frozenset[str] | None = None,
        tenant: str = "",
    ) -> str:
        """The stubs (all servers, the named servers, or the named tools) exactly as the sandbox defines them."""
        stub_language = STUB_LANGUAGES.get(language.strip().lower())
        if stub_language is None:
            raise UnsupportedError(
                f"stubs for {language!r} are not supported (supported: {', '.join(sorted(STUB_LANGUAGES))})"
            )
        renderer = RENDERERS[stub_language]
        index = self.view(allowed, tenant)
        if names:
            return renderer(index, select_tools(index, names))
        if servers is None:
            return self.bundle(stub_language, allowed, tenant).source
        selection: dict[str, tuple[ToolSpec, ...]] = {}
        for name in servers:
            spec = index.server(name)
            if spec is None:
                raise UnsupportedError(f"unknown server {name!r} ({index.known()})")
            selection[spec.name] = spec.tools
        return renderer(index, selection)


def _bundle(index: StubIndex, stub_language: str, version: int) -> StubBundle:
    source = RENDERERS[stub_language](index, None)
    namespaces = tuple(s.namespace for s in index.servers)
    functions = {s.namespace: tuple(t.func for t in s.tools) for s in index.servers}
    return StubBundle(source, version, namespaces, functions, dict(index.unavailable))


__all__ = ["STUB_LANGUAGES", "StubBook"]
