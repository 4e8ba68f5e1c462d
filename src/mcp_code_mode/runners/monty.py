"""The ``monty`` runner: pydantic-monty's Rust interpreter of a Python subset, in a worker inside the sandbox.

The worker (``sandboxed/cm_monty.py``) is a small Python process started by ``cm_launch.py`` (uid drop, rlimits,
seccomp) that never runs a script itself: its ``pydantic_monty.Monty`` pool's ``monty`` child, in the same sandbox,
interprets it, and every suspension of that child (a stub call, ``call_tool``, ``final_answer``) comes back to the
worker, which speaks the bridge's run channel (``call``, ``output``, ``done``) like every other runner. A worker
serves run after run, each on a fresh Monty session in a fresh ``monty`` process (the one a script ran in is
retired with its session) and a wiped workspace, so a warm run costs a few milliseconds and a worker a few
tens of MB.

Monty is its own layer, not the sandbox: no filesystem but the run's workspace (mounted at ``/workspace``), no
network, no subprocesses, a subset of the standard library (``MONTY_MODULES``), and its own limits on time,
memory, recursion and host round trips. Its refusals (class inheritance, ``yield``, method decorators, ...) are
reported by ``validate_code`` and by a run as ``MontySyntaxError`` naming the construct, before any line runs.
``ToolError`` is Monty's ``RuntimeError`` (it has no exception classes of its own): catchable, its message the
server's; an uncaught one fails the run as ``ToolError``.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any, cast

from ..bridge import RunResult, ToolDispatcher
from ..config import Settings
from ..egress import NetworkGrant
from ..errors import RunnerError
from ..sandbox import Profile, Sandbox
from ..validate import check_python
from ._pool import Launcher, Worker
from ._pooled import PooledRunner, WorkerPools
from .base import (
    PYTHON_AWAITABLE_RULE,
    CheckRequest,
    Diagnosis,
    RunnerContext,
    RunnerInfo,
    RunnerPlugin,
    RunRequest,
    StubBundle,
    distribution_version,
)

WORKER_DIR = Path(__file__).with_name("sandboxed")
WORKER = WORKER_DIR / "cm_monty.py"
DISTRIBUTION = "pydantic-monty"

MONTY_MODULES: tuple[str, ...] = (
    "asyncio",
    "base64",
    "binascii",
    "bisect",
    "collections",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "functools",
    "hashlib",
    "itertools",
    "json",
    "math",
    "os",
    "pathlib",
    "posixpath",
    "random",
    "re",
    "sys",
    "time",
    "tomllib",
    "typing",
    "unicodedata",
)
"""The standard-library modules Monty 1.4 provides (any other import fails with ``ModuleNotFoundError``)."""

MAX_RECURSION = 1000
"""Monty's call-depth limit for a run."""
CHECK_TIMEOUT = 10.0
"""Seconds a ``validate_code`` parse may take in the worker."""

INFO = RunnerInfo(
    name="monty",
    languages=("python",),
    stub_language="python",
    brief="fast Python subset",
    summary=(
        "pydantic-monty, a fast Rust interpreter of a Python subset (no class inheritance, no yield, "
        f"stdlib: {', '.join(m for m in MONTY_MODULES if m not in ('posixpath', 'binascii'))})"
    ),
    order=30,
    keeps_off_network=True,
    settings=("monty_pool_size", "limit_memory_mb", "limit_cpu_seconds"),
    awaitable_stubs=PYTHON_AWAITABLE_RULE,
    runs_skills=False,
)


def find_monty() -> tuple[Path, Path, Path] | str:
    """The ``pydantic_monty`` package folder, ``typing_extensions``' file and the ``monty`` binary, or why not
    (found without importing the package: the server process never loads the interpreter)."""
    spec = importlib.util.find_spec("pydantic_monty")
    if spec is None or not spec.submodule_search_locations:
        return f"{DISTRIBUTION} is not installed (pip install '{DISTRIBUTION}>=1.4')"
    package = Path(next(iter(spec.submodule_search_locations)))
    extensions = importlib.util.find_spec("typing_extensions")
    if extensions is None or extensions.origin is None:
        return f"typing_extensions (a dependency of {DISTRIBUTION}) is not installed"
    binary = _monty_binary()
    if binary is None:
        return f"the monty binary is missing (it comes with {DISTRIBUTION}-runtime; or set MONTY_BIN)"
    return package, Path(extensions.origin), binary


