"""The ``pyodide`` runner: full CPython (Pyodide, WebAssembly) under Deno, with the same stubs and bridge.

The portable sandbox. A script runs in a Pyodide interpreter inside a Deno process whose permissions
are the only door out: read of the Pyodide files, the memory snapshot, the worker script and the
run's workspace (read/write, mounted at ``/workspace``), network only when the run allows it; no env,
run, ffi or sys. It works wherever Deno does (Linux, macOS, Windows), bubblewrap or not.

Fast start: the first start of the runner boots Pyodide once (seconds) and writes a memory snapshot
to the cache, keyed by the versions of Pyodide, Deno and the worker's own sources. Every worker
restores an interpreter from it (a fraction of a second) and waits, warm, with the stubs compiled.
A worker serves exactly one run and exits, so no state carries over (a session's worker serves that session's
runs, with its globals, until the session closes); the pool starts its
replacement as soon as a run takes it (``pyodide_pool_size`` are kept waiting).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import anyio

from ..bridge import ErrorDetail, RunResult, ToolDispatcher
from ..config import Settings
from ..egress import EgressPolicy, NetworkGrant, parse_rules
from ..errors import RunnerError
from ..packages import Whitelist
from ..sandbox import Profile, Sandbox
from ..validate import check_python
from ._pool import WORKER_START_TIMEOUT, Worker, WorkerPool
from ._pooled import PooledSession, WorkerPools, command_launcher, python_run_message
from .base import (
    PYTHON_AWAITABLE_RULE,
    CheckRequest,
    Declared,
    Diagnosis,
    RunnerContext,
    RunnerInfo,
    RunnerPlugin,
    RunRequest,
    StubBundle,
)
from .deno import find_deno
from .pyodide_packages import PyodidePackages

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
WORKER_SCRIPT = HERE / "pyodide_worker.ts"
RUNTIME = HERE / "sandboxed" / "cm_runtime.py"
"""The Python runtime the prelude shares with the zygote (the worker puts it beside the prelude)."""
PRELUDE = HERE / "pyodide_prelude.py"
SNAPSHOT_TIMEOUT = 300.0
_PROJECT_ROOT = HERE.parents[2]


def default_cache_dir(settings: Settings) -> Path:
    """``CODE_MODE_PYODIDE_CACHE_DIR``, else ``pyodide/`` in the cache directory."""
    return settings.pyodide_cache_dir or settings.cache_root() / "pyodide"


def find_pyodide_dir(settings: Settings) -> Path:
    if settings.pyodide_dir is not None:
        return settings.pyodide_dir.resolve()
    for root in (_PROJECT_ROOT, Path.cwd()):
        candidate = root / "node_modules" / "pyodide"
        if (candidate / "pyodide.mjs").exists():
            return candidate.resolve()
    return (_PROJECT_ROOT / "node_modules" / "pyodide").resolve()


@dataclass(frozen=True)
class PyodideSetup:
    """Where everything is, and what the snapshot is keyed by."""

    deno: str | None
    pyodide_dir: Path
    cache_dir: Path
    index_url: str | None
    max_memory_mb: int = 1024
    tiering_budget: int = 0

    @property
    def wheels_dir(self) -> Path:
        return self.cache_dir / "wheels"

    @property
    def deno_dir(self) -> Path:
        return self.cache_dir / "deno"

    def problem(self) -> str | None:
        """Why this runner cannot work on this host, or None."""
        if self.deno is None:
            return "Deno is not installed (the PyPI package `deno` provides it)"
        if not (self.pyodide_dir / "pyodide.mjs").exists():
            return f"Pyodide is not installed at {self.pyodide_dir} (run `npm ci`, or set CODE_MODE_PYODIDE_DIR)"
        return None

    def lock(self) -> dict[str, Any]:
        try:
            return json.loads((self.pyodide_dir / "pyodide-lock.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def versions(self) -> dict[str, str]:
        pyodide = "unknown"
        with contextlib.suppress(OSError, ValueError):
            pyodide = json.loads((self.pyodide_dir / "package.json").read_text(encoding="utf-8"))["version"]
        deno = "unknown"
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            deno = importlib.metadata.version("deno")
        return {"pyodide": str(pyodide), "deno": deno}

    def snapshot_path(self) -> Path:
        digest = hashlib.sha256()
        digest.update(json.dumps(self.versions(), sort_keys=True).encode())
        digest.update(str(self.deno).encode())
        for source in (WORKER_SCRIPT, HERE / "worker_runtime.ts", PRELUDE, RUNTIME):
            digest.update(source.read_bytes())
        return self.cache_dir / f"snapshot-{self.versions()['pyodide']}-{digest.hexdigest()[:16]}.bin"

    def remote_index(self) -> bool:
        """Whether Pyodide's own packages come from an http(s) index (the worker's sandbox then needs the network)."""
        return bool(self.index_url) and urlparse(self.index_url or "").scheme in ("http", "https")

    def index_grant(self, settings: Settings) -> NetworkGrant | None:
        """The egress a worker needs for a remote index: that host and port only (a private address still
        needs ``CODE_MODE_NETWORK_ALLOW_PRIVATE``); None for a folder index."""
        if not self.remote_index():
            return None
        url = urlparse(self.index_url or "")
        port = url.port or (443 if url.scheme == "https" else 80)
        host = f"[{url.hostname}]" if ":" in (url.hostname or "") else url.hostname
        base = EgressPolicy.from_settings(allow_private=settings.network_allow_private)
        policy = EgressPolicy(allow=parse_rules([f"{host}:{port}"]), allow_private=base.allow_private)
        return NetworkGrant(policy, int(settings.network_max_mb * (1 << 20)), settings.network_max_connections)

    def index_folder(self) -> str | None:
        """The configured package index when it is a folder (read permission), else None (a URL)."""
        if not self.index_url or urlparse(self.index_url).scheme in ("http", "https"):
            return None
        parsed = urlparse(self.index_url)
        return str(Path(parsed.path if parsed.scheme == "file" else self.index_url).resolve())

    def serve_argv(self, snapshot: Path) -> list[str]:
        """A worker's command line. Network is granted here and revoked by the worker before a run that
        does not allow it (workers are started before their run is known)."""
        folder = self.index_folder()
        readable = [str(p) for p in (self.pyodide_dir, snapshot, WORKER_SCRIPT, HERE / "worker_runtime.ts")]
        readable += [str(self.wheels_dir), "."]
        index = folder or self.index_url or ""
        return [
            self.deno or "deno",
            "run",
            "--no-prompt",
            "--no-config",
            "--no-lock",
            "--allow-read=" + ",".join([*readable, *([folder] if folder else [])]),
            "--allow-write=.",
            "--allow-net",
            f"--v8-flags={','.join(self.v8_flags())}",
            str(WORKER_SCRIPT),
            "serve",
            str(self.pyodide_dir),
            str(snapshot),
            str(self.wheels_dir),
            index,
        ]

    def reads(self, snapshot: Path) -> list[str]:
        """What a worker's sandbox shows it, read-only: Deno, Pyodide, the snapshot, the worker, the wheels."""
        folder = self.index_folder()
        paths = [self.deno or "deno", self.pyodide_dir, snapshot, WORKER_SCRIPT, HERE / "worker_runtime.ts"]
        paths += [self.wheels_dir, self.deno_dir]
        return [str(p) for p in [*paths, *([folder] if folder else [])]]

    def v8_flags(self) -> list[str]:
        flags = [
            f"--wasm-max-mem-pages={self.max_memory_mb * 16}",  # 64 KiB pages
            # Without this, V8 optimizes the interpreter loop (one 79 KB function) while the worker
            # warms up, speculating on the function pointers it saw; the run's own calls then throw
            # that code away and compile it again: 0.3-0.4 s of a background thread's CPU in every run.
            "--no-wasm-deopt",
        ]
        if self.tiering_budget > 0:
            flags.append(f"--wasm-tiering-budget={self.tiering_budget}")
        return flags

    def environment(self) -> dict[str, str]:
        return {"DENO_DIR": str(self.deno_dir), "DENO_NO_UPDATE_CHECK": "1", "NO_COLOR": "1"}


