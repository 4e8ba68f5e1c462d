#!/usr/bin/env python3
"""8. Packages (issue 6): the first install of ``requests``, and runs with the same packages afterwards.

    .venv/bin/python bench/packages.py [--runs 15]

One engine (``CodeMode``, no downstream servers) with a fresh cache directory, so no package
environment exists yet:

- first install: ``execute_code(packages=["requests"])`` under cpython; its ``installTime`` (uv into a
  new environment). Measured twice: with an empty uv cache (``UV_CACHE_DIR`` a fresh folder: uv
  downloads the wheels from the package index), and once more into another new environment with uv's
  cache now warm (``PythonEnvironments.ensure``, the step ``execute`` takes);
- then, per runner (cpython, local), runs with ``packages=["requests"]`` (``import requests``) and runs
  with none (``print(1)``), interleaved, each after a short pause so that a warm worker is waiting
  (the zygote of a package set keeps its packages imported). Target: within 50 ms of a run with none.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Section, engine, median, ms, parser, quiet_logs, run_section, timed

from mcp_code_mode.packages import PythonEnvironments

INSTALL_TARGET = 1500.0
SECOND_RUN_TARGET = 50.0
WITH = "import requests\nprint(1)"
NONE = "print(1)"


async def measure(args: argparse.Namespace, section: Section) -> None:
    runners = ("cpython", "local")
    samples: dict[tuple[str, bool], list[float]] = {}
    second: dict[str, float] = {}
    installed: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-packages-") as tmp, quiet_logs():
        os.environ["UV_CACHE_DIR"] = str(Path(tmp) / "uv-cache")  # the engine's uv inherits it
        cm = engine({}, Path(tmp) / "cache", cache_embedder="none", pyodide_pool_size=0)
        async with cm:
            wall, first = await timed(lambda: cm.execute(WITH, runner="cpython", packages=["requests"], cache="off"))
            if not first.success or first.install_time == 0:
                raise SystemExit(f"the first run with requests failed or installed nothing: {first.error}")
            started = time.perf_counter()
            again = await PythonEnvironments(Path(tmp) / "envs-2").ensure("cpython", ["requests"])
            warm_cache = (time.perf_counter() - started) * 1000
            if not again.installed:
                raise SystemExit("the second environment was not installed")
            for runner in runners:
                if runner != "cpython":  # its own environment (they are keyed by runner): installed here
                    result = await cm.execute(WITH, runner=runner, packages=["requests"], cache="off")
                    if not result.success:
                        raise SystemExit(f"{runner}: the first run with requests failed: {result.error}")
                    installed[runner] = result.install_time
                for i in range(args.runs + 1):
                    for with_packages in (i % 2 == 0, i % 2 == 1):
                        await anyio.sleep(0.15)  # the zygote is back and waiting
                        code, packages = (WITH, ["requests"]) if with_packages else (NONE, None)
                        elapsed, result = await timed(
                            lambda code=code, packages=packages, runner=runner: cm.execute(
                                code, runner=runner, packages=packages, cache="off"
                            )
                        )
                        if not result.success or result.output != "1\n" or result.install_time:
                            raise SystemExit(f"{runner}: a run failed or installed again: {result.error}")
                        if with_packages and runner not in second:
                            second[runner] = elapsed  # the first run after the install
                        elif i > 0 or not with_packages:
                            samples.setdefault((runner, with_packages), []).append(elapsed)
        del os.environ["UV_CACHE_DIR"]
    installs = section.table(
        "First install of `requests` (and its dependencies) into a new environment, uv.",
        ["uv's cache", "installTime", "the whole first run (install + run)"],
    )
    installs.rows.append(["empty (downloads from the package index)", ms(first.install_time, 0), ms(wall, 0)])
    installs.rows.append(["warm (a second new environment)", ms(warm_cache, 0), ""])
    for runner, install_ms in installed.items():
        installs.rows.append([f"warm ({runner}'s own environment, in its first run)", ms(install_ms, 0), ""])
    section.target(
        f"first install of requests <= {INSTALL_TARGET:g} ms (uv cache empty)",
        ms(first.install_time, 0),
        first.install_time <= INSTALL_TARGET,
    )
    section.target(
        f"first install of requests <= {INSTALL_TARGET:g} ms (uv cache warm)",
        ms(warm_cache, 0),
        warm_cache <= INSTALL_TARGET,
    )
    runs = section.table(
        f"Runs after the install, `execute` wall time, medians of {args.runs} each, interleaved.",
        ["runner", "first run with requests after the install", "with requests", "with none", "difference"],
    )
    for runner in runners:
        with_p, none = median(samples[(runner, True)]), median(samples[(runner, False)])
        runs.rows.append([runner, ms(second[runner]), ms(with_p), ms(none), ms(with_p - none)])
        section.target(
            f"a run with the same packages within {SECOND_RUN_TARGET:g} ms of one with none ({runner})",
            f"{with_p - none:+.1f} ms",
            with_p - none <= SECOND_RUN_TARGET,
        )
    section.notes.append(
        "Times are the engine's `execute` in this process (server side). Environments are keyed by runner, so "
        "the local runner installs its own copy in its first run with the set. A package set gets its own warm "
        "zygote that has imported the packages before the run."
    )


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--runs", type=int, default=15, help="runs with and without packages, per runner")
    section = Section("packages", "8. Packages", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
