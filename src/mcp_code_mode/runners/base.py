"""The plug-in contract of a runner: what it declares, what it takes and gives back.

A runner module defines ``PLUGIN = RunnerPlugin(info, build, diagnose)``; ``runners/registry.py`` finds it.
Nothing outside ``runners/`` names a runner: the engine, the server, ``validate_code`` and ``doctor``
ask the plug-in (``RunnerInfo``) and the built runner (``Runner``) everything they need.

Isolation, one vocabulary (what ``get_execution_limits`` and ``list_supported_languages`` report):
``process`` (a worker process with rlimits, no namespaces on this host) or ``namespaces`` (bubblewrap:
its own mount, PID, IPC, UTS and network namespaces and an unprivileged uid), joined with ``+`` by what the
runner adds inside it: ``+interpreter`` (an AST interpreter with an import allow-list),
``+deno-permissions`` (Deno's permission flags), ``+wasm`` (WebAssembly memory).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..bridge import ErrorDetail, FileEntry, ProgressSink, RunClock, RunResult
from ..bridge.host import FileSink
from ..egress import NetworkGrant

if TYPE_CHECKING:
    from ..bridge import ToolDispatcher
    from ..config import Settings
    from ..packages import Whitelist
    from ..sandbox import Sandbox
    from ..stubs import StubIndex

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
    unavailable: Mapping[str, str] = field(default_factory=dict[str, str])
    """Namespace → why its server is down: calling any of its tools says so."""
    skills: tuple[Mapping[str, Any], ...] = ()
    """The skills a run of this stub language may call (``skills.SkillBook.run_specs``), sent with each run and
    defined in the run's own interpreter, never in a zygote."""


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
    network: NetworkGrant | None = None
    """What the run may reach through the egress proxy (set whenever ``allow_network`` is)."""
    authorized_imports: tuple[str, ...] = ()
    environment: str | None = None
    """A package environment (host directory) the sandbox mounts for this run."""
    preload: tuple[str, ...] = ()
    """Modules of that environment worth importing before the run (in the warm worker)."""
    on_output: OutputCallback | None = None
    """Called with each chunk of printed output as soon as the runner receives it (a worker sends
    about every 50 ms while a script prints), in order, and awaited before the runner reads on.
    Only what is kept (within ``max_output``) is passed. A runner that can only collect output at
    the end calls it once with everything. ``RunResult.output`` still holds the whole output."""
    packages: tuple[str, ...] = ()
    """Packages the request asked for (``packages`` of ``execute_code``); runners that take none get ()."""
    max_concurrent_calls: int = 16
    """Tool calls of the run answered at once (``CODE_MODE_MAX_CONCURRENT_CALLS``)."""
    clock: RunClock | None = None
    """The run's deadline, which time spent waiting for a person's approval does not use up."""
    on_progress: ProgressSink | None = None
    """Receives the script's ``report_progress`` figures, at the host's pace (``bridge.serve_run``)."""
    session_memory_mb: int | None = None
    """Set for a session's runs: the memory its worker may use (the whole session's, set at its first run)."""
    owner: str | None = None
    """Whose run this is (tenant and client). A worker that serves several runs in one process (the ``deno``
    runner's isolate mode) serves runs of its first run's owner only; a run without one costs its worker."""
    files: FileSink | None = None
    """Where the run's workspace files and shown images go (the engine's ``artifacts.RunFiles``); None keeps none:
    the run message then carries no ``artifacts`` caps and the sandbox sends no file's bytes."""


PackageKind = Literal["none", "environment", "self"]
"""How a runner gets a run's packages: ``none`` (it takes none), ``environment`` (the engine installs a Python
environment with uv and the sandbox mounts it), ``self`` (the runner installs them: Deno's npm cache,
Pyodide's wheels)."""


PYTHON_AWAITABLE_RULE = (
    "a stub call is awaitable inside `async def` (its comprehensions too) and in top-level code when written "
    "inside an `await` (`await asyncio.gather(*[srv.tool(x=i) for i in range(3)])`); elsewhere it returns the result"
)
"""When a stub call is awaitable under the Python runners that run asyncio (``cm_runtime.AwaitableCalls``)."""


@dataclass(frozen=True)
class RunnerInfo:
    """What a runner declares about itself, before it is built."""

    name: str
    languages: tuple[str, ...]
    """Canonical languages it runs (``python``, ``javascript``, ``typescript``)."""
    stub_language: str
    """The key of ``stubs.RENDERERS`` whose module its scripts see."""
    summary: str
    """A few words for the tool surface (``list_supported_languages``)."""
    brief: str = ""
    """Two or three words for ``execute_code``'s ``runner`` parameter, which every turn of a model pays for (empty:
    the summary, clipped)."""
    packages: PackageKind = "none"
    package_manager: str | None = None
    """How its packages are installed, in words (``list_supported_languages``)."""
    default_for: tuple[str, ...] = ()
    """Languages it runs when a request names no runner (``CODE_MODE_PYTHON_RUNNER`` overrides for Python)."""
    order: int = 100
    """Where it is listed (lower first)."""
    keeps_off_network: bool = False
    """The runner itself leaves a script no way to the network (no sockets reachable), so a run without network
    holds even where the sandbox has no network namespace."""
    settings: tuple[str, ...] = ()
    """The ``Settings`` fields it reads (shown in ``get_execution_limits``)."""
    awaitable_stubs: str = ""
    """When a stub call must be awaited, in one sentence (empty: never)."""
    sessions: bool = False
    """Whether its built runner opens sessions (``SessionRunner.open_session``): runs in one interpreter whose
    globals, imports and workspace persist from run to run."""
    runs_skills: bool = True
    """Its runs can call saved skills (``skills.name(...)``), defined in the run's interpreter."""


