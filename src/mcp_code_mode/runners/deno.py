"""The ``deno`` runner: JavaScript and TypeScript in a Deno process per run, from a warm pool.

Deno comes from the PyPI package ``deno``. Each worker process (``deno_worker.ts``) is started ahead of
time in its own empty workspace, with these permissions and nothing else:

- read and write of the workspace (``--allow-read=. --allow-write=.``, the process's cwd);
- network (``--allow-net``), which the worker revokes before the script runs unless the run allows it;
- no environment, subprocesses, FFI or system information (those flags are never given, and
  ``--no-prompt`` makes every such call throw ``NotCapable``);
- modules only from Deno's cache (``--cached-only --no-remote``): npm packages the run needs are put in
  the cache by the host before the run (``npm.plan``), from the allow-list.

The process runs exactly one script and exits; the pool starts the next one in the background. A
timeout kills the process group. The cache (``DENO_DIR``) is ``Settings.deno_dir``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio

from ..bridge import ToolDispatcher
from ..config import Settings
from ..errors import RunnerError
from ..packages import Whitelist
from ..sandbox import Profile, Sandbox
from ..validate_ts import Finding, check_typescript
from . import npm
from .base import ErrorInfo, RunOutcome, RunRequest, StubBundle
from .pool import Worker
from .process import ProcessRunner, command_launcher

logger = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("deno_worker.ts")
MAX_HEAP_MB = 1024
"""V8 heap limit of a worker; a script that needs more dies with an out-of-memory error."""
CACHE_TIMEOUT = 300.0
"""Seconds allowed for putting a run's npm packages into Deno's cache."""
# Host variables naming the certificate authorities Deno trusts: given to `deno cache` and to workers
# (whose scripts cannot read the environment), so that TLS works where the host's does.
_TLS_ENV = ("DENO_CERT", "DENO_TLS_CA_STORE", "NODE_EXTRA_CA_CERTS")
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


def deno_env(deno_dir: Path) -> dict[str, str]:
    """What a Deno process needs in its environment besides ``sandbox_environment``."""
    tls = {k: v for k in _TLS_ENV if (v := os.environ.get(k))}
    return {**tls, "DENO_DIR": str(deno_dir), "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1", "DENO_NO_PROMPT": "1"}


class DenoRunner(ProcessRunner):
    name = "deno"
    languages: tuple[str, ...] = ("javascript", "typescript")
    stub_language = "typescript"
    reuse_workers = False
    """A Deno worker runs the script in its own process: it never serves a second run."""
    spawn_delay = 0.05
    """The replacement of a used worker starts after its run's answer has gone out."""
    installs_packages = True
    """npm packages go into Deno's cache (``ensure_cached``), not into a Python environment."""

    def __init__(
        self, *, sandbox: Sandbox, pool_size: int, deno_dir: Path, whitelist: Whitelist, deno: str | None = None
    ) -> None:
        self.deno = deno or deno_binary()
        self.deno_dir = deno_dir
        self.whitelist = whitelist
        self._check = npm.checker(whitelist)
        self.import_map = deno_dir / "mcp-code-mode-import-map.json"
        argv = [
            self.deno,
            "run",
            "--quiet",
            "--no-prompt",
            "--no-config",
            "--no-lock",
            "--no-remote",
            "--cached-only",
            f"--import-map={self.import_map}",
            "--allow-read=.",
            "--allow-write=.",
            "--allow-net",
            f"--v8-flags=--max-old-space-size={MAX_HEAP_MB}",
            str(WORKER),
        ]
        reads = lambda: [self.deno, WORKER, self.deno_dir]  # noqa: E731
        launcher = command_launcher(sandbox, argv, reads=reads, env=deno_env(deno_dir))
        # A worker starts with --allow-net and revokes it before a script that may not use it; its sandbox
        # has the network (a profile of its own) only for runs that may use it.
        profile = Profile(network=sandbox.settings.allow_network)
        super().__init__(launcher, sandbox=sandbox, pool_size=pool_size, default_profile=profile)
        self._cached: set[str] = set()
        self._cache_lock = anyio.Lock()

    async def start(self) -> None:
        self.deno_dir.mkdir(parents=True, exist_ok=True)
        text = json.dumps(npm.import_map(self.whitelist), indent=2) + "\n"
        if not self.import_map.exists() or self.import_map.read_text(encoding="utf-8") != text:
            tmp = self.import_map.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(self.import_map)
        # Workers see the cache read-only: the worker program's own compiled form is put there first (our
        # code, not a script's; about 30 ms when it is already there).
        argv = [self.deno, "cache", "--quiet", "--no-config", "--no-lock", str(WORKER)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **deno_env(self.deno_dir)}
        with anyio.move_on_after(CACHE_TIMEOUT):
            done = await anyio.run_process(argv, env=env, check=False, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                logger.warning("deno: could not compile the worker program ahead: %s", done.stderr[-500:])
        await super().start()

    def set_stubs(self, stubs: StubBundle) -> None:
        # The worker defines the stubs from their names, sent with each run; it never loads the source.
        self._stubs = stubs

    @property
    def isolation(self) -> str:
        """``namespaces+deno-permissions`` where the sandbox has namespaces, else ``deno-permissions``."""
        return "namespaces+deno-permissions" if self.sandbox.isolation == "namespaces" else "deno-permissions"

    def profile_for(self, request: RunRequest) -> Profile:
        return Profile(network=request.allow_network)

    def run_message(self, request: RunRequest, worker: Worker) -> dict[str, Any]:
        plan = npm.plan(request.code, request.packages, self._check)
        return {
            "op": "run",
            "code": request.code,
            "language": request.language,
            "max_output": request.max_output,
            "allow_network": request.allow_network,
            "functions": {ns: list(names) for ns, names in request.stubs.functions.items()},
            "packages": [{"name": name, "specifier": spec} for name, spec in plan.preload],
        }

    async def run(self, request: RunRequest, dispatcher: ToolDispatcher) -> RunOutcome:
        plan = npm.plan(request.code, request.packages, self._check)  # PackageError for packages not allowed
        if plan.cache:
            problem = await self.ensure_cached(plan.cache)
            if problem is not None:
                return RunOutcome(success=False, error=ErrorInfo("PackageError", problem))
        return await super().run(request, dispatcher)

    async def check(
        self, code: str, declarations: str, packages: Iterable[str] = (), *, javascript: bool = False
    ) -> list[Finding]:
        """Type errors of a script against the tool declarations (see ``validate_ts``).

        The npm packages it names are allow-listed (``PackageError``) and cached first, as for a run.
        """
        plan = npm.plan(code, packages, self._check)
        if plan.cache:
            problem = await self.ensure_cached(plan.cache)
            if problem is not None:
                return [Finding(None, None, problem)]
        return await check_typescript(
            code,
            declarations,
            deno=self.deno,
            deno_dir=self.deno_dir,
            whitelist=self.whitelist,
            sandbox=self.sandbox,
            javascript=javascript,
        )

    async def _died(self, worker: Worker) -> RunOutcome:
        outcome = await super()._died(worker)
        tail = worker.stderr_tail()
        if "Top-level await promise never resolved" in tail:
            where = re.search(r"data:application/\w+;base64,[^:\s]*:(\d+):\d+", tail)
            message = "the script awaits a promise that never settles (nothing is left that could resolve it)"
            outcome.error = ErrorInfo("Error", message, int(where.group(1)) if where else None)
        return outcome

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
