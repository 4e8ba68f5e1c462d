"""What every runner takes and gives back, and the small protocol it implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..bridge import ToolDispatcher


@dataclass(frozen=True)
class StubBundle:
    """The stub source for one language at one tool-index version, and the namespaces it defines."""

    source: str
    version: int
    namespaces: tuple[str, ...]


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
    packages: tuple[str, ...] = ()
    """Requirements to install first (only runners with ``installs_packages`` accept any)."""


@dataclass
class ErrorInfo:
    type: str
    message: str
    line: int | None = None
    traceback: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "line": self.line, "traceback": self.traceback}


@dataclass
class FileInfo:
    path: str
    size: int


@dataclass
class RunOutcome:
    success: bool
    output: str = ""
    truncated: bool = False
    return_value: Any = None
    error: ErrorInfo | None = None
    files: list[FileInfo] = field(default_factory=list)
    duration: float = 0.0
    """Seconds from sending the code to the end of the run."""


class Runner(Protocol):
    """Executes code in a child process (or WebAssembly) that it can kill."""

    name: str
    languages: tuple[str, ...]
    """Canonical languages it runs (``python``, ``javascript``, ``typescript``)."""
    stub_language: str
    """The key of ``stubs.RENDERERS`` whose module this runner loads."""
    isolation: str
    """What stands between a script and the host: ``process``, ``namespaces`` or ``wasm``."""

    async def start(self) -> None:
        """Warm up (start waiting workers). Called once before the first run."""
        ...

    async def aclose(self) -> None:
        """Stop every worker; no child process may outlive this."""
        ...

    def set_stubs(self, stubs: StubBundle) -> None:
        """The current stubs, so that warm workers can load them before they are needed."""
        ...

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunOutcome: ...