def _monty_binary() -> Path | None:
    """Where ``pydantic_monty._binary.find_monty_binary`` would look: ``MONTY_BIN``, the scripts folder, PATH."""
    name = "monty.exe" if sys.platform == "win32" else "monty"
    candidates = [os.environ.get("MONTY_BIN"), str(Path(sysconfig.get_path("scripts")) / name)]
    candidates += [str(Path(sys.executable).parent / name), shutil.which(name)]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate).resolve()
    return None


# ----- the stubs, as the worker maps a call ----------------------------------------------------------------


def stub_table(stubs: StubBundle) -> dict[str, Any]:
    """What the worker needs to call a stub exactly as the Python stub module would: per namespace, its server,
    and per function the tool's name and its parameters (required in order, optional with defaults) with the
    names they are sent as. Read from the Python stubs' source (``stubs/python.py`` renders it)."""
    namespaces: dict[str, Any] = {}
    try:
        tree = ast.parse(stubs.source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = ast.Module(body=[], type_ignores=[])
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name not in stubs.namespaces:
            continue
        server = _decorator_server(node)
        if server is None:
            continue
        tools: dict[str, Any] = {}
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                parsed = _tool(item)
                if parsed is not None:
                    tools[item.name] = parsed
        namespaces[node.name] = {"server": server, "tools": tools}
    unavailable = {name: reason for name, reason in stubs.unavailable.items() if name not in namespaces}
    return {"namespaces": namespaces, "unavailable": unavailable}


def _decorator_server(node: ast.ClassDef) -> str | None:
    for decorator in node.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Name)
            and decorator.func.id == "_namespace"
            and decorator.args
            and isinstance(first := decorator.args[0], ast.Constant)
            and isinstance(first.value, str)
        ):
            return first.value
    return None


def _tool(function: ast.FunctionDef) -> dict[str, Any] | None:
    """``{"tool", "required": [[ident, name]], "optional": [[ident, name, default]]}`` of one stub method."""
    last = function.body[-1] if function.body else None
    call = last.value if isinstance(last, ast.Return) else None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.func.id != "_call":
        return None
    if len(call.args) != 4 or not all(isinstance(a, ast.Constant) for a in call.args[:2]):
        return None
    tool = cast(ast.Constant, call.args[1]).value
    sent = {**_sent_names(call.args[2]), **_sent_names(call.args[3])}
    required = [[a.arg, sent.get(a.arg, a.arg)] for a in function.args.args]
    optional: list[list[Any]] = []
    for argument, default in zip(function.args.kwonlyargs, function.args.kw_defaults, strict=True):
        try:
            value = ast.literal_eval(default) if default is not None else None
        except (ValueError, TypeError, SyntaxError, RecursionError):
            value = None
        optional.append([argument.arg, sent.get(argument.arg, argument.arg), value])
    return {"tool": tool, "required": required, "optional": optional}


def _sent_names(node: ast.expr) -> dict[str, str]:
    """``{"name": ident, ...}`` of a stub's argument map, as ident → the name it is sent as."""
    if not isinstance(node, ast.Dict):
        return {}
    names: dict[str, str] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Name):
            names[value.id] = key.value
    return names


# ----- the dialect and the runner ---------------------------------------------------------------------------


class MontyDialect:
    """The ``run`` message of ``cm_monty.py``; a worker serves run after run, each on a fresh Monty session."""

    reuse_workers = True
    spawn_delay = 0.0
    concurrent_calls = True  # calls gathered under asyncio are sent together

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._tables: tuple[int, dict[str, Any]] | None = None

    def profile_for(self, request: RunRequest) -> Profile:
        return Profile(network=False)  # Monty has no sockets: a run never needs the egress gate

    def table(self, stubs: StubBundle) -> dict[str, Any]:
        if self._tables is None or self._tables[0] != stubs.version:
            self._tables = (stubs.version, stub_table(stubs))
        return self._tables[1]

    def run_message(self, request: RunRequest, worker: Worker) -> dict[str, Any]:
        limits = self.sandbox.limits
        return {
            "op": "run",
            "code": request.code,
            "max_output": request.max_output,
            "timeout": max(0.1, min(request.timeout, float(limits.cpu_seconds))),
            "memory": limits.memory_mb * 1024 * 1024,
            "recursion": MAX_RECURSION,
            "version": request.stubs.version,
            "stubs": self.table(request.stubs),
        }

    def grant_for(self, request: RunRequest) -> NetworkGrant | None:
        return None

    def explain(self, result: RunResult, stderr_tail: str) -> None:
        return None

    @property
    def memory_limit_mb(self) -> int | None:
        return None


