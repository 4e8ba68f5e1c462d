"""The ``deno`` runner: JavaScript and TypeScript in a Deno process per run, from a warm pool.

Deno comes from the PyPI package ``deno``. Each worker process (``deno_worker.ts``) is started ahead of
time in its own empty workspace, with these permissions and nothing else:

- read and write of the workspace (``--allow-read=. --allow-write=.``, the process's cwd);
- network (``--allow-net``), which the worker revokes before the script runs unless the run allows it;
- no environment, subprocesses, FFI or system information (those flags are never given, and
  ``--no-prompt`` makes every such call throw ``NotCapable``);
- modules only from Deno's cache (``--cached-only --no-remote``): npm packages the run needs are put in
  the cache by the host before the run (``npm.plan``), from the allow-list.

The process runs exactly one script and exits (a session's process runs its session's scripts, then is
killed); the pool starts the next one in the background. A
timeout kills the process group. The cache (``DENO_DIR``) is ``Settings.deno_dir``.

In isolate mode (``CODE_MODE_DENO_ISOLATES``) the pool's processes are supervisors (``deno_supervisor.ts``)
instead, each serving run after run of one owner (``RunRequest.owner``), every run in a web Worker of its own
with the permissions above (the workspace, the network when the run may use it, nothing else), the next one
started while a run runs. A supervisor never runs user code itself, is killed after a timeout, a refused
message or a run whose isolate outlives its ``done`` (``Worker.isolates_gone``), and is replaced after
``MAX_SUPERVISED_RUNS``. Sessions keep a process of their own (an empty pool of ``deno_worker.ts`` processes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio

from ..bridge import ErrorDetail, RunResult, ToolDispatcher
from ..config import Settings
from ..egress import NetworkGrant
from ..errors import RunnerError
from ..packages import Whitelist
from ..sandbox import Profile, Sandbox
from . import npm
from ._deno_errors import explain_death
from ._pool import Worker
from ._pooled import PooledRunner, PooledSession, WorkerPools, command_launcher
from ._typecheck import check_typescript
from .base import (
    CheckRequest,
    Diagnosis,
    RunnerContext,
    RunnerInfo,
    RunnerPlugin,
    RunRequest,
    StubBundle,
    distribution_version,
)

logger = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("deno_worker.ts")
SUPERVISOR = WORKER.with_name("deno_supervisor.ts")
"""The isolate mode's process (``CODE_MODE_DENO_ISOLATES``): it runs each run's ``WORKER`` in a web Worker."""
RUNTIME = WORKER.with_name("worker_runtime.ts")
"""The module the Deno and Pyodide workers share (line protocol, output, tool calls, return values)."""
MAX_HEAP_MB = 1024
"""V8 heap limit of a worker; a script that needs more dies with an out-of-memory error."""
CACHE_TIMEOUT = 300.0
"""Seconds allowed for putting a run's npm packages into Deno's cache."""
# Host variables naming the certificate authorities Deno trusts (given to `deno cache`, and turned into
# DENO_CERT for workers: a worker may not read NODE_EXTRA_CA_CERTS itself, its node compatibility layer
# asks for the "sys" permission to load it, and every TLS request of the script would fail).
_TLS_ENV = ("DENO_CERT", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE")
# Further host variables `deno cache` may need to reach the npm registry (never given to a worker).
_REGISTRY_ENV = (
    *_TLS_ENV,
    "NPM_CONFIG_REGISTRY",
    "HOME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)


PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy")
"""The variables a worker may read: ``cm_launch.py --egress`` sets the proxy ones to the run's forwarder."""


