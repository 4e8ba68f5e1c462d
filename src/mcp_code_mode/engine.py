"""``CodeMode``: the façade used by the MCP server, the CLI and library users.

async with CodeMode.from_config("mcp_servers.json") as cm:
    result = await cm.execute("print(filesystem.list_directory(path='.'))")
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .bridge import ToolDispatcher
from .config import CodeModeConfig
from .downstream.pool import ToolPool
from .errors import UnsupportedError
from .runners import LANGUAGE_ALIASES, build_runners, default_runner
from .runners.base import Runner, RunRequest, StubBundle
from .runners.local import SAFE_IMPORTS
from .stubs import RENDERERS, StubIndex, ToolSpec

logger = logging.getLogger(__name__)


class ErrorDetail(BaseModel):
    """Why a run failed."""

    type: str
    """Exception type, e.g. ``ZeroDivisionError``, ``ToolError``, ``TimeoutError``."""
    message: str
    line: int | None = None
    """Line in the submitted code, when known."""
    traceback: str | None = None


class FileEntry(BaseModel):
    path: str
    """Relative to the run's workspace."""
    size: int


class RunResult(BaseModel):
    """The outcome of one ``execute_code`` call (also its MCP output schema)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    success: bool
    output: str = ""
    """Printed output, capped; see ``truncated``."""
    error: ErrorDetail | None = None
    return_value: Any = Field(default=None, alias="returnValue")
    """The last expression's value or ``final_answer(x)``; JSON where possible, else its repr."""
    execution_time: int = Field(default=0, alias="executionTime")
    """Milliseconds, end to end on the server."""
    language: str = "python"
    runner: str = "local"
    cached: bool = False
    hash: str = ""
    tool_calls: int = Field(default=0, alias="toolCalls")
    truncated: bool = False
    files: list[FileEntry] = Field(default_factory=list)
    """Files the script left in its workspace (the workspace is deleted after the run)."""


def script_hash(language: str, runner: str, code: str, packages: list[str]) -> str:
    normalized = "\n".join(line.rstrip() for line in code.strip().splitlines())
    blob = "\0".join([language, runner, normalized, *sorted(packages)])
    return hashlib.sha256(blob.encode()).hexdigest()


