"""What every runner takes and gives back, and the small protocol it implements."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..bridge import ErrorInfo, FileInfo, RunOutcome, ToolDispatcher

OutputCallback = Callable[[str], Awaitable[None]]
"""Receives printed output while a run goes on (see ``RunRequest.on_output``)."""


@dataclass(frozen=True)
class StubBundle:
    """The stub source for one language at one tool-index version, and the namespaces it defines."""

    source: str
    version: int
    namespaces: tuple[str, ...]
    functions: Mapping[str, tuple[str, ...]] = field(default_factory=dict[str, tuple[str, ...]])
    """Namespace → function names, for runners that define the stubs from names (``deno``)."""


@dataclass(frozen=True)
class RunRequest:
    code: str
    language: str
    timeout: float
    """Seconds; the process is killed when it runs out."""
    max_output: int
    """Characters of printed output kept."""
    stubs: StubBundle
    allow_network: bool = False
    authorized_imports: tuple[str, ...] = ()
    environment: str | None = None
    """A package environment (host directory) the sandbox mounts for this run."""
    preload: tuple[str, ...] = ()
    """Modules of that environment worth importing before the run (in the warm worker)."""
    on_output: OutputCallback | None = None
    """Called with each chunk of printed output as soon as the runner receives it (a worker sends
    about every 50 ms while a script prints), in order, and awaited before the runner reads on.
    Only what is kept (within ``max_output``) is passed. A runner that can only collect output at
    the end calls it once with everything. ``RunOutcome.output`` still holds the whole output."""
    packages: tuple[str, ...] = ()
    """Packages the request asked for (``packages`` of ``execute_code``); runners that take none get ()."""


class Runner(Protocol):
    """Executes code in a child process (or WebAssembly) that it can kill."""

    name: str
    languages: tuple[str, ...]
    """Canonical languages it runs (``python``, ``javascript``, ``typescript``)."""
    stub_language: str
    """The key of ``stubs.RENDERERS`` whose module this runner loads."""

    @property
    def isolation(self) -> str:
        """What stands between a script and the host: ``process`` or ``namespaces``, joined with ``+`` by what a
        runner adds inside it (``namespaces+deno-permissions``, ``namespaces+wasm``)."""
        ...

    async def start(self) -> None:
        """Warm up (start waiting workers). Called once before the first run."""
        ...

    async def aclose(self) -> None:
        """Stop every worker; no child process may outlive this."""
        ...

    async def ready(self) -> None:
        """Return once a run would find a warm worker (at once for a runner that keeps none, or whose
        first worker failed to start). The engine waits for this, bounded, before it serves."""
        ...

    def set_stubs(self, stubs: StubBundle) -> None:
        """The current stubs, so that warm workers can load them before they are needed."""
        ...

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunOutcome: ...


__all__ = ["ErrorInfo", "FileInfo", "OutputCallback", "RunOutcome", "RunRequest", "Runner", "StubBundle"]
