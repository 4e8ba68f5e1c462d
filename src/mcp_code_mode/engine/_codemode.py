"""``CodeMode``: the façade used by the MCP server, the CLI and library users.

async with CodeMode.from_config("mcp_servers.json") as cm:
    result = await cm.execute("print(filesystem.list_directory(path='.'))")

``execute`` is a pipeline of small stages, each its own module: the request (``_request``), the cache
(``_caching``: key and lookup, later the store), the environment (``_environment``), the run (admission,
progress and the runner), the result. The façade holds the parts; callers use its methods.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import sqlite3
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from ..admission import Admission
from ..artifacts import ArtifactLimits, ArtifactStore, RunFiles, Staged
from ..bridge import CallEntry, ErrorDetail, FileEntry, PlanResult, Progress, RunClock, RunResult, ToolDispatcher
from ..bridge.dispatcher import OFF_LOOP_CHARS, CallObserver, ToolCallRecord
from ..bridge.outcome import Savings
from ..cache import ScriptCache, ToolUse
from ..cache.audit import AuditLog, AuditWriter
from ..cache.embed import make_embedder
from ..cache.sessions import SessionPlaces
from ..config import CodeModeConfig, Settings
from ..database import Database, open_database
from ..discovery import ToolSearch
from ..downstream.pool import ToolPool
from ..errors import ConfigError, UnsupportedError
from ..governance import PolicyBook
from ..governance.approvals import Approver, Elicit
from ..languages import canonical
from ..observability import RunMetrics
from ..observability.tracing import Tracing, from_environment
from ..packages import PythonEnvironments, Whitelist
from ..privacy.core import RunPrivacy
from ..runners import CheckRequest, OutputCallback, Runner, RunnerInfo, RunRequest, SessionRunner, StubBundle
from ..runners._early import EarlyWorker, claim
from ..runners.registry import build_runners, default_runners, names
from ..sandbox import Sandbox, detect_sandbox
from ..skills import SkillBook, SkillStore
from ..stubs import StubIndex
from ..tenants import current_tenant
from ..validate import oversize
from ._caching import CacheStage, Keyed, replayed
from ._environment import prepare
from ._gate import RunGate, RunMode
from ._observed import counted, register_gauges
from ._privacy import build_privacy, persist_vault
from ._progress import ProgressCallback, RunProgress, reporting
from ._request import NetworkRequest, RunPlan, plan_run, resolve, validate_packages
from ._runners import RunnerHosts, eager_names
from ._sessions import Session, SessionBook
from ._stubs import STUB_LANGUAGES, StubBook
from ._tenancy import TenantRules

logger = logging.getLogger(__name__)

AUDIT_PRUNE_EVERY = 3600.0
"""Seconds between removals of audit entries older than ``CODE_MODE_AUDIT_DAYS`` (and at start-up) and of
expired tokens from the vault."""
MAX_CALLS_SHOWN = 200
"""Tool calls a result lists with their decisions (``toolCalls`` counts them all)."""


@dataclass(frozen=True)
class RunnerFacts:
    """What the server layer shows about one runner (``list_supported_languages``, ``get_execution_limits``)."""

    info: RunnerInfo
    isolation: str
    default_for: tuple[str, ...]
    state: dict[str, Any]
    settings: dict[str, Any]


class CodeMode:
    """Downstream servers, stubs and runners behind one ``execute`` call. Use as an async context manager."""

    def __init__(
        self, config: CodeModeConfig, *, sandbox: Sandbox | None = None, early: EarlyWorker | None = None
    ) -> None:
        """``sandbox``: the one ``detect_sandbox(config.settings)`` chose, when the caller has probed already.
        ``early``: the default Python runner's first worker, started with ``sandbox`` before the engine existed
        (``serve``: ``runners._early``); its pool adopts it, or the engine kills it when it starts."""
        self.config = config
        settings = config.settings
        self.pool = ToolPool(
            config.servers,
            config.env,
            default_timeout=settings.tool_timeout,
            background=True,
            on_change=self._tools_changed_now,
        )
        """The downstream servers; they connect in the background once the engine is entered (``settled``)."""
        self.sandbox = sandbox if sandbox is not None else detect_sandbox(settings)
        self.egress = settings.egress_policy()
        """The server's egress policy; a run's ``allowNetworking`` list narrows it."""
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
        self.defaults = default_runners(settings)  # ConfigError for an unknown CODE_MODE_PYTHON_RUNNER
        self.runners: dict[str, Runner]
        self.runners, self.unavailable_runners = build_runners(settings, self.sandbox, self.whitelist)
        self.hosts = RunnerHosts(
            self.runners,
            eager=_eager(settings.eager_runners, self.runners, self.defaults, self.unavailable_runners),
            warmup_timeout=settings.warmup_timeout,
        )
        """Each runner started on first use, or with the engine when eager (``CODE_MODE_EAGER_RUNNERS``)."""
        self._unclaimed = early if early is not None and not claim(early, self.runners, self.hosts.eager) else None
        self._stack: contextlib.AsyncExitStack | None = None
        self._changed: anyio.Event | None = None
        """Set at the next change of the downstream tools (``tools_changed``)."""
        self._stubs = StubBook(self.pool)
        self._stubs_for = -1
        self.embedder = make_embedder(settings.cache_embedder)
        self.database: Database | None = None
        """The stores' shared PostgreSQL (``CODE_MODE_DATABASE_URL``), opened on entry; None: each store opens
        the SQLite file with a connection of its own."""
        self.scripts = ScriptCache(
            settings.cache_root(), ttl=settings.cache_ttl, embedder=self.embedder, current_schema=self._schema_hash
        )
        self._cache = CacheStage(self.scripts, network_observed=self.sandbox.network_enforced())
        self.rules = TenantRules(config)
        """Each tenant's tool policy (the servers file's ``policy`` entries, ``CODE_MODE_POLICY``, and a tenant's
        policy file) and per-minute rates of tools across runs."""
        self.audit: AuditLog | None = None
        """The audit log and the plans, in the cache database (None when it cannot be opened)."""
        self._audit_writer: AuditWriter | None = None
        self.skills: SkillBook | None = None
        """The saved skills, in the cache database (None when it cannot be opened)."""
        self._pruned_at = time.monotonic()
        self.tool_search = ToolSearch(self.embedder)
        self.privacy = build_privacy(config)
        """Secrets and personal data on the way to the model, tokens on the way to the tools (``privacy``)."""
        self.sessions = SessionBook(
            idle_s=settings.session_idle_s,
            max_total=settings.max_sessions,
            max_per_client=settings.max_sessions_per_client,
            replica=settings.replica_id,
        )
        """Open sessions (``execute(session=...)``), their owners and caps."""
        self.artifact_limits = ArtifactLimits.from_settings(settings)
        self.artifacts: ArtifactStore | None = None
        """Files runs left, kept for ``CODE_MODE_ARTIFACT_TTL_S`` (None when they cannot be kept here)."""
        self.tracing: Tracing = from_environment(os.environ, content=settings.trace_content)
        """Trace spans of runs, calls and installs: on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (a library
        user may put a ``Tracing`` with a provider of their own here)."""
        self.metrics = RunMetrics()
        """Runs, tool calls, errors and savings since start, and gauges read at scrape time (``GET /metrics``)."""
        register_gauges(self)

    @classmethod
    def from_config(cls, path: str | Path | None = None) -> CodeMode:
        """Load ``mcp_servers.json`` (``path``, else ``CODE_MODE_CONFIG``, else ./mcp_servers.json) and settings."""
        return cls(CodeModeConfig.load(path))

    @property
    def settings(self) -> Settings:
        return self.config.settings

    async def __aenter__(self) -> CodeMode:
        """Start the eager runners, open the cache and the audit log, and start the downstream servers'
        connections. It returns without waiting for the runners or the servers (``ready`` waits)."""
        if self._unclaimed is not None:
            unclaimed, self._unclaimed = self._unclaimed, None
            await unclaimed.discard()
        stack = contextlib.AsyncExitStack()
        try:
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.push_async_callback(self.hosts.aclose)  # left after the servers: last started, first closed
            # The eager runners' workers first: they start while the stores open, and before the servers' processes
            # (a client's first run, sent as soon as it is initialized, waits for the default runner's).
            self.hosts.open(tg)
            await self._open_stores()
            await stack.enter_async_context(self.pool)
            sweeping = anyio.CancelScope()

            async def sweep() -> None:
                with sweeping:
                    await self.sessions.sweep()

            tg.start_soon(sweep)
            stack.push_async_callback(self.sessions.aclose)  # before the runners close: sessions' workers first
            stack.callback(sweeping.cancel)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await stack.aclose()
            self._close_stores()
            raise
        self._stack = stack
        described = self.sandbox.describe()
        logger.info(
            "isolation in force: %s%s",
            described["isolation"],
            f" ({described['reason']})" if described.get("reason") else f" ({described.get('user')})",
        )
        return self

    async def ready(self, runners: Iterable[str] | None = None) -> None:
        """Wait until every downstream server has started (or failed to), each within its start-up timeout, and
        each runner (all, or the named ones; started if need be) has a warm worker, within ``warmup_timeout``:
        what a benchmark or a test that times warm runs waits for. Serving never needs it."""
        await self.pool.settled()
        self._refresh()
        await self.hosts.ready(runners)

    def _tools_changed_now(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def tools_changed(self) -> None:
        """Return at the next change of the downstream tools (a server's tools arrived or changed)."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    async def settled(self, code: str | None = None) -> None:
        """Wait for the downstream servers still starting (each within its start-up timeout): all of them, or the
        ones whose name or namespace ``code`` names."""
        await self.pool.settled(self._still_starting(code))

    def _still_starting(self, code: str | None) -> list[str]:
        starting = self.pool.starting()
        if starting and code is not None:
            names = {spec.name: spec.namespace for spec in self._stubs.index.servers}
            via = self.skills.servers_called(code) if self.skills is not None else set[str]()  # skills it calls
            starting = [n for n in starting if _names_word(code, n) or _names_word(code, names.get(n, n)) or n in via]
        return starting

    async def _starting(self, code: str, started: float, on_progress: ProgressCallback | None) -> None:
        """Wait for the servers ``code`` names that are still starting; a client that asked for progress is told
        (``starting: waiting for filesystem``)."""
        servers = self._still_starting(code)
        if on_progress is not None and servers:
            await on_progress(RunProgress(time.perf_counter() - started, 0, waiting=tuple(servers)))
        await self.pool.settled(servers)

    async def _runner(self, name: str, started: float, on_progress: ProgressCallback | None) -> Runner:
        """The runner, started on its first run (a client that asked for progress is told it waits for it)."""
        if on_progress is not None and not self.hosts.started(name):
            await on_progress(RunProgress(time.perf_counter() - started, 0, waiting=(f"the {name} runner",)))
        return await self.hosts.get(name)

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            if self._stack is not None:
                stack, self._stack = self._stack, None
                await stack.aclose()
        finally:
            self.sandbox.close()
            self._close_stores()
            self.tracing.shutdown()

    async def _open_stores(self) -> None:
        if self.settings.database_url is not None:  # unreachable: StoreError naming the host, no SQLite fallback
            self.database = await anyio.to_thread.run_sync(open_database, self.settings.database_url.get_secret_value())
            self.scripts.use(self.database)
        await anyio.to_thread.run_sync(self.scripts.open)
        await anyio.to_thread.run_sync(self._open_audit)
        await anyio.to_thread.run_sync(self._open_skills)
        await anyio.to_thread.run_sync(self._open_artifacts)
        await anyio.to_thread.run_sync(self._open_session_places)
        if self.settings.pii_vault == "database":
            await anyio.to_thread.run_sync(persist_vault, self.privacy, self._stores_at, self.settings)

    def _close_stores(self) -> None:
        self.scripts.close()
        if self.artifacts is not None:
            self.artifacts.close()
        if self._audit_writer is not None:
            self._audit_writer.close()
        if self.audit is not None:
            self.audit.close()
        self.tool_search.close()
        self.privacy.vault.close()
        if self.skills is not None:
            self.skills.store.close()
        if self.sessions.places is not None:
            self.sessions.places.close()
            self.sessions.places = None
        if self.database is not None:
            self.database.close()

    @property
    def _stores_at(self) -> Path | Database:
        """Where the stores open: the shared PostgreSQL, else the SQLite file (each store its own connection)."""
        return self.database if self.database is not None else self.scripts.path

    def _open_audit(self) -> None:
        try:
            self.audit = AuditLog(self._stores_at)
            self.audit.prune_expired(self.settings.audit_days)
            self._audit_writer = AuditWriter(self.audit)
        except (OSError, sqlite3.Error) as exc:
            logger.warning(
                "the audit log is off (and plans cannot be kept): %s cannot be used: %s", self.scripts.path, exc
            )
            self.audit = None

    def _open_skills(self) -> None:
        try:
            store = SkillStore(self._stores_at)
        except (OSError, sqlite3.Error) as exc:
            logger.warning("skills are off: %s cannot be used: %s", self.scripts.path, exc)
            return
        self.skills = SkillBook(store, self._live_schema_hash, refuse_stale=self.settings.stale_skills == "refuse")

    def _live_schema_hash(self, server: str, tool: str) -> str | None:
        """A tool's schema hash now; None when its server is up without it (or is no longer configured); ""
        when that cannot be told (its server is starting, failed or disabled): a skill is not stale for that."""
        info = self.pool.find(server, tool)
        if info is not None:
            return info.schema_hash
        entry = self.pool.servers.get(server)
        return None if entry is None or entry.state == "ready" else ""

    def _keep_files(
        self, client: str, result: RunResult, pairs: list[tuple[FileEntry, Staged | None]], tenant: str
    ) -> None:
        """Keep a run's staged files as its artifacts (links in its entries), and inline the small images."""
        assert self.artifacts is not None
        self.artifacts.keep(client, result.hash, pairs, tenant=tenant)
        result.images += self.artifacts.inline(client, result.hash, [e for e, _ in pairs], result.images, tenant=tenant)

    def _open_artifacts(self) -> None:
        if self.artifact_limits.max_file <= 0 or self.artifact_limits.max_files <= 0:
            return
        try:
            self.artifacts = ArtifactStore(
                self.settings.cache_root() / "artifacts", self._stores_at, self.artifact_limits
            )
        except (OSError, sqlite3.Error) as exc:
            logger.warning("artifacts are off: %s cannot be used: %s", self.scripts.path, exc)
            self.artifacts = None

    def _open_session_places(self) -> None:
        try:
            self.sessions.places = SessionPlaces(self._stores_at)
        except (OSError, sqlite3.Error) as exc:
            logger.warning("sessions' metadata is not recorded: %s cannot be used: %s", self.scripts.path, exc)

    def _schema_hash(self, server: str, tool: str) -> str | None:
        info = self.pool.find(server, tool)
        return info.schema_hash if info else None

    # ----- the tenant a request acts for (``tenants.current_tenant``) ------------------------------

    @property
    def policy(self) -> PolicyBook:
        """The tool policy of the tenant acting now (``_tenancy.TenantRules``)."""
        return self.rules.policy()

    def _allowed(self) -> frozenset[str] | None:
        """The servers the tenant acting now may see and call (None: every server)."""
        return current_tenant().servers

    # ----- stubs ----------------------------------------------------------------------------

    @property
    def index(self) -> StubIndex:
        """Namespaces and functions of every downstream tool at the pool's current version, as the tenant acting
        now sees them (only its servers, when its entry lists them)."""
        self._refresh()
        return self._stubs.view(self._allowed(), current_tenant().name)

    def _refresh(self) -> None:
        """Give every runner the new stubs when the downstream tools changed."""
        if self._stubs_for == self.pool.version:
            return
        self._stubs_for = self.pool.version  # the stub book rebuilds its index and bundles itself
        for runner in self.runners.values():
            runner.set_stubs(self._stubs.bundle(runner.stub_language))

    def bundle(self, stub_language: str) -> StubBundle:
        """The full stub module for one stub language at the current version, with the skills its runs may call."""
        self._refresh()
        bundle = self._stubs.bundle(stub_language, self._allowed(), current_tenant().name)
        return bundle if self.skills is None else self.skills.extend(bundle, stub_language)

    def stubs(self, language: str = "python", servers: list[str] | None = None, names: list[str] | None = None) -> str:
        """The stubs (all servers, the named servers, or the named tools) exactly as the sandbox defines them."""
        self._refresh()
        asked = [n.strip()[len("skills.") :] for n in names or [] if n.strip().startswith("skills.")]
        tools = [n for n in names or [] if not n.strip().startswith("skills.")]
        allowed, tenant = self._allowed(), current_tenant().name
        rendered = self._stubs.render(language, servers, tools, allowed, tenant) if tools or not asked else ""
        family = STUB_LANGUAGES.get(language.strip().lower(), "python")
        if asked:  # skills.name: that skill's stub
            if self.skills is None:
                raise UnsupportedError("skills cannot be kept here: the cache database cannot be used")
            return rendered + self.skills.declarations(family, asked)
        if self.skills is None or servers is not None or names:
            return rendered
        return rendered + self.skills.declarations(family)  # everything: the skills too

    def policy_of(self, server: str, tool: str) -> str:
        """What the policy says of a tool before seeing its arguments: ``allow``, ``ask``, ``deny``, ``conditional``."""
        info = self.pool.find(server, tool)
        return self.policy.static(server, tool, info.annotations if info else None)

    def policy_notes(self, language: str, servers: list[str] | None = None, names: list[str] | None = None) -> str:
        """A comment for ``get_tool_stubs`` naming the tools among these that ask for approval or are denied."""
        from ..discovery import select_tools

        index = self.index
        if names and all(n.strip().startswith("skills.") for n in names):
            return ""  # skills, whose tools' policy applies when they call them
        if names:
            names = [n for n in names if not n.strip().startswith("skills.")]
            chosen = [t for tools in select_tools(index, names).values() for t in tools]
        else:
            chosen = [t for srv in index.servers if not servers or srv.name in servers for t in srv.tools]
        words = {"ask": "asks for approval", "deny": "is denied", "conditional": "asks or is denied, by its arguments"}
        notes = [f"{t.qualified} {words[d]}" for t in chosen if (d := self.policy_of(t.server, t.name)) in words]
        if not notes:
            return ""
        mark = "#" if language == "python" else "//"
        return "\n".join(f"{mark} policy: {note}" for note in notes) + "\n"

    def policy_findings(self, code: str) -> list[dict[str, Any]]:
        """``validate_code`` findings for calls to tools the policy denies (found by name, as a script spells them)."""
        index = self.index
        findings: list[dict[str, Any]] = []
        for number, line in enumerate(code.splitlines(), 1):
            named = [(m.group(1), m.group(2)) for m in _STUB_CALL.finditer(line)]
            named += [(m.group(2), m.group(3)) for m in _NAMED_CALL.finditer(line)]
            for server, tool in named:
                spec = index.tool(server, tool)
                if spec is None or self.policy_of(spec.server, spec.name) != "deny":
                    continue
                verdict = self.policy.decide(spec.server, spec.name, spec.info.annotations, {})
                findings.append(
                    {
                        "line": number,
                        "column": 1,
                        "kind": "policy",
                        "message": f"denied: {spec.server}.{verdict.reason}",
                    }
                )
        return findings

    # ----- execution ------------------------------------------------------------------------

    def resolve_runner(self, language: str, runner: str | None) -> tuple[str, Runner]:
        """The canonical language and the runner for a request; ``UnsupportedError`` names what exists."""
        return resolve(self.runners, self.defaults, language, runner, self.unavailable_runners)

    def runner_for(self, language: str, runner: str | None) -> str:
        """The runner a request means (its own, else its language's default), for a refusal's report."""
        if runner:
            return runner
        return self.defaults.get(canonical(language) or "", "")

    @counted
    async def execute(
        self,
        code: str,
        language: str = "python",
        *,
        packages: list[str] | None = None,
        timeout_ms: int | None = None,
        allow_networking: NetworkRequest = None,
        description: str | None = None,
        runner: str | None = None,
        on_output: OutputCallback | None = None,
        on_progress: ProgressCallback | None = None,
        cache: str = "auto",
        client: str = "library",
        mode: RunMode = "run",
        approve_plan: str | None = None,
        elicit: Elicit | None = None,
        session: str | None = None,
    ) -> RunResult:
        """Run ``code`` with every configured server's tools in scope.

        ``session``: ``"new"`` runs in a new session (the result's ``session_id``), an id runs in that session of
        ``client`` (its runner and language; its globals, imports and workspace as the last run left them). A
        session's runs are never replayed nor stored for replay (their result depends on state).

        ``cache`` is ``auto``, ``reuse``, ``refresh`` or ``off`` (see ``mcp_code_mode.cache``).
        ``allow_networking``: True, False, a list of hosts the run may reach (within the server's
        ``CODE_MODE_NETWORK_*`` policy), or None for the server's default.
        Raises ``CodeModeError`` subclasses for requests that cannot run at all (unknown language or
        runner, packages, a timeout out of range); a script that fails is a ``RunResult`` with
        ``success=False``. ``timeout_ms`` None means ``CODE_MODE_DEFAULT_TIMEOUT_MS``.

        ``client`` names who asks (an MCP session): runs wait for a slot of ``admission`` first, within that
        client's share; ``ServerBusy`` when there is no room even to queue.

        Each tool call passes the servers' policy (``governance``): ``mode="plan"`` records the calls that
        need approval instead of making them (the result's ``plan``); ``approve_plan`` runs the same code with
        that plan's calls approved; ``elicit`` asks the person about any other gated call (None: a client that
        cannot be asked, whose gated calls are refused saying how to plan them).

        ``on_output`` receives printed output as it is printed (the result still holds all of it);
        ``on_progress`` receives a ``RunProgress`` when the run starts and every
        ``progress_interval_ms`` until it ends, and each report of the script's ``report_progress`` the
        bridge passes on (``done`` set; its message masked). Cancelling the calling task stops the run: its worker
        process is killed before ``execute`` returns control.
        """
        started = time.perf_counter()
        settings = self.settings
        held: Session | None = None
        if session is not None and session != "new":
            held = self.sessions.get(client, session)  # "unknown session" for anyone else's
            runner = runner or held.runner
            packages = held.packages if packages is None else packages  # what the session has, unless named
            allow_networking = held.network if allow_networking is None else allow_networking
        plan = plan_run(
            code=code,
            language=language,
            runner=runner,
            packages=packages,
            timeout_ms=timeout_ms,
            allow_networking=allow_networking,
            cache=cache,
            runners=self.runners,
            defaults=self.defaults,
            settings=settings,
            sandbox=self.sandbox,
            whitelist=self.whitelist,
            unavailable=self.unavailable_runners,
            egress=self.egress,
        )
        chosen = plan.runner
        if not chosen.info.runs_skills and _SKILL_CALL.search(code):
            raise UnsupportedError(
                f"the {chosen.name} runner cannot call skills (skills.name(...)): choose another Python runner"
            )
        if session is not None:
            self._check_session(held, chosen, client)
            plan = dataclasses.replace(plan, mode="off")  # never replayed, never stored for replay
        await self._starting(code, started, on_progress)  # the servers it names that are still starting
        bundle = self.bundle(chosen.stub_language)  # the one the run gets, and the one its key names
        keyed = self._cache.key(plan, bundle)
        approved = await self._approved_calls(approve_plan, mode, keyed.key, client)
        privacy = self.privacy.run(client, tenant=current_tenant().name)
        # A plan or its approval is never a replay; nor is code with this client's tokens (what they stand
        # for is this client's: another's identical code means other values).
        if mode == "plan" or approve_plan is not None or privacy.known_tokens(code):
            keyed = Keyed(dataclasses.replace(plan, mode="off"), keyed.key)
        stored = await self._cache.lookup(keyed, started, lambda s: privacy.readable(s.pii_tokens))
        if stored is not None:  # a replay reports once, all at once: its output and where it is
            hit = self._for_client(privacy, stored.pii_tokens, replayed(stored, started))
            if on_output is not None and hit.output:
                await on_output(hit.output)
            if on_progress is not None:
                await on_progress(RunProgress(time.perf_counter() - started, 0))
            return hit
        chosen = await self._runner(chosen.name, started, on_progress)  # started on its first run (or RunnerError)
        if plan.requirements:
            with self.tracing.span("install", {"codemode.packages": len(plan.requirements)}) as span:
                prepared = await prepare(plan, self.environments)
                span.set_attributes({"codemode.install_ms": prepared.install_ms, "codemode.ok": prepared.error is None})
        else:
            prepared = await prepare(plan, self.environments)
        if prepared.error is not None:
            return RunResult(
                success=False,
                error=ErrorDetail("PackageInstallError", privacy.mask_text(prepared.error)),
                language=plan.language,
                runner=chosen.name,
                hash=keyed.key,
                install_time=prepared.install_ms,
            )
        authorized = chosen.authorized_imports(plan.package_imports)
        stream = privacy.stream(on_output) if on_output is not None else None
        request = RunRequest(
            code=code,
            language=plan.language,
            timeout=plan.timeout_ms / 1000,
            max_output=settings.max_output_chars,
            stubs=bundle,
            allow_network=plan.network,
            network=plan.grant,
            authorized_imports=authorized or (),
            environment=str(prepared.environment.path) if prepared.environment else None,
            preload=plan.package_imports if prepared.environment else (),
            packages=plan.requirements,
            on_output=stream.write if stream is not None else None,
            max_concurrent_calls=settings.max_concurrent_calls,
            session_memory_mb=self._session_memory() if session is not None else None,
            owner=_owner(client),
        )
        clock = RunClock()
        request = dataclasses.replace(request, clock=clock)
        approver = (
            Approver(elicit, timeout=settings.approval_timeout, description=description, clock=clock)
            if elicit is not None
            else None
        )
        gate = RunGate(
            self.policy, self.rules.rate(), mode=mode, approver=approver, approved=approved, mask=privacy.mask
        )
        run_id = uuid.uuid4().hex
        traced: dict[int, str] = {}
        """Each call's masked arguments as JSON, by ``id(record)``, for its span (``CODE_MODE_TRACE_CONTENT``)."""
        dispatcher = ToolDispatcher(
            self.pool,
            self.index,
            settings.max_tool_calls,
            gate=gate,
            observe=self._traced(self._auditor(client, run_id, keyed.key, privacy), privacy, traced),
            concurrency=settings.max_concurrent_calls,
            privacy=privacy,
        )

        async def script_progress(report: Progress) -> None:  # at the bridge's pace: a few per second at most
            assert on_progress is not None
            message = privacy.mask_text(report.message) if report.message else None
            elapsed, calls = time.perf_counter() - started, len(dispatcher.calls)
            await on_progress(RunProgress(elapsed, calls, done=report.done, total=report.total, message=message))

        if on_progress is not None:
            request = dataclasses.replace(request, on_progress=script_progress)

        async def queued(ahead: int) -> None:
            if on_progress is not None:
                await on_progress(RunProgress(time.perf_counter() - started, 0, queued=ahead))

        if held is not None:
            if held.busy:
                raise UnsupportedError(
                    f"session {held.id!r} is running another call: a session runs one call at a time; wait for its "
                    "answer"
                )
            held.busy = True
        files = RunFiles(self.artifacts.staging(), self.artifact_limits) if self.artifacts is not None else None
        request = dataclasses.replace(request, files=files)
        try:
            try:
                async with self.admission.slot(client, settings.limit_memory_mb, queued):
                    if session == "new":
                        opener = chosen
                        assert isinstance(opener, SessionRunner)
                        held = await self.sessions.open(
                            client, chosen.name, plan.language, lambda: opener.open_session(request)
                        )
                        held.busy = True
                        held.packages, held.network = packages, allow_networking
                    async with approver.running() if approver is not None else contextlib.nullcontext():
                        in_session = held
                        result = await reporting(
                            lambda: (
                                in_session.handle.run(request, dispatcher)
                                if in_session is not None
                                else chosen.run(request, dispatcher)
                            ),
                            on_progress,
                            lambda: len(dispatcher.calls),
                            started=started,
                            interval=settings.progress_interval_ms / 1000,
                        )
                        if stream is not None:
                            await stream.flush(cut=result.truncated)
            finally:
                if held is not None:
                    held.busy = False
                    held.used = time.monotonic()
                    self.sessions.ended(held)
            if held is not None:
                held.runs += 1
                await self.sessions.used(held)
                result.session_id = held.id
                if held.handle.ended is not None and result.error is not None:
                    result.error.message += f" (the session has ended: {held.handle.ended})"
            return await self._finish(
                result,
                plan,
                chosen,
                prepared.install_ms,
                privacy,
                dispatcher,
                files,
                keyed,
                description,
                client,
                run_id,
                gate,
                mode,
                traced,
            )
        finally:
            if files is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(files.discard)  # what was kept has been moved out of it

    async def _finish(
        self,
        result: RunResult,
        plan: RunPlan,
        chosen: Runner,
        install_ms: int,
        privacy: RunPrivacy,
        dispatcher: ToolDispatcher,
        files: RunFiles | None,
        keyed: Keyed,
        description: str | None,
        client: str,
        run_id: str,
        gate: RunGate,
        mode: RunMode,
        traced: dict[int, str],
    ) -> RunResult:
        """After a run: its files and images, the mask, what it called, the store, its artifacts, the audit."""
        settings = self.settings
        pairs = files.entries(result.files) if files is not None else []
        if files is not None:
            result.files = [entry for entry, _ in pairs]
            result.images = list(files.images)
            if files.refused_images:
                result.output += "".join(f"\n[show() refused: {reason}]" for reason in files.refused_images)
        if len(result.output) > OFF_LOOP_CHARS:  # a large output is masked off the event loop
            await anyio.to_thread.run_sync(masked, privacy, result)
        else:
            masked(privacy, result)
        result.language, result.runner = plan.language, chosen.name
        result.tool_calls = len(dispatcher.reached)  # made to a server; `calls` also lists refused and planned ones
        result.calls = [
            CallEntry(server=c.server, tool=c.tool, decision=c.decision, ms=round(c.ms))
            for c in dispatcher.calls[:MAX_CALLS_SHOWN]
        ]
        result.install_time = install_ms
        result.cached = False
        tokens = await anyio.to_thread.run_sync(dispatcher.savings.count) if not dispatcher.savings.empty else 0
        result.savings = Savings(round_trips=result.tool_calls, tokens=tokens)
        self.tracing.calls(dispatcher.calls, traced if self.tracing.content else None)
        known = self.config.servers
        self.metrics.calls_ended(
            (c.server if c.server in known else "unknown", c.decision, c.ok) for c in dispatcher.calls
        )
        tools = sorted({ToolUse(c.server, c.tool, c.schema_hash or "") for c in dispatcher.reached})
        pii_tokens = privacy.seal_tokens(result.output, result.return_value, [f.path for f in result.files])
        result.hash = await self._cache.store(keyed, result, tools, privacy.described(description), pii_tokens)
        if files is not None and pairs and self.artifacts is not None:
            try:
                await anyio.to_thread.run_sync(self._keep_files, client, result, pairs, current_tenant().name)
            except (OSError, sqlite3.Error) as exc:  # the run's answer still goes out, without links
                logger.warning("a run's files could not be kept: %s", exc)
                for entry, staged in pairs:
                    if staged is not None:
                        entry.uri, entry.dropped = None, "not kept: the artifact store failed"
        if self.audit is not None and self._audit_writer is not None and dispatcher.calls:
            # Every call of the run is committed before the run is answered (the writer batches them).
            await anyio.to_thread.run_sync(self._audit_writer.flush)
            await anyio.to_thread.run_sync(
                partial(self.audit.set_run_hash, run_id, result.hash, tenant=current_tenant().name)
            )
        if time.monotonic() - self._pruned_at > AUDIT_PRUNE_EVERY:
            self._pruned_at = time.monotonic()
            if self.audit is not None:
                await anyio.to_thread.run_sync(self.audit.prune_expired, settings.audit_days)
            await anyio.to_thread.run_sync(self.privacy.vault.prune)  # expired tokens leave memory too
        if mode == "plan":
            result.plan = await self._save_plan(gate, keyed.key, client)
        return result

    def _check_session(self, held: Session | None, chosen: Runner, client: str) -> None:
        """A new session needs a runner that opens sessions; a held one runs only on its own runner."""
        if held is None:
            if not chosen.info.sessions or not isinstance(chosen, SessionRunner):
                able = sorted(r.name for r in self.runners.values() if r.info.sessions)
                raise UnsupportedError(
                    f"the {chosen.name} runner has no sessions (runners with sessions: {', '.join(able) or 'none'})"
                )
            self.sessions.room(client)  # before anything is installed or started (checked again when it opens)
            return
        if chosen.name != held.runner:  # any language of its runner (JavaScript and TypeScript share a scope)
            raise UnsupportedError(
                f"session {held.id!r} runs on the {held.runner} runner ({held.language}): use it, or open a new "
                'session with session="new"'
            )

    def _session_memory(self) -> int:
        """A session worker's memory: ``CODE_MODE_SESSION_MEMORY_MB``, at most a run's."""
        limit = self.settings.limit_memory_mb
        return min(self.settings.session_memory_mb or limit, limit)

    def list_sessions(self, client: str = "library") -> list[dict[str, Any]]:
        """``list_sessions``: the client's own open sessions."""
        return self.sessions.list(client)

    async def close_session(self, session_id: str, *, client: str = "library") -> bool:
        """``close_session``: close the client's session and kill its worker (False: it holds no such session)."""
        return await self.sessions.close(client, session_id)

    async def _approved_calls(
        self, plan_id: str | None, mode: RunMode, code_hash: str, client: str
    ) -> list[dict[str, Any]]:
        """The calls of the plan ``approvePlan`` names, after checking it is this code's and this client's."""
        if plan_id is None:
            return []
        if mode == "plan":
            raise UnsupportedError('approvePlan runs a plan: it does not go with mode="plan"')
        if self.audit is None:
            raise UnsupportedError("plans cannot be kept here: the cache database cannot be used")
        stored = await anyio.to_thread.run_sync(partial(self.audit.load_plan, plan_id, tenant=current_tenant().name))
        if stored is None or stored["client"] != client:
            raise UnsupportedError(f"unknown or expired plan {plan_id!r} (plans last CODE_MODE_PLAN_TTL seconds)")
        if stored["codeHash"] != code_hash:
            raise UnsupportedError(
                f"plan {plan_id!r} was made for other code (or another language, runner, packages or network "
                'policy): run this code with mode="plan" to plan it'
            )
        # Used up now, before the run: two approvals at once, or a cancelled one, never run it twice.
        used = stored.get("usedAt") is not None or not await anyio.to_thread.run_sync(
            partial(self.audit.mark_plan_used, plan_id, tenant=current_tenant().name)
        )
        if used:
            raise UnsupportedError(f"plan {plan_id!r} was already approved and run; make a new plan")
        return list(stored["calls"])

    async def _save_plan(self, gate: RunGate, code_hash: str, client: str) -> PlanResult:
        calls = [c.to_json() for c in gate.planned]
        plan_id = f"plan-{uuid.uuid4().hex[:16]}"
        ttl = self.settings.plan_ttl
        if self.audit is None:
            return PlanResult(plan_id="", calls=calls, expires_in=0, error="plans cannot be kept here")
        audit, tenant = self.audit, current_tenant().name
        await anyio.to_thread.run_sync(lambda: audit.save_plan(plan_id, code_hash, client, ttl, calls, tenant=tenant))
        return PlanResult(plan_id=plan_id, calls=calls, expires_in=round(ttl))

    def _traced(self, observe: CallObserver | None, privacy: RunPrivacy, traced: dict[int, str]) -> CallObserver | None:
        """With ``CODE_MODE_TRACE_CONTENT`` and traces on, each call's masked arguments are kept for its span too."""
        if not (self.tracing.on and self.tracing.content):
            return observe

        def both(record: ToolCallRecord, arguments: dict[str, Any]) -> None:
            traced[id(record)] = json.dumps(privacy.mask(arguments), ensure_ascii=False, default=str)[:4096]
            if observe is not None:
                observe(record, arguments)

        return both

    def _auditor(self, client: str, run_id: str, code_hash: str, privacy: RunPrivacy) -> CallObserver | None:
        """Queue each call of a run for the audit log once its answer has gone out (the dispatcher reports
        answered calls in batches, ``ToolDispatcher.report``, and every one before ``serve_run`` returns; the
        ``AuditWriter`` builds and commits them off the event loop, all before the run is answered). What is kept
        is what a model may see: arguments and errors masked (``privacy``), so the log holds no value in
        plaintext."""
        writer = self._audit_writer
        if writer is None:
            return None
        tenant = current_tenant().name

        def observe(record: ToolCallRecord, arguments: dict[str, Any]) -> None:
            writer.put(
                tenant=tenant,
                at=time.time(),
                server=record.server,
                tool=record.tool,
                arguments=privacy.mask(arguments),
                decision=record.decision,
                client=client,
                run_id=run_id,
                code_hash=code_hash,
                ms=record.ms,
                ok=record.ok,
                error=privacy.mask_text(record.error) if record.error else None,
                pii=record.pii,
            )

        return observe

    async def validate(
        self, language: str, code: str, *, runner: str | None = None, packages: list[str] | None = None
    ) -> dict[str, Any]:
        """``validate_code``: every finding at once; nothing runs and no tool is called (see the runner's
        ``check``: Python is checked against the live schemas and the imports the runner allows,
        JavaScript/TypeScript with ``deno check`` against the generated declarations)."""
        lang, chosen = self.resolve_runner(language, runner)
        max_bytes = self.settings.max_code_bytes
        refused = oversize(lang, code, max_bytes)
        if refused is not None:
            return refused
        requirements = validate_packages(lang, packages or [], self.whitelist)
        await self.settled(code)
        chosen = await self.hosts.get(chosen.name)
        request = CheckRequest(
            code=code,
            language=lang,
            index=self.index,
            declarations=self.bundle(chosen.stub_language).source,
            requirements=requirements,
            package_imports=self.whitelist.imports_for(list(requirements)) if lang == "python" else (),
            max_bytes=max_bytes,
        )
        findings = [*await chosen.check(request), *self.policy_findings(code)]
        if self.skills is not None and _SKILL_CALL.search(code):  # parsed off the event loop, as the checks are
            findings += await anyio.to_thread.run_sync(self.skills.findings, code, chosen.stub_language)
        return {"language": lang, "runner": chosen.name, "supported": True, "valid": not findings, "findings": findings}

    # ----- what the server layer shows ------------------------------------------------------

    def runner_facts(self) -> list[RunnerFacts]:
        """Every runner: its declaration, its isolation here, the languages it is the default for, its state."""
        settings = self.settings
        return [
            RunnerFacts(
                info=r.info,
                isolation=r.isolation,
                default_for=tuple(lang for lang, name in self.defaults.items() if name == r.name),
                state=r.describe(),
                settings={name: _jsonable(getattr(settings, name, None)) for name in r.info.settings},
            )
            for r in self.runners.values()
        ]

    def load(self) -> dict[str, Any]:
        """Run slots, the queue and the memory budget right now (``admission``)."""
        return self.admission.load()

    def share_slots_among_clients(self) -> None:
        """Many clients (HTTP): none may take more than its share of the run slots."""
        self.admission.share_among_clients()

    def isolation(self) -> dict[str, Any]:
        """The sandbox in force on this host, and whether a run without network is really cut off."""
        return {**self.sandbox.describe(), "networkOffIsEnforced": self.sandbox.network_enforced()}

    def servers(self) -> list[dict[str, Any]]:
        """Each downstream server's state (secrets in an error it reported are ``[SECRET]``)."""
        allowed = self._allowed()
        statuses = [s.status() for s in self.pool.servers.values() if allowed is None or s.name in allowed]
        for status in statuses:
            if isinstance(status.get("error"), str):
                status["error"] = self.privacy.scrub(status["error"])
        return statuses

    def status(self) -> dict[str, Any]:
        """Connected servers and runners, for discovery tools and the CLI."""
        return {
            "servers": self.servers(),
            "runners": {
                f.info.name: {"isolation": f.isolation, "languages": list(f.info.languages)}
                for f in self.runner_facts()
            },
        }

    def search_tools(
        self, query: str, *, server: str | None = None, detail: str = "summary", limit: int = 10
    ) -> dict[str, Any]:
        self._refresh()
        view = self.index if self._allowed() is not None else None  # ranked in the whole index, kept once
        found = self.tool_search.search(
            self._stubs.index, self.pool.version, query, server=server, detail=detail, limit=limit, view=view
        )
        if self.skills is not None and server is None:
            hits = self.skills.search(query, limit)
            if hits:
                found["skills"] = hits  # each "kind": "skill", "stale" when a tool it calls changed
        for tool in found.get("tools", []):
            spec = self.index.tool(*str(tool["tool"]).split(".", 1))
            decision = self.policy_of(spec.server, spec.name) if spec is not None else "allow"
            if decision != "allow":
                tool["policy"] = decision  # ask: the call waits for approval; deny: it is refused
        return found

    async def search_scripts(
        self, query: str, language: str | None = None, limit: int = 5, *, client: str = "library"
    ) -> list[dict[str, Any]]:
        """``search_cached_scripts``: each hit as JSON, as ``client`` may see it (its own tokens)."""
        found = await anyio.to_thread.run_sync(
            partial(self.scripts.search, query, language, limit, tenant=current_tenant().name)
        )
        privacy = self.privacy.run(client, tenant=current_tenant().name)
        return [privacy.present(r.script.pii_tokens, r.to_json()) for r in found]

    async def list_scripts(
        self, language: str | None = None, limit: int = 20, *, client: str = "library"
    ) -> list[dict[str, Any]]:
        """``list_cached_scripts``: each script's summary, as ``client`` may see it."""
        scripts = await anyio.to_thread.run_sync(
            partial(self.scripts.list, language, limit, tenant=current_tenant().name)
        )
        privacy = self.privacy.run(client, tenant=current_tenant().name)
        return [privacy.present(s.pii_tokens, s.summary()) for s in scripts]

    async def get_script(self, hash: str, *, client: str = "library") -> dict[str, Any] | None:
        """``get_cached_script``: everything about a stored script, as ``client`` may see it."""
        script = await anyio.to_thread.run_sync(partial(self.scripts.get, hash, tenant=current_tenant().name))
        return (
            None
            if script is None
            else self.privacy.run(client, tenant=current_tenant().name).present(script.pii_tokens, script.to_json())
        )

    @staticmethod
    def _for_client(privacy: RunPrivacy, sealed: bytes | None, result: RunResult) -> RunResult:
        """A replayed result with this client's tokens for the stored ones."""
        if sealed:
            result.output = privacy.retokenize(sealed, result.output)
            result.return_value = privacy.retokenize(sealed, result.return_value)
            for entry in result.files:
                entry.path = privacy.retokenize(sealed, entry.path)
        return result

    def cache_stats(self) -> dict[str, Any]:
        """``get_cache_stats``: the script cache, and the package environments with their size."""
        return {
            **self.scripts.stats(tenant=current_tenant().name),
            "environments": self.environments.stats(),
            "savings": self.metrics.savings(current_tenant().name),
        }

    def allowed_packages(self, language: str = "all") -> dict[str, Any]:
        """The whitelist for ``list_allowed_packages``."""
        return {"source": self.whitelist.source, **self.whitelist.listing(language)}


def masked(privacy: RunPrivacy, result: RunResult) -> None:
    """Mask what a run's result carries to the model (in place): output, return value, error, file names, the
    network's hosts. Text a cap cut loses its last word first when it may be part of a value or a secret
    (``RunPrivacy.cut``)."""
    if result.truncated:
        result.output = privacy.cut(result.output)
        if isinstance(result.return_value, str):
            result.return_value = privacy.cut(result.return_value)
    result.output = privacy.mask_text(result.output)
    result.return_value = privacy.mask(result.return_value)
    if result.error is not None:
        result.error.message = privacy.mask_text(result.error.message)
        if result.error.traceback:
            result.error.traceback = privacy.mask_text(result.error.traceback)
    for entry in result.files:
        entry.path = privacy.mask_text(entry.path)
    if result.network is not None:  # a script may have connected to an address its data held
        result.network.hosts = [privacy.mask_text(h) for h in result.network.hosts]
        result.network.refused = [privacy.mask_text(r) for r in result.network.refused]


_STUB_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)\s*\(")
"""``namespace.tool(`` as a script calls a stub."""
_NAMED_CALL = re.compile(r"\b(call_tool|callTool)\s*\(\s*[\"']([^\"']+)[\"']\s*,\s*[\"']([^\"']+)[\"']")
"""``call_tool("server", "tool", ...)`` with literal names."""


_SKILL_CALL = re.compile(r"(?<![\w.])skills\s*\.\s*[A-Za-z_]")
"""``skills.name`` as a script calls a skill."""


SHARED_CLIENTS = frozenset({"http"})
"""Client names that stand for many callers (stateless HTTP requests without a session or token)."""


def _owner(client: str) -> str | None:
    """Whose run this is, for a worker that serves several runs in one process (``RunRequest.owner``): the tenant
    and the client; None for a client name that many callers share (such a run's worker then serves no other)."""
    if client.rpartition("/")[2] in SHARED_CLIENTS:  # also a tenant's (``_clients.scoped``: tenant:<name>/http)
        return None
    return f"{current_tenant().name}/{client}"


def _names_word(code: str, word: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", code) is not None


def _eager(
    setting: str, runners: dict[str, Runner], defaults: dict[str, str], unavailable: dict[str, str]
) -> frozenset[str]:
    """``CODE_MODE_EAGER_RUNNERS`` as runner names (``ConfigError`` naming the valid ones for an unknown name)."""
    chosen = eager_names(setting, runners, defaults)
    unknown = sorted(chosen - set(names()))
    if unknown:
        valid = ", ".join(["default", "all", "none", *names()])
        raise ConfigError(f"CODE_MODE_EAGER_RUNNERS names no runner {', '.join(unknown)} (valid: {valid})")
    return frozenset(n for n in chosen if n not in unavailable)


def _jsonable(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


__all__ = ["CodeMode", "RunnerFacts"]
