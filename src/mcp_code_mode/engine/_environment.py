"""Stage 3, the environment: the package environment a run's sandbox mounts, installed first if needed.

Only for runners whose packages are an environment (``RunnerInfo.packages == "environment"``); the others
install their packages themselves, inside their run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import PackageError
from ..packages import Environment, PythonEnvironments
from ._request import RunPlan


@dataclass(frozen=True)
class Prepared:
    environment: Environment | None
    install_ms: int
    """Milliseconds spent installing (or waiting for another installer); 0 when it was there."""
    error: str | None = None
    """Why the install failed (the run does not happen)."""


async def prepare(plan: RunPlan, environments: PythonEnvironments) -> Prepared:
    if not plan.requirements or plan.runner.info.packages != "environment":
        return Prepared(None, 0)
    started = time.perf_counter()
    try:
        environment = await environments.ensure(plan.runner.name, list(plan.requirements))
    except PackageError as exc:
        return Prepared(None, round((time.perf_counter() - started) * 1000), str(exc))
    return Prepared(environment, round(environment.seconds * 1000) if environment.installed else 0)


__all__ = ["Prepared", "prepare"]
