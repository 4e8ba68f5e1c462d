"""The ``cpython`` runner: the script is plain CPython, in the same sandboxed zygote workers.

For code that the AST interpreter's restrictions or speed get in the way of (it runs loops about 90×
slower than CPython). Every import of the standard library works; what the script can reach is
decided by the sandbox alone (see SECURITY.md), so it needs namespaces to be safe.
"""

from __future__ import annotations

from ..sandbox import Profile
from ._zygote import ZygoteRunner
from .base import PYTHON_AWAITABLE_RULE, RunnerContext, RunnerInfo, RunnerPlugin

PRELOAD: tuple[str, ...] = ("json", "re", "datetime", "collections", "asyncio", "inspect", "traceback")

INFO = RunnerInfo(
    name="cpython",
    languages=("python",),
    stub_language="python",
    summary="full CPython, any import",
    brief="any import",
    packages="environment",
    package_manager="uv (whitelisted PyPI wheels)",
    order=20,
    awaitable_stubs=PYTHON_AWAITABLE_RULE,
    sessions=True,
    settings=("cpython_pool_size", "limit_memory_mb", "max_warm_environments"),
)


def build(context: RunnerContext) -> ZygoteRunner:
    settings = context.settings
    return ZygoteRunner(
        INFO,
        kind="cpython",
        sandbox=context.sandbox,
        pool_size=settings.cpython_pool_size,
        default_profile=Profile(network=context.sandbox.network_by_default()),
        preload=PRELOAD,
        max_environments=settings.max_warm_environments,
    )


PLUGIN = RunnerPlugin(INFO, build)