class CodeMode:
    """Downstream servers, stubs and runners behind one ``execute`` call. Use as an async context manager."""

    def __init__(self, config: CodeModeConfig) -> None:
        self.config = config
        settings = config.settings
        self.pool = ToolPool(config.servers, config.env, default_timeout=settings.tool_timeout)
        self.runners: dict[str, Runner] = build_runners(settings)
        self._index: StubIndex | None = None
        self._bundles: dict[str, StubBundle] = {}
        self._built_for = -1

    @classmethod
    def from_config(cls, path: str | Path | None = None) -> CodeMode:
        """Load ``mcp_servers.json`` (``path``, else ``CODE_MODE_CONFIG``, else ./mcp_servers.json) and settings."""
        return cls(CodeModeConfig.load(path))

    async def __aenter__(self) -> CodeMode:
        started: list[Runner] = []
        try:
            for runner in self.runners.values():
                await runner.start()
                started.append(runner)
            await self.pool.__aenter__()
        except BaseException:
            for runner in reversed(started):
                await runner.aclose()
            raise
        self._refresh()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.pool.__aexit__(*exc_info)
        finally:
            # In reverse order: each runner's task group was entered after the previous one's.
            for runner in reversed(self.runners.values()):
                await runner.aclose()

    # ----- stubs ----------------------------------------------------------------------------

    @property
    def index(self) -> StubIndex:
        """Namespaces and functions of every downstream tool, at the pool's current version."""
        self._refresh()
        assert self._index is not None
        return self._index

    def _refresh(self) -> None:
        """Rebuild the index and every runner's stubs when the downstream tools changed."""
        if self._index is not None and self._built_for == self.pool.version:
            return
        self._built_for = self.pool.version
        servers = [(name, s.config.description) for name, s in self.pool.servers.items()]
        self._index = StubIndex.build(servers, self.pool.tools())
        self._bundles.clear()
        for runner in self.runners.values():
            runner.set_stubs(self.bundle(runner.stub_language))

    def bundle(self, stub_language: str) -> StubBundle:
        """The full stub module for one stub language at the current version."""
        index = self.index
        if stub_language not in self._bundles:
            source = RENDERERS[stub_language](index, None)
            namespaces = tuple(s.namespace for s in index.servers)
            self._bundles[stub_language] = StubBundle(source, self._built_for, namespaces)
        return self._bundles[stub_language]

    def stubs(self, language: str = "python", servers: list[str] | None = None) -> str:
        """The stubs (all servers, or the named ones) exactly as the sandbox defines them."""
        stub_language = "typescript" if language in ("typescript", "ts", "javascript", "js") else language
        if stub_language in ("py", "python3"):
            stub_language = "python"
        renderer = RENDERERS.get(stub_language)
        if renderer is None:
            raise UnsupportedError(f"stubs for {language!r} are not supported (supported: {', '.join(RENDERERS)})")
        index = self.index
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

    # ----- execution ------------------------------------------------------------------------

    def resolve_runner(self, language: str, runner: str | None) -> tuple[str, Runner]:
        """The canonical language and the runner for a request; ``UnsupportedError`` names what exists."""
        lang = LANGUAGE_ALIASES.get(language.strip().lower())
        if lang is None:
            supported = ", ".join(sorted(set(LANGUAGE_ALIASES.values())))
            raise UnsupportedError(f"language {language!r} is not supported yet (supported: {supported})")
        name = runner or default_runner(self.config.settings, lang)
        chosen = self.runners.get(name)
        if chosen is None or lang not in chosen.languages:
            available = [r.name for r in self.runners.values() if lang in r.languages]
            raise UnsupportedError(
                f"runner {name!r} is not supported yet for {lang} (available: {', '.join(available) or 'none'})"
            )
        return lang, chosen

    async def execute(
        self,
        code: str,
        language: str = "python",
        *,
        packages: list[str] | None = None,
        timeout_ms: int | None = None,
        allow_networking: bool = True,
        description: str | None = None,
        runner: str | None = None,
    ) -> RunResult:
        """Run ``code`` with every configured server's tools in scope.

        Raises ``CodeModeError`` subclasses for requests that cannot run at all (unknown language or
        runner, packages, a timeout out of range); a script that fails is a ``RunResult`` with
        ``success=False``.
        """
        settings = self.config.settings
        lang, chosen = self.resolve_runner(language, runner)
        if packages and not getattr(chosen, "installs_packages", False):
            raise UnsupportedError(
                f"installing packages is not supported yet by the {chosen.name} runner (asked for: "
                f"{', '.join(packages)}); the pyodide runner installs pure-Python packages"
            )
        timeout = settings.default_timeout_ms if timeout_ms is None else timeout_ms
        if not 1 <= timeout <= settings.max_timeout_ms:
            raise UnsupportedError(f"timeout must be between 1 and {settings.max_timeout_ms} ms, got {timeout}")
        bundle = self.bundle(chosen.stub_language)
        request = RunRequest(
            code=code,
            language=lang,
            timeout=timeout / 1000,
            max_output=settings.max_output_chars,
            stubs=bundle,
            allow_network=allow_networking,
            authorized_imports=SAFE_IMPORTS,
            packages=tuple(packages or ()),
        )
        dispatcher = ToolDispatcher(self.pool, self.index, settings.max_tool_calls)
        outcome = await chosen.run(request, dispatcher)
        return RunResult.model_validate(
            {
                "success": outcome.success,
                "output": outcome.output,
                "error": outcome.error.to_json() if outcome.error else None,
                "returnValue": outcome.return_value,
                "executionTime": round(outcome.duration * 1000),
                "language": lang,
                "runner": chosen.name,
                "cached": False,
                "hash": script_hash(lang, chosen.name, code, packages or []),
                "toolCalls": len(dispatcher.calls),
                "truncated": outcome.truncated,
                "files": [{"path": f.path, "size": f.size} for f in outcome.files],
            }
        )

    def status(self) -> dict[str, Any]:
        """Connected servers and runners, for discovery tools and the CLI."""
        return {
            "servers": [s.status() for s in self.pool.servers.values()],
            "runners": {
                name: {"isolation": r.isolation, "languages": list(r.languages)} for name, r in self.runners.items()
            },
        }