@dataclass(frozen=True)
class RunnerContext:
    """What a plug-in's ``build`` gets: the server's settings, its sandbox and its package allow-list."""

    settings: Settings
    sandbox: Sandbox
    whitelist: Whitelist


@dataclass(frozen=True)
class Diagnosis:
    """One line of ``mcp-code-mode doctor`` about what a runner needs on this host."""

    status: Literal["ok", "warn", "FAIL", "info"]
    topic: str
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class CheckRequest:
    """What ``validate_code`` asks a runner to check (nothing runs, no tool is called)."""

    code: str
    language: str
    index: StubIndex
    declarations: str
    """The stub module of the runner's stub language, as the run would see it."""
    requirements: tuple[str, ...]
    """Validated packages the script will ask for."""
    package_imports: tuple[str, ...]
    """Modules those packages provide."""
    max_bytes: int


class Runner(Protocol):
    """A built runner: it executes code in a child process (or WebAssembly inside one) that it can kill."""

    info: RunnerInfo

    @property
    def name(self) -> str: ...

    @property
    def languages(self) -> tuple[str, ...]: ...

    @property
    def stub_language(self) -> str: ...

    @property
    def isolation(self) -> str:
        """What stands between a script and the host on this host right now (see the module's vocabulary)."""
        ...

    def authorized_imports(self, package_imports: tuple[str, ...]) -> tuple[str, ...] | None:
        """The modules a script may import given its packages' modules, or None when the runner allows any
        import (the sandbox alone decides what an import can reach)."""
        ...

    async def check(self, request: CheckRequest) -> list[dict[str, Any]]:
        """``validate_code`` findings (``line``, ``column``, ``kind``, ``message``)."""
        ...

    def identity(self) -> dict[str, str]:
        """Versions of what runs a script (besides its worker sources), for the script cache's keys."""
        ...

    def describe(self) -> dict[str, Any]:
        """Its state for ``get_execution_limits``: pools, warm environments and their cap, problems."""
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

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult: ...


class RunnerSession(Protocol):
    """One interpreter kept for a session's runs: a worker process that serves nothing else and is killed at
    ``aclose`` (or as soon as a run of it times out or its worker dies: it has then ``ended``)."""

    @property
    def ended(self) -> str | None:
        """Why the session can serve no further run (None while it can)."""
        ...

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult:
        """Run in the session's interpreter; a run that does not end with its own ``done`` ends the session."""
        ...

    async def aclose(self) -> None:
        """Kill the session's worker (and everything it started); no process may outlive this."""
        ...


@runtime_checkable
class SessionRunner(Protocol):
    """A runner that declares ``RunnerInfo.sessions``: it opens sessions."""

    async def open_session(self, request: RunRequest) -> RunnerSession:
        """A new session whose worker suits ``request`` (its network and packages are the session's)."""
        ...


def distribution_version(name: str) -> str:
    """The installed version of a Python distribution (``-`` when it is not installed), for ``identity()``."""
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


class Declared:
    """What a built runner says about itself, read from its ``info`` (a mixin: no behaviour of its own)."""

    info: RunnerInfo

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def languages(self) -> tuple[str, ...]:
        return self.info.languages

    @property
    def stub_language(self) -> str:
        return self.info.stub_language


@dataclass(frozen=True)
class RunnerPlugin:
    """A runner as the registry knows it: its declaration, how to build it, and what ``doctor`` checks."""

    info: RunnerInfo
    build: Callable[[RunnerContext], Runner]
    diagnose: Callable[[Settings], list[Diagnosis]] | None = None
    sources: tuple[Path, ...] = ()
    """Files of its sandbox-side program (besides the runner's own package), for the cache keys."""
    prune: Callable[[Settings, float], tuple[str, list[str]]] | None = None
    """``mcp-code-mode cache prune``: remove what the runner keeps in the cache directory that was not used for
    that many seconds; what they are (e.g. ``Pyodide snapshot(s)``) and the names removed."""


__all__ = [
    "CheckRequest",
    "Declared",
    "Diagnosis",
    "ErrorDetail",
    "FileEntry",
    "OutputCallback",
    "PYTHON_AWAITABLE_RULE",
    "PackageKind",
    "RunRequest",
    "RunResult",
    "Runner",
    "RunnerContext",
    "RunnerInfo",
    "RunnerPlugin",
    "RunnerSession",
    "SessionRunner",
    "StubBundle",
    "distribution_version",
]