def prune_snapshots(cache_dir: Path, unused_for: float) -> list[str]:
    """Remove memory snapshots not used for ``unused_for`` seconds, except the most recently used one.

    A snapshot is keyed by versions and sources, so each upgrade leaves the previous one (about 30 MB)
    behind; a server touches the one it uses each time it starts.
    """
    snapshots = sorted(cache_dir.glob("snapshot-*.bin"), key=lambda p: p.stat().st_mtime, reverse=True)
    cutoff = time.time() - unused_for
    removed: list[str] = []
    for path in snapshots[1:]:
        if path.stat().st_mtime < cutoff:
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


async def ensure_snapshot(setup: PyodideSetup, packages: PyodidePackages) -> Path:
    """The snapshot for these versions, made now (seconds, once per version) when missing."""
    path = setup.snapshot_path()
    if path.exists():
        with contextlib.suppress(OSError):
            os.utime(path)  # last used: what `mcp-code-mode cache prune` goes by
            os.chmod(path, 0o644)  # workers read it as their sandbox's own unprivileged uid
        return path
    setup.cache_dir.mkdir(parents=True, exist_ok=True)
    setup.wheels_dir.mkdir(parents=True, exist_ok=True)
    micropip_version = str(((setup.lock().get("packages") or {}).get("micropip") or {}).get("version") or "")
    if micropip_version:
        await packages.micropip(micropip_version)  # into the wheel cache; workers unpack it
    fd, tmp_name = tempfile.mkstemp(prefix=".snapshot-", suffix=".tmp", dir=setup.cache_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    argv = [
        setup.deno or "deno",
        "run",
        "--no-prompt",
        "--no-config",
        "--no-lock",
        f"--allow-read={setup.pyodide_dir},{HERE}",
        f"--allow-write={tmp}",
        str(WORKER_SCRIPT),
        "snapshot",
        str(setup.pyodide_dir),
        str(tmp),
        str(PRELUDE),
    ]
    logger.info("pyodide: making the memory snapshot %s (once per version)", path.name)
    try:
        with anyio.fail_after(SNAPSHOT_TIMEOUT):
            result = await anyio.run_process(
                argv, check=False, env={"PATH": os.environ.get("PATH", ""), **setup.environment()}
            )
        if result.returncode != 0 or tmp.stat().st_size == 0:
            detail = result.stderr.decode("utf-8", "replace").strip()[-1500:]
            raise RunnerError(f"could not make the Pyodide snapshot: {detail or f'exit code {result.returncode}'}")
        os.chmod(tmp, 0o644)  # workers read it as their sandbox's own unprivileged uid
        os.replace(tmp, path)
    except TimeoutError:
        raise RunnerError(f"making the Pyodide snapshot took more than {SNAPSHOT_TIMEOUT:.0f} s") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


INFO = RunnerInfo(
    name="pyodide",
    languages=("python",),
    stub_language="python",
    summary="CPython in WebAssembly",
    brief="WebAssembly",
    packages="self",
    package_manager="micropip (whitelisted pure-Python wheels from PyPI, Pyodide's own packages)",
    order=30,
    keeps_off_network=True,  # the JavaScript realm is sealed: Python has no fetch and no sockets
    settings=("pyodide_pool_size", "pyodide_max_memory_mb", "pyodide_index_url", "pyodide_cache_dir"),
    awaitable_stubs=PYTHON_AWAITABLE_RULE,
    sessions=True,
)


class PyodideDialect:
    """A Pyodide worker serves exactly one run and exits."""

    reuse_workers = False
    spawn_delay = 0.05
    """The replacement of a used interpreter starts after its run's answer has gone out."""
    concurrent_calls = True  # parallel(...) and asyncio.gather send calls before waiting for their answers

    def __init__(self, profile: Profile, max_memory_mb: int, index_grant: NetworkGrant | None = None) -> None:
        self._profile = profile
        self._max_memory_mb = max_memory_mb
        self._index_grant = index_grant

    def profile_for(self, request: RunRequest) -> Profile:
        return self._profile

    def grant_for(self, request: RunRequest) -> NetworkGrant | None:
        """The script has no network of its own (the JavaScript realm is sealed): the gate is open only to
        Pyodide's remote package index, which the worker loads from before the script runs."""
        return self._index_grant

    def run_message(self, request: RunRequest, worker: Worker) -> dict[str, Any]:
        return python_run_message(request, worker)

    @property
    def memory_limit_mb(self) -> int | None:
        return self._max_memory_mb

    def explain(self, result: RunResult, stderr_tail: str) -> None:
        error = result.error
        if error is not None and ("out of memory" in stderr_tail.lower() or "RangeError: WebAssembly" in stderr_tail):
            result.error = ErrorDetail(
                "MemoryError", f"out of memory: a Pyodide interpreter may use {self._max_memory_mb} MB"
            )


class PyodideRunner(Declared):
    """Python in Pyodide interpreters restored from a memory snapshot, one per run."""

    info = INFO

    def __init__(self, settings: Settings, sandbox: Sandbox, whitelist: Whitelist) -> None:
        self.sandbox = sandbox
        self.setup = PyodideSetup(
            deno=find_deno(),
            pyodide_dir=find_pyodide_dir(settings),
            cache_dir=default_cache_dir(settings).resolve(),
            index_url=settings.pyodide_index_url,
            max_memory_mb=settings.pyodide_max_memory_mb,
            tiering_budget=settings.pyodide_tiering_budget,
        )
        self.packages = PyodidePackages(
            wheels_dir=self.setup.wheels_dir,
            lock=self.setup.lock(),
            index_url=settings.pyodide_index_url,
            whitelist=whitelist,
        )
        self.problem: str | None = self.setup.problem()
        snapshot = self.setup.snapshot_path() if self.problem is None else Path("missing")
        launcher = command_launcher(
            sandbox,
            self.setup.serve_argv(snapshot),
            reads=lambda: self.setup.reads(snapshot),
            env=self.setup.environment(),
            memory_mb=max(sandbox.limits.memory_mb, self.setup.max_memory_mb),
        )
        # One kind of worker. Python under Pyodide has no network of its own (the JavaScript realm is sealed),
        # so the sandbox has the network only when Pyodide's own packages come from a remote index, which
        # the worker loads before the script runs. The pool starts empty and grows once the snapshot exists
        # (see ``_prepare``).
        profile = Profile(network=self.setup.remote_index())
        self.workers = WorkerPools(
            "pyodide",
            launcher,
            PyodideDialect(profile, self.setup.max_memory_mb, self.setup.index_grant(settings)),
            sandbox=sandbox,
            pool_size=0,
            default_profile=profile,
        )
        self._target_size = settings.pyodide_pool_size
        self._prepared = anyio.Event()
        self._preparing = False

    @property
    def pool(self) -> WorkerPool:
        return self.workers.pool

    async def start(self) -> None:
        await self.workers.start()
        if self._target_size > 0:  # warm up in the background: the server serves meanwhile
            assert self.workers.task_group is not None
            self._preparing = True
            self.workers.task_group.start_soon(self._make_ready)

    async def aclose(self) -> None:
        await self.workers.aclose()

    def set_stubs(self, stubs: StubBundle) -> None:
        self.workers.set_stubs(stubs)

    async def _prepare(self) -> None:
        """Wait until the snapshot exists and the pool fills (or the runner failed). The work is done once, in
        the runner's own task group: a caller that stops waiting (a warm-up timeout, a cancelled run) does
        not cancel it, and the next caller waits for the same."""
        tg = self.workers.task_group
        assert tg is not None, "the runner is not started"
        if not self._preparing:
            self._preparing = True
            tg.start_soon(self._make_ready)
        await self._prepared.wait()

    async def _make_ready(self) -> None:
        try:
            if self.problem is None:
                await ensure_snapshot(self.setup, self.packages)
                tg = self.workers.task_group
                assert tg is not None
                # The first interpreter starts alone: the first run after start waits only for it.
                self.workers.resize(min(1, self._target_size))
                await self.workers.start_default()
                tg.start_soon(self._grow)
        except RunnerError as exc:
            self.problem = str(exc)
        finally:
            self._prepared.set()
        if self.problem is not None:
            logger.warning("pyodide runner unavailable: %s", self.problem)

    async def ready(self) -> None:
        if self._target_size == 0:
            return
        await self._prepare()  # waits for the snapshot and the first interpreter's start
        await self.workers.ready()

    async def _grow(self) -> None:
        """Once the first interpreter is ready (or failed), start the rest of the pool."""
        with anyio.move_on_after(WORKER_START_TIMEOUT):
            while self.pool.warm == 0 and self.pool.starting > 0:
                await self.pool.changed()
        self.workers.resize(self._target_size)

    @property
    def isolation(self) -> str:
        return self.sandbox.isolation + "+wasm"

    def authorized_imports(self, package_imports: tuple[str, ...]) -> tuple[str, ...] | None:
        return None

    async def check(self, request: CheckRequest) -> list[dict[str, Any]]:
        checked = await check_python(request.code, request.index, None, max_bytes=request.max_bytes)
        return list(checked.get("findings", []))

    def identity(self) -> dict[str, str]:
        return self.setup.versions()

    def describe(self) -> dict[str, Any]:
        return {
            **self.workers.describe(),
            "poolSize": self._target_size,
            "memoryMb": self.setup.max_memory_mb,
            **({"problem": self.problem} if self.problem else {}),
        }

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult:
        extra = await self.extra(request)
        if isinstance(extra, RunResult):
            return extra
        return await self.workers.run(request, dispatcher, extra)

    async def extra(self, request: RunRequest) -> dict[str, Any] | RunResult:
        """What a run's message carries besides the code (its packages), or the result of a run that cannot be."""
        await self._prepare()
        if self.problem is not None:
            error = ErrorDetail("RunnerError", f"pyodide runner unavailable: {self.problem}")
            return RunResult(success=False, error=error)
        plan = await self.packages.plan(request.packages)
        extra: dict[str, Any] = {"allow_network": request.allow_network}
        if plan.wheels:
            extra["wheels"] = list(plan.wheels)
        if plan.pyodide:
            extra["pyodide_packages"] = list(plan.pyodide)
        return extra

    async def open_session(self, request: RunRequest) -> PyodideSession:
        await self._prepare()
        if self.problem is not None:
            raise RunnerError(f"pyodide runner unavailable: {self.problem}")
        return PyodideSession(self, await self.workers.open_session(request))


class PyodideSession:
    """A session on one Pyodide interpreter: each run's packages are planned as for a run."""

    def __init__(self, runner: PyodideRunner, session: PooledSession) -> None:
        self._runner = runner
        self._session = session

    @property
    def ended(self) -> str | None:
        return self._session.ended

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunResult:
        extra = await self._runner.extra(request)
        if isinstance(extra, RunResult):
            return extra
        return await self._session.run(request, dispatcher, extra)

    async def aclose(self) -> None:
        await self._session.aclose()


def build(context: RunnerContext) -> PyodideRunner:
    """The runner, or ``RunnerError`` when this host lacks what it needs (Deno, Pyodide's files): the server
    then serves without it and says why (``unavailableRunners``)."""
    runner = PyodideRunner(context.settings, context.sandbox, context.whitelist)
    if runner.problem is not None:
        raise RunnerError(runner.problem)
    return runner


def diagnose(settings: Settings) -> list[Diagnosis]:
    problem = PyodideSetup(
        deno=find_deno(),
        pyodide_dir=find_pyodide_dir(settings),
        cache_dir=default_cache_dir(settings),
        index_url=settings.pyodide_index_url,
    ).problem()
    if problem:
        return [Diagnosis("warn", "pyodide", problem, "run `npm ci` in the project, or set CODE_MODE_PYODIDE_DIR")]
    return []


def prune(settings: Settings, unused_for: float) -> tuple[str, list[str]]:
    folder = default_cache_dir(settings)
    return "Pyodide snapshot(s)", prune_snapshots(folder, unused_for) if folder.is_dir() else []


PLUGIN = RunnerPlugin(
    INFO, build, diagnose, sources=(WORKER_SCRIPT, HERE / "worker_runtime.ts", PRELUDE, RUNTIME), prune=prune
)


__all__ = ["PLUGIN", "PyodideRunner", "ensure_snapshot", "find_deno", "prune_snapshots"]
