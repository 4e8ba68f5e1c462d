"""``CodeMode``: the façade used by the MCP server, the CLI and library users.

async with CodeMode.from_config("mcp_servers.json") as cm:
    result = await cm.execute("print(filesystem.list_directory(path='.'))")
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from .admission import Admission
from .bridge import ToolDispatcher
from .cache import (
    KeyContext,
    NewScript,
    ScriptCache,
    StoredScript,
    ToolUse,
    check_mode,
    code_key,
    derive_description,
    full_key,
    runner_identity,
    stubs_digest,
)
from .cache.embed import make_embedder
from .config import CodeModeConfig
from .discovery import ToolSearch, select_tools
from .downstream.pool import ToolPool
from .errors import CodeModeError, PackageError, UnsupportedError
from .packages import Environment, PythonEnvironments, Whitelist, validate_npm, validate_python
from .runners import LANGUAGE_ALIASES, build_runners, default_runner
from .runners.base import OutputCallback, Runner, RunOutcome, RunRequest, StubBundle
from .runners.local import SAFE_IMPORTS
from .sandbox import Sandbox
from .stubs import RENDERERS, StubIndex, ToolSpec
from .validate import check_python, code_size, oversize, validate_code

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
    """Milliseconds the run took (the script, its tool calls and its worker), not counting installs."""
    install_time: int = Field(default=0, alias="installTime")
    """Milliseconds spent installing (or waiting for) the run's packages; 0 when they were cached."""
    language: str = "python"
    runner: str = "local"
    cached: bool = False
    hash: str = ""
    tool_calls: int = Field(default=0, alias="toolCalls")
    truncated: bool = False
    files: list[FileEntry] = Field(default_factory=list)
    """Files the script left in its workspace (the workspace is deleted after the run)."""


@dataclass(frozen=True)
class RunProgress:
    """Where a run is: reported every ``progress_interval_ms`` while it goes on."""

    elapsed: float
    """Seconds since the run started; strictly increasing from one report to the next."""
    tool_calls: int
    """Tool calls finished so far."""
    queued: int | None = None
    """While the run waits for a slot: how many runs are ahead of it (``None`` once it runs)."""


ProgressCallback = Callable[[RunProgress], Awaitable[None]]


