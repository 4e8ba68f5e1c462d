"""The ``local`` runner: smolagents' ``LocalPythonExecutor`` (an AST interpreter) in a worker process.

The interpreter refuses imports outside an allow-list, dunder access and unlisted builtins; it is one
layer, not the sandbox (smolagents itself says it "is not a security sandbox"). The worker process,
its sandbox and its rlimits are what stand between a script and the host.
"""

from __future__ import annotations

from ..sandbox import Profile
from ._zygote import ZygoteRunner
from .base import RunnerContext, RunnerInfo, RunnerPlugin
from .sandboxed.cm_constructs import ADVICE, unsupported

# Standard-library modules a script may import under the local runner, besides smolagents' own base list.
SAFE_IMPORTS: tuple[str, ...] = (
    "collections",
    "datetime",
    "itertools",
    "math",
    "queue",
    "random",
    "re",
    "stat",
    "statistics",
    "time",
    "unicodedata",
    "json",
    "csv",
    "base64",
    "hashlib",
    "hmac",
    "string",
    "textwrap",
    "decimal",
    "fractions",
    "functools",
    "operator",
    "dataclasses",
    "typing",
    "enum",
    "uuid",
    "copy",
    "heapq",
    "bisect",
    "html",
    "difflib",
    "pprint",
    "zlib",
    "struct",
    "calendar",
    "zoneinfo",
    "urllib.parse",
    "ipaddress",
    "secrets",
    "binascii",
    "fnmatch",
    "array",
    "numbers",
    "colorsys",
)


INFO = RunnerInfo(
    name="local",
    languages=("python",),
    stub_language="python",
    summary="restricted interpreter (safe stdlib modules; no os, sys, subprocess)",
    brief="restricted, no os",
    packages="environment",
    package_manager="uv (whitelisted PyPI wheels)",
    default_for=("python",),
    order=10,
    keeps_off_network=True,
    settings=("pool_size", "limit_memory_mb", "max_warm_environments"),
    sessions=True,
)


def authorized_imports(package_imports: tuple[str, ...]) -> tuple[str, ...]:
    """What a script may import: the safe standard-library modules and its packages' modules."""
    return SAFE_IMPORTS + package_imports


def unsupported_findings(code: str) -> list[dict[str, object]]:
    """``validate_code`` findings for constructs the interpreter refuses (it never gives a wrong answer)."""
    try:
        found = unsupported(code)
    except (RecursionError, MemoryError):  # deeper than the checker walks: the other checks said so
        return []
    return [
        {"line": line, "column": 1, "kind": "unsupported", "message": f"{message} ({ADVICE})"}
        for line, message in found
    ]


def build(context: RunnerContext) -> ZygoteRunner:
    settings = context.settings
    return ZygoteRunner(
        INFO,
        kind="local",
        sandbox=context.sandbox,
        pool_size=settings.pool_size,
        default_profile=Profile(network=context.sandbox.network_by_default()),
        preload=SAFE_IMPORTS,
        imports=authorized_imports,
        distributions=("smolagents",),
        extra_check=unsupported_findings,
        max_environments=settings.max_warm_environments,
    )


PLUGIN = RunnerPlugin(INFO, build)