def _worker_key(deno: str) -> str:
    """What the worker program's compiled form in Deno's cache depends on: the Deno binary and the sources."""
    digest = hashlib.sha256(b"transpiled modules and V8's code cache\0")  # what a matching stamp vouches for
    info = os.stat(deno)
    digest.update(f"{Path(deno).resolve()}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    for source in (WORKER, RUNTIME, SUPERVISOR):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def find_deno() -> str | None:
    """The Deno executable: the PyPI ``deno`` package's, else one on PATH, else None."""
    with contextlib.suppress(ImportError, OSError, RuntimeError):
        from deno import find_deno_bin

        path = find_deno_bin()
        if path and Path(path).exists():
            return str(path)
    return shutil.which("deno")


def deno_binary() -> str:
    """``find_deno()``, or ``RunnerError`` saying how to install it."""
    path = find_deno()
    if path is None:
        raise RunnerError("the deno executable is missing: install the 'deno' package (pip install deno)")
    return path


def default_deno_dir(settings: Settings) -> Path:
    """``CODE_MODE_DENO_DIR``, else ``deno/`` in the cache directory (``CODE_MODE_CACHE_DIR``)."""
    return settings.deno_dir or settings.cache_root() / "deno"


def tls_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """How Deno is told which certificate authorities to trust: the operating system's store (where a
    TLS-inspecting proxy's CA is installed) and Mozilla's, plus one extra bundle file, the first of
    ``DENO_CERT``, ``NODE_EXTRA_CA_CERTS`` and ``SSL_CERT_FILE`` that is set in ``environ``."""
    environ = os.environ if environ is None else environ
    env = {"DENO_TLS_CA_STORE": environ.get("DENO_TLS_CA_STORE") or "system,mozilla"}
    bundle = next((v for k in _TLS_ENV if (v := environ.get(k))), None)
    if bundle and Path(bundle).is_file():
        env["DENO_CERT"] = bundle
    return env


def deno_env(deno_dir: Path) -> dict[str, str]:
    """What a Deno process needs in its environment besides ``sandbox_environment`` (never a variable that
    Deno's node layer would read on the script's behalf)."""
    return {**tls_env(), "DENO_DIR": str(deno_dir), "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1", "DENO_NO_PROMPT": "1"}


INFO = RunnerInfo(
    name="deno",
    languages=("javascript", "typescript"),
    stub_language="typescript",
    summary="JavaScript/TypeScript under Deno",
    brief="JS/TS",
    packages="self",
    package_manager="Deno's npm cache (whitelisted npm packages)",
    default_for=("javascript", "typescript"),
    order=40,
    keeps_off_network=True,  # the worker revokes Deno's net permission before a run without the network
    settings=("pool_size", "deno_dir", "deno_isolates", "limit_memory_mb"),
    awaitable_stubs="every stub returns a promise: `await server.tool({...})`, `Promise.all([...])`",
    sessions=True,
)


class DenoDialect:
    """A Deno worker runs one script in its own process: it never serves a second run."""

    reuse_workers = False
    spawn_delay = 0.05
    """The replacement of a used worker starts after its run's answer has gone out."""
    concurrent_calls = True  # a stub's promise is sent at once: Promise.all fans out

    def profile_for(self, request: RunRequest) -> Profile:
        return Profile(network=request.network is not None)

    def grant_for(self, request: RunRequest) -> NetworkGrant | None:
        return request.network

    def run_message(self, request: RunRequest, worker: Worker) -> dict[str, Any]:
        """Without ``packages``: the runner adds them from the npm plan it made for the run."""
        return {
            "op": "run",
            "code": request.code,
            "language": request.language,
            "max_output": request.max_output,
            "allow_network": request.network is not None,
            "functions": {ns: list(names) for ns, names in request.stubs.functions.items()},
            "unavailable": dict(request.stubs.unavailable),
            "skills": [dict(s) for s in request.stubs.skills],
        }

    @property
    def memory_limit_mb(self) -> int | None:
        return None

    def explain(self, result: RunResult, stderr_tail: str) -> None:
        explained = explain_death(stderr_tail, MAX_HEAP_MB)
        if explained is not None:
            result.error = explained


class DenoIsolateDialect(DenoDialect):
    """A supervisor serves run after run (of one owner: ``WorkerPools._keep_supervisor``), each in an isolate."""

    reuse_workers = True
    spawn_delay = 0.0


class DenoRunner(PooledRunner):
    """JavaScript and TypeScript on Deno workers (one run each), with npm packages from the allow-list."""

    info = INFO

    def __init__(
        self,
        *,
        sandbox: Sandbox,
        pool_size: int,
        deno_dir: Path,
        whitelist: Whitelist,
        deno: str | None = None,
        isolates: bool = False,
    ) -> None:
        self.sandbox = sandbox
        self.deno = deno or deno_binary()
        self.deno_dir = deno_dir
        self.whitelist = whitelist
        self._check = npm.checker(whitelist)
        self.check_packages = self._check
        self.import_map = deno_dir / "mcp-code-mode-import-map.json"
        self.isolates = isolates
        common = [
            self.deno,
            "run",
            "--quiet",
            "--no-prompt",
            "--no-config",
            "--no-lock",
            "--no-remote",
            "--cached-only",
            f"--import-map={self.import_map}",
            "--allow-net",
            # Only the proxy variables, which name the run's egress forwarder: npm clients (axios) read them.
            "--allow-env=" + ",".join(PROXY_ENV),
            f"--v8-flags=--max-old-space-size={MAX_HEAP_MB}",
        ]
        argv = [
            *common,
            "--allow-read=.",
            "--allow-write=.",
            # Only for a session's run, which opens an inspector session for V8's REPL mode before the script;
            # revoked before any script runs, session or not.
            "--allow-sys=inspector",
            str(WORKER),
        ]
        self._worker_argv = argv
        env = deno_env(deno_dir)
        # The CA bundle named by DENO_CERT is read when Deno starts, network or not: the sandbox shows it.
        bundle = [env["DENO_CERT"]] if "DENO_CERT" in env else []
        reads = lambda: [self.deno, WORKER, RUNTIME, SUPERVISOR, self.deno_dir, *bundle]  # noqa: E731
        default_profile = Profile(network=sandbox.network_by_default())
        # A worker starts with --allow-net and revokes it before a script that may not use it; its sandbox
        # has the network (a profile of its own) only for runs that may use it.
        # In isolate mode these serve sessions only, each started when its session opens (no warm one).
        processes = WorkerPools(
            "deno sessions" if isolates else "deno",
            command_launcher(sandbox, argv, reads=reads, env=env),
            DenoDialect(),
            sandbox=sandbox,
            pool_size=0 if isolates else pool_size,
            default_profile=default_profile,
        )
        self.session_workers: WorkerPools | None = None
        if isolates:
            # The supervisor's control channel is fds 3 and 4, which only it may open; a run's Worker reads the
            # workspace and its program's two files, and writes the workspace.
            supervisor = [
                *common,
                "--unstable-worker-options",
                f"--allow-read=.,/proc/self/fd/3,{WORKER},{RUNTIME}",
                "--allow-write=.,/proc/self/fd/4",
                str(SUPERVISOR),
            ]
            self.workers = WorkerPools(
                "deno",
                command_launcher(sandbox, supervisor, reads=reads, env=env, supervisor=True),
                DenoIsolateDialect(),
                sandbox=sandbox,
                pool_size=pool_size,
                default_profile=default_profile,
            )
            self.session_workers = processes
        else:
            self.workers = processes
        self._cached: set[str] = set()
        self._cache_lock = anyio.Lock()

    async def start(self) -> None:
        self.deno_dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps(npm.import_map(self.whitelist), indent=2) + "\n"
        if not self.import_map.exists() or self.import_map.read_text(encoding="utf-8") != text:
            tmp = self.import_map.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(self.import_map)
        stamp = self.deno_dir / "mcp-code-mode-worker.stamp"
        key = _worker_key(self.deno)
        compiled = (self.deno_dir / "gen").is_dir() and stamp.is_file()
        if not compiled or stamp.read_text(encoding="utf-8", errors="replace") != key:
            with anyio.move_on_after(CACHE_TIMEOUT):
                if await self._compile_worker():
                    tmp = stamp.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(key, encoding="utf-8")
                    tmp.replace(stamp)
        await super().start()
        if self.session_workers is not None:
            await self.session_workers.start()

    async def aclose(self) -> None:
        if self.session_workers is not None:
            await self.session_workers.aclose()
        await super().aclose()

    async def _compile_worker(self) -> bool:
        """Put the worker program's compiled forms into Deno's cache, which workers see read-only: its modules
        transpiled (``deno cache``), then V8's code cache of them, which only a run writes: the worker program
        is run once here, on the host, in an empty directory and with nothing on its stdin (it says ready and
        exits; no script is involved). Without the code cache every worker compiles the program again (about
        170 ms of each first run). Done once for this Deno and these sources (``start``'s stamp)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **deno_env(self.deno_dir)}
        argv = [self.deno, "cache", "--quiet", "--no-config", "--no-lock", str(WORKER), str(SUPERVISOR)]
        done = await anyio.run_process(argv, env=env, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            logger.warning("deno: could not compile the worker program ahead: %s", done.stderr[-500:])
            return False
        with tempfile.TemporaryDirectory(prefix="mcp-code-mode-deno-") as empty:
            done = await anyio.run_process(self._worker_argv, env=env, cwd=empty, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not done.stdout.startswith(b'{"op":"ready"}'):
            logger.warning("deno: the worker program did not start on the host: %s", done.stderr[-500:])
            return False
        return True

    def set_stubs(self, stubs: StubBundle) -> None:
        """The worker defines the stubs from their names, sent with each run; it never loads the source."""

    @property
    def isolation(self) -> str:
        return self.sandbox.isolation + ("+v8-isolate" if self.isolates else "") + "+deno-permissions"

    def authorized_imports(self, package_imports: tuple[str, ...]) -> tuple[str, ...] | None:
        return None  # Deno's permissions and the sandbox decide; npm packages come from the allow-list

    def identity(self) -> dict[str, str]:
        return {"deno": distribution_version("deno")}

    def describe(self) -> dict[str, Any]:
        return {**self.workers.describe(), "heapMb": MAX_HEAP_MB, "isolates": self.isolates}

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult:
        plan = npm.plan(request.code, request.packages, self._check)  # PackageError for packages not allowed
        if plan.cache:
            problem = await self.ensure_cached(plan.cache)
            if problem is not None:
                return RunResult(success=False, error=ErrorDetail("PackageError", problem))
        packages = [{"name": name, "specifier": spec} for name, spec in plan.preload]
        return await self.workers.run(request, dispatcher, {"packages": packages})

    async def open_session(self, request: RunRequest) -> DenoSession:
        return DenoSession(self, await (self.session_workers or self.workers).open_session(request))

    async def check(self, request: CheckRequest) -> list[dict[str, Any]]:
        """Type errors of a script against the tool declarations (see ``_typecheck``).

        The npm packages it names are allow-listed (``PackageError``) and cached first, as for a run.
        """
        plan = npm.plan(request.code, request.requirements, self._check)
        if plan.cache:
            problem = await self.ensure_cached(plan.cache)
            if problem is not None:
                return [{"line": None, "column": None, "kind": "package", "message": problem}]
        found = await check_typescript(
            request.code,
            request.declarations,
            deno=self.deno,
            deno_dir=self.deno_dir,
            whitelist=self.whitelist,
            sandbox=self.sandbox,
            javascript=request.language == "javascript",
        )
        return [{"line": f.line, "column": f.column, "kind": "type", "message": f.message} for f in found]

    async def ensure_cached(self, specifiers: Iterable[str]) -> str | None:
        """Put npm packages into Deno's cache (once per process); the error text when that fails."""
        async with self._cache_lock:
            missing = [s for s in specifiers if s not in self._cached]
            if not missing:
                return None
            env = {k: v for k in _REGISTRY_ENV if (v := os.environ.get(k))}
            env |= {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **deno_env(self.deno_dir)}
            argv = [self.deno, "cache", "--quiet", "--no-config", "--no-lock", *missing]
            try:
                with anyio.fail_after(CACHE_TIMEOUT):
                    done = await anyio.run_process(argv, env=env, check=False, stdin=subprocess.DEVNULL)
            except TimeoutError:
                return f"installing {', '.join(missing)} took longer than {CACHE_TIMEOUT:.0f} s"
            if done.returncode != 0:
                detail = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
                return f"could not install {', '.join(missing)}: {detail[-1500:] or f'exit code {done.returncode}'}"
            self._cached.update(missing)
            return None


class DenoSession:
    """A session on one Deno worker: each run's npm packages are put in the cache and sent, as for a run."""

    def __init__(self, runner: DenoRunner, session: PooledSession) -> None:
        self._runner = runner
        self._session = session

    @property
    def ended(self) -> str | None:
        return self._session.ended

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult:
        plan = npm.plan(request.code, request.packages, self._runner.check_packages)
        if plan.cache:
            problem = await self._runner.ensure_cached(plan.cache)
            if problem is not None:
                return RunResult(success=False, error=ErrorDetail("PackageError", problem))
        packages = [{"name": name, "specifier": spec} for name, spec in plan.preload]
        return await self._session.run(request, dispatcher, {"packages": packages})

    async def aclose(self) -> None:
        await self._session.aclose()


def build(context: RunnerContext) -> DenoRunner:
    settings = context.settings
    return DenoRunner(
        sandbox=context.sandbox,
        pool_size=settings.pool_size,
        deno_dir=default_deno_dir(settings),
        whitelist=context.whitelist,
        isolates=settings.deno_isolates,
    )


def check_deno(path: str | None) -> Diagnosis:
    """Whether the Deno that this runner (and ``pyodide``) uses runs here."""
    fix = "install it into this environment with `pip install deno` (the package ships the binary)"
    if path is None:
        return Diagnosis("warn", "deno", "not found: the JavaScript/TypeScript and Pyodide runners need it", fix)
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return Diagnosis("warn", "deno", f"{path} does not run: {exc}", fix)
    out = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        return Diagnosis("warn", "deno", f"{path} does not run: {out[-300:]}", fix)
    return Diagnosis("ok", "deno", f"{path}: {out.splitlines()[0] if out else 'runs'}")


def diagnose(settings: Settings) -> list[Diagnosis]:
    return [check_deno(find_deno())]


PLUGIN = RunnerPlugin(INFO, build, diagnose, sources=(WORKER, RUNTIME, SUPERVISOR))