class CodeMode:
    """Downstream servers, stubs and runners behind one ``execute`` call. Use as an async context manager."""

    def __init__(self, config: CodeModeConfig) -> None:
        self.config = config
        settings = config.settings
        self.pool = ToolPool(config.servers, config.env, default_timeout=settings.tool_timeout)
        self.sandbox = Sandbox.detect(settings)
        self.admission = Admission.create(
            run_memory_mb=settings.limit_memory_mb,
            max_running=settings.max_concurrent_runs,
            max_queued=settings.max_queued_runs,
            per_client=settings.max_runs_per_client,
            memory_budget_mb=settings.memory_budget_mb,
            queue_timeout_ms=settings.queue_timeout_ms,
        )
        self.whitelist = Whitelist.load(settings.allowed_packages)
        self.environments = PythonEnvironments(settings.cache_root() / "envs", install_timeout=settings.install_timeout)
        self.runners: dict[str, Runner] = build_runners(settings, self.sandbox, self.whitelist)
        self._index: StubIndex | None = None
        self._bundles: dict[str, StubBundle] = {}
        self._built_for = -1
        self.embedder = make_embedder(settings.cache_embedder)
        self.scripts = ScriptCache(
            settings.cache_root(), ttl=settings.cache_ttl, embedder=self.embedder, current_schema=self._schema_hash
        )
        self.tool_search = ToolSearch(self.embedder)

    @classmethod
    def from_config(cls, path: str | Path | None = None) -> CodeMode:
        """Load ``mcp_servers.json`` (``path``, else ``CODE_MODE_CONFIG``, else ./mcp_servers.json) and settings."""
        return cls(CodeModeConfig.load(path))

    async def __aenter__(self) -> CodeMode:
        started: list[Runner] = []
        await anyio.to_thread.run_sync(self.scripts.open)
        load = getattr(self.embedder, "load", None)
        if load is not None:  # read the model's weights now, off the first run's path (~0.5 s)
            threading.Thread(target=load, name="embedder-load", daemon=True).start()
        try:
            for runner in self.runners.values():
                await runner.start()
                started.append(runner)
            await self.pool.__aenter__()
        except BaseException:
            for runner in reversed(started):  # each runner holds a task group: leave them in LIFO order
                await runner.aclose()
            self.scripts.close()
            raise
        self._refresh()
        await self._warm_up()
        described = self.sandbox.describe()
        logger.info(
            "isolation in force: %s%s",
            described["isolation"],
            f" ({described['reason']})" if described.get("reason") else f" ({described.get('user')})",
        )
        return self

    async def _warm_up(self) -> None:
        """Wait (at most ``warmup_timeout``) until every runner has a warm worker: the first run after
        start-up then pays no interpreter start (for Pyodide, a snapshot restore of about a second)."""
        timeout = self.config.settings.warmup_timeout
        if timeout <= 0:
            return
        started = time.monotonic()
        with anyio.move_on_after(timeout) as scope:
            async with anyio.create_task_group() as tg:
                for runner in self.runners.values():
                    tg.start_soon(runner.ready)
        if scope.cancelled_caught:
            logger.warning("start-up: not every runner had a warm worker after %.0f s; serving anyway", timeout)
        else:
            logger.info("start-up: warm workers ready in %.2f s", time.monotonic() - started)

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.pool.__aexit__(*exc_info)
        finally:
            # Last started, first closed: each runner's task group is nested in the previous one's.
            for runner in reversed(self.runners.values()):
                await runner.aclose()
            self.sandbox.close()
            self.scripts.close()
            self.tool_search.close()

    def _schema_hash(self, server: str, tool: str) -> str | None:
        info = self.pool.find(server, tool)
        return info.schema_hash if info else None

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
            functions = {s.namespace: tuple(t.func for t in s.tools) for s in index.servers}
            self._bundles[stub_language] = StubBundle(source, self._built_for, namespaces, functions)
        return self._bundles[stub_language]

    def stubs(self, language: str = "python", servers: list[str] | None = None, names: list[str] | None = None) -> str:
        """The stubs (all servers, the named servers, or the named tools) exactly as the sandbox defines them."""
        stub_language = "typescript" if language in ("typescript", "ts", "javascript", "js") else language
        if stub_language in ("py", "python3"):
            stub_language = "python"
        renderer = RENDERERS.get(stub_language)
        if renderer is None:
            raise UnsupportedError(f"stubs for {language!r} are not supported (supported: {', '.join(RENDERERS)})")
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
        on_output: OutputCallback | None = None,
        on_progress: ProgressCallback | None = None,
        cache: str = "auto",
        client: str = "local",
    ) -> RunResult:
        """Run ``code`` with every configured server's tools in scope.

        ``cache`` is ``auto``, ``reuse``, ``refresh`` or ``off`` (see ``mcp_code_mode.cache``).
        Raises ``CodeModeError`` subclasses for requests that cannot run at all (unknown language or
        runner, packages, a timeout out of range); a script that fails is a ``RunResult`` with
        ``success=False``.

        ``client`` names who asks (an MCP session): runs wait for a slot of ``admission`` first, within that
        client's share; ``ServerBusy`` when there is no room even to queue.

        ``on_output`` receives printed output as it is printed (the result still holds all of it);
        ``on_progress`` receives a ``RunProgress`` when the run starts and every
        ``progress_interval_ms`` until it ends. Cancelling the calling task stops the run: its worker
        process is killed before ``execute`` returns control.
        """
        started = time.perf_counter()
        settings = self.config.settings
        mode = check_mode(cache)
        lang, chosen = self.resolve_runner(language, runner)
        if (size := code_size(code)) > settings.max_code_bytes:
            raise UnsupportedError(
                f"the script is {size} bytes; this server takes scripts of at most {settings.max_code_bytes} bytes "
                "(CODE_MODE_MAX_CODE_BYTES)"
            )
        network = allow_networking and settings.allow_network
        self._check_isolation(chosen, network)
        timeout = settings.default_timeout_ms if timeout_ms is None else timeout_ms
        if not 1 <= timeout <= settings.max_timeout_ms:
            raise UnsupportedError(f"timeout must be between 1 and {settings.max_timeout_ms} ms, got {timeout}")
        requirements = self._validate_packages(lang, packages or [])
        # The key holds what the run depends on: the policy in force, the runner's identity, the
        # stubs the script will see (this bundle is the one the run gets), besides code and packages.
        bundle = self.bundle(chosen.stub_language)
        context = KeyContext(
            language=lang,
            runner=chosen.name,
            runner_identity=runner_identity(chosen),
            network=network,
            packages=tuple(requirements),
            stubs=stubs_digest(bundle.source),
        )
        key = code_key(code, context)
        # In a worker thread: a hit is counted, and another process may hold the write lock a moment.
        # A mode that reads nothing skips the thread hop (a few hundred µs on a busy host).
        hit = await anyio.to_thread.run_sync(self.scripts.lookup, mode, key) if self.scripts.reads(mode) else None
        if hit is not None:  # a replay reports once, all at once: its output and where it is
            if on_output is not None and hit.output:
                await on_output(hit.output)
            if on_progress is not None:
                await on_progress(RunProgress(time.perf_counter() - started, 0))
            return replayed(hit, started)
        common = {"language": lang, "runner": chosen.name}
        environment: Environment | None = None
        if requirements and not getattr(chosen, "installs_packages", False):
            try:
                environment = await self.environments.ensure(chosen.name, requirements)
            except PackageError as exc:
                error = {"type": "PackageInstallError", "message": str(exc)}
                return RunResult.model_validate({"success": False, "error": error, "hash": key, **common})
        request = RunRequest(
            code=code,
            language=lang,
            timeout=timeout / 1000,
            max_output=settings.max_output_chars,
            stubs=bundle,
            allow_network=network,
            authorized_imports=SAFE_IMPORTS + self.whitelist.imports_for(requirements),
            environment=str(environment.path) if environment else None,
            preload=self.whitelist.imports_for(requirements),
            packages=tuple(requirements),
            on_output=on_output,
        )
        dispatcher = ToolDispatcher(self.pool, self.index, settings.max_tool_calls)

        async def queued(ahead: int) -> None:
            if on_progress is not None:
                await on_progress(RunProgress(time.perf_counter() - started, 0, queued=ahead))

        async with self.admission.slot(client, settings.limit_memory_mb, queued):
            if on_progress is None:
                outcome = await chosen.run(request, dispatcher)
            else:
                outcome = await self._run_reporting(chosen, request, dispatcher, on_progress, started)
        tools = sorted({ToolUse(c.server, c.tool, c.schema_hash or "") for c in dispatcher.calls})
        run_hash = full_key(key, tools)
        new: NewScript | None = None
        if outcome.success and mode != "off":
            new = NewScript(
                hash=run_hash,
                code_key=key,
                language=lang,
                runner=chosen.name,
                code=code,
                packages=requirements,
                description=(description or "").strip() or derive_description(code, [t.name for t in tools]),
                description_given=bool((description or "").strip()),
                output=outcome.output,
                return_value=outcome.return_value,
                truncated=outcome.truncated,
                files=[{"path": f.path, "size": f.size} for f in outcome.files],
                tools=tools,
                # What the host saw, never what a runner is assumed unable to do: every call that
                # reached a downstream server, the files left in the workspace, the network granted.
                tool_calls=len(dispatcher.calls),
                network=network,
                execution_ms=outcome.duration * 1000,
            )
        if self.scripts.writes(mode):
            await anyio.to_thread.run_sync(self.scripts.after_run, mode, new)
        return RunResult.model_validate(
            {
                **common,
                "installTime": round(environment.seconds * 1000) if environment and environment.installed else 0,
                "success": outcome.success,
                "output": outcome.output,
                "error": outcome.error.to_json() if outcome.error else None,
                "returnValue": outcome.return_value,
                "executionTime": round(outcome.duration * 1000),
                "cached": False,
                "hash": run_hash,
                "toolCalls": len(dispatcher.calls),
                "truncated": outcome.truncated,
                "files": [{"path": f.path, "size": f.size} for f in outcome.files],
            }
        )

    def _validate_packages(self, language: str, packages: list[str]) -> list[str]:
        """Validated, normalized requirements for a language; ``PackageError`` names a bad entry."""
        if not packages:
            return []
        if language == "python":
            return validate_python(packages, self.whitelist)
        return validate_npm(packages, self.whitelist)

    async def validate(
        self, language: str, code: str, *, runner: str | None = None, packages: list[str] | None = None
    ) -> dict[str, Any]:
        """``validate_code``: every finding at once; nothing runs and no tool is called.

        Python: syntax, imports the runner refuses (given ``packages``), tool names and literal
        arguments against the live schemas. JavaScript/TypeScript: ``deno check`` against the
        generated declarations (type errors, unknown tools, wrong argument objects).
        """
        lang, chosen = self.resolve_runner(language, runner)
        max_bytes = self.config.settings.max_code_bytes
        refused = oversize(lang, code, max_bytes)
        if refused is not None:
            return refused
        requirements = self._validate_packages(lang, packages or [])
        if lang == "python":
            allowed = SAFE_IMPORTS + self.whitelist.imports_for(requirements) if chosen.name == "local" else None
            return await check_python(code, self.index, allowed, max_bytes=max_bytes)  # off the event loop
        check = getattr(chosen, "check", None)
        if check is None:
            return validate_code(lang, code, self.index, None)  # answers "not supported"
        found = await check(code, self.bundle("typescript").source, requirements, javascript=lang == "javascript")
        findings = [{"line": f.line, "column": f.column, "kind": "type", "message": f.message} for f in found]
        return {"language": lang, "supported": True, "valid": not findings, "findings": findings}

    def cache_stats(self) -> dict[str, Any]:
        """``get_cache_stats``: the script cache, and the package environments with their size."""
        return {**self.scripts.stats(), "environments": self.environments.stats()}

    def allowed_packages(self, language: str = "all") -> dict[str, Any]:
        """The whitelist for ``list_allowed_packages``."""
        return {"source": self.whitelist.source, **self.whitelist.listing(language)}

    def _check_isolation(self, runner: Runner, network: bool) -> None:
        if runner.isolation != "process":
            return
        reason = self.sandbox.reason or "namespaces are not available"
        if self.config.settings.require_isolation:
            raise UnsupportedError(f"CODE_MODE_REQUIRE_ISOLATION is set and this host has no namespaces ({reason})")
        if not network and runner.name != "local":
            raise UnsupportedError(
                f"networking cannot be switched off for the {runner.name} runner on this host ({reason}); "
                "allow networking or use the local runner"
            )

    async def _run_reporting(
        self,
        runner: Runner,
        request: RunRequest,
        dispatcher: ToolDispatcher,
        on_progress: ProgressCallback,
        started: float,
    ) -> RunOutcome:
        """``runner.run`` with a progress report at the start and every ``progress_interval_ms``; elapsed time
        counts from ``started`` (``perf_counter``, when the request came: a queued run reported before)."""
        interval = self.config.settings.progress_interval_ms / 1000

        async def report() -> None:
            while True:
                await on_progress(RunProgress(time.perf_counter() - started, len(dispatcher.calls)))
                await anyio.sleep(interval)

        outcome: RunOutcome | None = None
        refused: CodeModeError | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(report)
            try:
                outcome = await runner.run(request, dispatcher)
            except CodeModeError as exc:  # raised again below, not wrapped in the task group's ExceptionGroup
                refused = exc
            finally:
                tg.cancel_scope.cancel()
        if refused is not None:
            raise refused
        assert outcome is not None
        return outcome

    def status(self) -> dict[str, Any]:
        """Connected servers and runners, for discovery tools and the CLI."""
        return {
            "servers": [s.status() for s in self.pool.servers.values()],
            "runners": {
                name: {"isolation": r.isolation, "languages": list(r.languages)} for name, r in self.runners.items()
            },
        }

    def execution_limits(self) -> dict[str, Any]:
        """The limits and the isolation in force on this host right now (``get_execution_limits``)."""
        settings = self.config.settings
        return {
            "timeoutMs": {"default": settings.default_timeout_ms, "max": settings.max_timeout_ms},
            "maxOutputChars": settings.max_output_chars,
            "maxToolCallsPerRun": settings.max_tool_calls,
            "admission": self.admission.load(),
            "network": {
                "serverPolicy": "allowed" if settings.allow_network else "never",
                "defaultForRuns": "allowed" if settings.allow_network else "off",
                "offIsEnforced": self.sandbox.network_enforced(),
            },
            "isolation": self.sandbox.describe(),
            "requireIsolation": settings.require_isolation,
            "runners": {
                name: {"languages": list(r.languages), "isolation": r.isolation} for name, r in self.runners.items()
            },
            "defaultRunner": {lang: default_runner(settings, lang) for lang in sorted(set(LANGUAGE_ALIASES.values()))},
            "servers": [s.status() for s in self.pool.servers.values()],
        }

    def supported_languages(self) -> list[dict[str, Any]]:
        """Each language with its runners, their isolation and package manager (``list_supported_languages``)."""
        settings = self.config.settings
        out: list[dict[str, Any]] = []
        for lang in sorted(set(LANGUAGE_ALIASES.values())):
            aliases = sorted(a for a, canonical in LANGUAGE_ALIASES.items() if canonical == lang)
            runners = [
                {"name": r.name, "isolation": r.isolation, "default": r.name == default_runner(settings, lang)}
                for r in self.runners.values()
                if lang in r.languages
            ]
            manager = {
                "python": "uv (whitelisted PyPI wheels)",
                "javascript": "Deno's npm cache (whitelisted npm packages)",
                "typescript": "Deno's npm cache (whitelisted npm packages)",
            }.get(lang)
            out.append({"language": lang, "aliases": aliases, "runners": runners, "packageManager": manager})
        return out


def replayed(script: StoredScript, started: float) -> RunResult:
    """The result of a stored run, answered without running it."""
    return RunResult.model_validate(
        {
            "success": True,
            "output": script.output,
            "returnValue": script.return_value,
            "executionTime": round((time.perf_counter() - started) * 1000),
            "language": script.language,
            "runner": script.runner,
            "cached": True,
            "hash": script.hash,
            "toolCalls": 0,
            "truncated": script.truncated,
            "files": script.files,
        }
    )