def monty_launcher(sandbox: Sandbox, found: tuple[Path, Path, Path]) -> Launcher:
    """``cm_monty.py`` behind ``cm_launch.py`` in the sandbox, with pydantic-monty's files bound read-only."""
    package, extensions, binary = found
    python = Path(getattr(sys, "_base_executable", sys.executable))
    argv = [str(python), "-I", "-S", str(WORKER), "--sys-path", str(package.parent), "--monty", str(binary)]
    if extensions.parent != package.parent:
        argv += ["--sys-path", str(extensions.parent)]
    reads = [WORKER_DIR, package, extensions, binary]

    def launch(profile: Profile) -> Any:
        spec = sandbox.command_spec(
            argv, profile, reads=reads, env={}, limits=sandbox.limits.for_process(memory_mb=sandbox.limits.memory_mb)
        )
        spec.zygote = True  # it passes a run channel per run and says ready again (cm_monty.py)
        return spec

    return launch


class _NoCalls:
    """The dispatcher of a ``validate_code`` parse: nothing runs, so no call can come."""

    async def handle(self, server: str, tool: str, arguments: Any, line: int | None = None) -> dict[str, Any]:
        return {"error": {"message": "no tool is called while code is validated", "server": server, "tool": tool}}


class MontyRunner(PooledRunner):
    """Runs on warm ``cm_monty.py`` workers."""

    def __init__(self, info: RunnerInfo, *, sandbox: Sandbox, pool_size: int, found: tuple[Path, Path, Path]) -> None:
        self.info = info
        self.sandbox = sandbox
        self._stubs = StubBundle(source="", version=-1, namespaces=())
        self.workers = WorkerPools(
            info.name,
            monty_launcher(sandbox, found),
            MontyDialect(sandbox),
            sandbox=sandbox,
            pool_size=pool_size,
            default_profile=Profile(network=False),
            max_environments=0,
        )

    @property
    def isolation(self) -> str:
        return self.sandbox.isolation + "+interpreter"

    def authorized_imports(self, package_imports: tuple[str, ...]) -> tuple[str, ...] | None:
        return MONTY_MODULES

    async def check(self, request: CheckRequest) -> list[dict[str, Any]]:
        checked = await check_python(request.code, request.index, MONTY_MODULES, max_bytes=request.max_bytes)
        findings: list[dict[str, Any]] = list(checked.get("findings", []))
        if not any(f.get("kind") in ("syntax", "size", "nesting") for f in findings):
            findings.extend(await self._refusals(request.code))
        return sorted(findings, key=lambda f: (f.get("line") or 0, f.get("column") or 0))

    async def _refusals(self, code: str) -> list[dict[str, Any]]:
        """What Monty's parser refuses, from a worker that parses the script without running any of it."""
        request = RunRequest(code=code, language="python", timeout=CHECK_TIMEOUT, max_output=2000, stubs=self._stubs)
        result = await self.workers.run(request, cast(ToolDispatcher, _NoCalls()), {"check": True})
        error = result.error
        if result.success or error is None:
            return []
        if error.type not in ("MontySyntaxError", "SyntaxError"):
            return [{"line": None, "column": None, "kind": "runner", "message": f"{error.type}: {error.message}"}]
        kind = "unsupported" if error.type == "MontySyntaxError" else "syntax"
        return [{"line": error.line, "column": 1, "kind": kind, "message": f"{error.type}: {error.message}"}]

    def identity(self) -> dict[str, str]:
        return {DISTRIBUTION: distribution_version(DISTRIBUTION)}

    def describe(self) -> dict[str, Any]:
        described = self.workers.describe()
        described.pop("warmEnvironments", None)
        described.pop("maxWarmEnvironments", None)
        return {**described, "modules": list(MONTY_MODULES)}

    def set_stubs(self, stubs: StubBundle) -> None:
        self._stubs = stubs
        self.workers.set_stubs(stubs)


def build(context: RunnerContext) -> MontyRunner:
    found = find_monty()
    if isinstance(found, str):
        raise RunnerError(found)
    return MontyRunner(INFO, sandbox=context.sandbox, pool_size=context.settings.monty_pool_size, found=found)


def diagnose(settings: Settings) -> list[Diagnosis]:
    found = find_monty()
    if isinstance(found, str):
        return [Diagnosis("info", "monty runner", found, fix=f"pip install '{DISTRIBUTION}>=1.4'")]
    version = distribution_version(DISTRIBUTION)
    return [Diagnosis("ok", "monty runner", f"{DISTRIBUTION} {version}, binary {found[2]}")]


PLUGIN = RunnerPlugin(INFO, build, diagnose, sources=(WORKER,))
