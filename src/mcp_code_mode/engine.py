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
from .runners.base import Runner, RunRequest, StubBundle
from .runners.local import SAFE_IMPORTS, LocalRunner
from .stubs.index import StubIndex
from .stubs.python import render_module

logger = logging.getLogger(__name__)

LANGUAGE_ALIASES = {"python": "python", "py": "python", "python3": "python"}
RUNNERS_BY_LANGUAGE = {"python": ("local",)}


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
        self.runners: dict[str, Runner] = {
            "local": LocalRunner(pool_size=settings.pool_size, workspace_root=settings.workspace_dir),
        }
        self._index: StubIndex | None = None
        self._bundle: StubBundle | None = None
        self._built_for = -1

    @classmethod
    def from_config(cls, path: str | Path | None = None) -> CodeMode:
        """Load ``mcp_servers.json`` (``path``, else ``CODE_MODE_CONFIG``, else ./mcp_servers.json) and settings."""
        return cls(CodeModeConfig.load(path))

    async def __aenter__(self) -> CodeMode:
        for runner in self.runners.values():
            await runner.start()
        await self.pool.__aenter__()
        self._refresh_stubs()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.pool.__aexit__(*exc_info)
        finally:
            for runner in self.runners.values():
                await runner.aclose()

    # ----- stubs ----------------------------------------------------------------------------

    @property
    def index(self) -> StubIndex:
        self._refresh_stubs()
        assert self._index is not None
        return self._index

    def _refresh_stubs(self) -> StubBundle:
        if self._bundle is None or self._built_for != self.pool.version:
            self._built_for = self.pool.version
            servers = [(name, s.config.description) for name, s in self.pool.servers.items()]
            self._index = StubIndex.build(servers, self.pool.tools())
            source = render_module(self._index)
            self._bundle = StubBundle(source, self._built_for, tuple(s.namespace for s in self._index.servers))
            for runner in self.runners.values():
                set_stubs = getattr(runner, "set_stubs", None)
                if set_stubs is not None:
                    set_stubs(self._bundle)
        return self._bundle

    def python_stubs(self, servers: list[str] | None = None) -> str:
        """The Python stub module (all servers, or the named ones) exactly as the sandbox defines it."""
        index = self.index
        if servers is None:
            return render_module(index)
        selection = {}
        for name in servers:
            spec = index.server(name)
            if spec is None:
                raise UnsupportedError(f"unknown server {name!r}")
            selection[spec.name] = spec.tools
        return render_module(index, selection)

    # ----- execution ------------------------------------------------------------------------

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
        lang = LANGUAGE_ALIASES.get(language.strip().lower())
        if lang is None:
            raise UnsupportedError(
                f"language {language!r} is not supported yet (supported: {', '.join(sorted(RUNNERS_BY_LANGUAGE))})"
            )
        runner_name = runner or settings.python_runner
        if runner_name not in RUNNERS_BY_LANGUAGE[lang] or runner_name not in self.runners:
            raise UnsupportedError(
                f"runner {runner_name!r} is not supported yet for {lang} "
                f"(available: {', '.join(RUNNERS_BY_LANGUAGE[lang])})"
            )
        if packages:
            raise UnsupportedError(f"installing packages is not supported yet (asked for: {', '.join(packages)})")
        timeout = settings.default_timeout_ms if timeout_ms is None else timeout_ms
        if not 1 <= timeout <= settings.max_timeout_ms:
            raise UnsupportedError(f"timeout must be between 1 and {settings.max_timeout_ms} ms, got {timeout}")
        bundle = self._refresh_stubs()
        assert self._index is not None
        request = RunRequest(
            code=code,
            language=lang,
            timeout=timeout / 1000,
            max_output=settings.max_output_chars,
            stubs=bundle,
            allow_network=allow_networking,
            authorized_imports=SAFE_IMPORTS,
        )
        dispatcher = ToolDispatcher(self.pool, self._index, settings.max_tool_calls)
        outcome = await self.runners[runner_name].run(request, dispatcher)
        return RunResult.model_validate(
            {
                "success": outcome.success,
                "output": outcome.output,
                "error": outcome.error.to_json() if outcome.error else None,
                "returnValue": outcome.return_value,
                "executionTime": round(outcome.duration * 1000),
                "language": lang,
                "runner": runner_name,
                "cached": False,
                "hash": script_hash(lang, runner_name, code, packages or []),
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
