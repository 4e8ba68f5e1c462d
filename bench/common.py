"""What every benchmark section shares: statistics, machine facts, result tables, servers and clients.

A section is a script (``bench/<name>.py``) whose ``measure`` returns a ``Section``: tables of figures,
targets with met / not met, and notes. Run alone it prints the section as markdown; with ``--json FILE``
it also writes it for ``bench/run_all.py``, which renders ``bench/RESULTS.md``.

Every section runs against the real server and real downstream servers. The script cache is always a
fresh temporary directory, and runs that are measured use ``cache="off"``. The Pyodide memory snapshot
and Deno's module cache are kept in ``.tools/bench/`` between runs: making the snapshot is a one-time
cost of the first start, not of a server start (a section notes when it had to make it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".tools" / "bench"
"""Kept between runs: the Pyodide snapshot (``pyodide/``) and Deno's cache (``deno/``)."""
FIXTURE = ROOT / "tests" / "fixtures" / "fixture_server.py"
NODE_BIN = ROOT / "node_modules" / ".bin"
EXECUTABLE = Path(sys.executable).parent / "mcp-code-mode"
RUNNERS = ("local", "cpython", "pyodide", "deno", "monty")


# ----- statistics -------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1): a value that was measured, never an interpolation."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def ms(value: float, digits: int = 1) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f} ms"


def ratio(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}×"


def size(n: float) -> str:
    if n >= 1024 * 1024:
        return f"{n / 1024 / 1024:,.1f} MiB"
    if n >= 10 * 1024:
        return f"{n / 1024:,.1f} KiB"
    return f"{n:,.0f} B"


async def timed(action: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """(milliseconds, result) of one awaited call."""
    started = time.perf_counter()
    result = await action()
    return (time.perf_counter() - started) * 1000, result


# ----- results ----------------------------------------------------------------------------------


@dataclass
class Table:
    caption: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)


@dataclass
class Target:
    target: str
    """What the issue asks, e.g. ``local warm p50 <= 15 ms``."""
    measured: str
    met: bool | None
    """None: could not be measured here (the notes say why)."""


@dataclass
class Section:
    key: str
    title: str
    command: str
    tables: list[Table] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: str = ""
    load_at_start: list[float] = field(default_factory=list)
    seconds: float = 0.0
    failed: str | None = None
    """Set when a check of the section failed (the script then exits with status 1)."""

    def table(self, caption: str, columns: list[str]) -> Table:
        table = Table(caption, columns)
        self.tables.append(table)
        return table

    def target(self, target: str, measured: str, met: bool | None) -> None:
        self.targets.append(Target(target, measured, met))


def met_text(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[met]


def render_table(table: Table) -> str:
    lines = [f"{table.caption}\n"] if table.caption else []
    lines.append("| " + " | ".join(table.columns) + " |")
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    lines.extend("| " + " | ".join(row) + " |" for row in table.rows)
    return "\n".join(lines)


def render_section(section: Section, level: int = 2) -> str:
    load = " ".join(f"{x:.2f}" for x in section.load_at_start)
    out = [
        f"{'#' * level} {section.title}",
        "",
        f"`{section.command}` · started {section.started} · load average at start {load} · "
        f"took {section.seconds:.0f} s",
    ]
    if section.failed:
        out += ["", f"**FAILED:** {section.failed}"]
    for table in section.tables:
        out += ["", render_table(table)]
    if section.targets:
        targets = Table("Targets:", ["target", "measured", "result"])
        targets.rows = [[t.target, t.measured, met_text(t.met)] for t in section.targets]
        out += ["", render_table(targets)]
    if section.notes:
        out += [""] + [f"- {note}" for note in section.notes]
    return "\n".join(out) + "\n"


def section_from_json(data: dict[str, Any]) -> Section:
    tables = [Table(**t) for t in data.pop("tables", [])]
    targets = [Target(**t) for t in data.pop("targets", [])]
    return Section(**data, tables=tables, targets=targets)


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with ``--json FILE`` (write the section for run_all.py)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, default=None, help="also write the section as JSON to this file")
    return parser


def command_line() -> str:
    """This process's command line as typed from the project folder, without ``--json FILE``."""

    def short(path: str) -> str:
        absolute = Path(path).absolute()
        return str(absolute.relative_to(ROOT)) if absolute.is_relative_to(ROOT) else path

    argv = list(sys.argv[1:])
    if "--json" in argv:
        at = argv.index("--json")
        del argv[at : at + 2]
    return " ".join([short(sys.executable), short(sys.argv[0]), *argv])


def run_section(
    measure: Callable[[argparse.Namespace, Section], Awaitable[None]],
    section: Section,
    args: argparse.Namespace,
) -> int:
    """Run ``measure`` (which fills ``section``), print it as markdown, write JSON if asked."""
    section.command = command_line()
    section.started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    section.load_at_start = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    anyio.run(measure, args, section)
    section.seconds = round(time.perf_counter() - started, 1)
    print(render_section(section), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(section), indent=1), encoding="utf-8")
    return 1 if section.failed else 0


# ----- the machine ------------------------------------------------------------------------------

FORK_PROBE = """
import os, statistics, time
times = []
for _ in range(30):
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    times.append((time.perf_counter() - started) * 1000)
print(statistics.median(times))
"""
"""Prints the median milliseconds of fork() + exit + waitpid of a bare Python (the zygotes pay a fork per run)."""


def machine_facts() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    deno = "not found"
    from mcp_code_mode.runners.deno import find_deno

    found = find_deno()
    if found:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            deno = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30).stdout.split("\n")[
                0
            ]
    commit = "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT, timeout=30
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=ROOT, timeout=30
        ).stdout.strip()
        if changed:
            commit += f" with uncommitted changes to {len(changed.splitlines())} files in src/"
    fork = "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
        timing = subprocess.run(
            [sys.executable, "-I", "-S", "-c", FORK_PROBE], capture_output=True, text=True, timeout=60, check=True
        )
        fork = f"{float(timing.stdout):.2f} ms"
    from mcp_code_mode.sandbox import detect_sandbox

    described = detect_sandbox(engine_settings(STATE / "unused")).describe()
    sandbox = str(described.get("isolation", "unknown"))
    if described.get("reason"):
        sandbox += f" ({described['reason']})"
    return {
        "fork": fork,
        "sandbox": sandbox,
        "cores": str(os.cpu_count()),
        "cpu": cpu,
        "memory": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "deno": deno,
        "commit": commit,
    }


# ----- servers, settings, clients ---------------------------------------------------------------


def fixture_entry(**env: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(FIXTURE)], "env": dict(env)}


def npm_entry(name: str, *args: str, **env: str) -> dict[str, Any]:
    path = NODE_BIN / f"mcp-server-{name}"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `make install` first")
    return {"command": str(path), "args": list(args), "env": dict(env)}


def write_config(folder: Path, servers: dict[str, dict[str, Any]]) -> Path:
    path = folder / "mcp_servers.json"
    path.write_text(json.dumps({"servers": servers}), encoding="utf-8")
    return path


def snapshot_exists() -> bool:
    """Whether the Pyodide memory snapshot for this build exists (else the first start makes it)."""
    from mcp_code_mode.runners.pyodide import PyodideSetup, find_deno, find_pyodide_dir

    settings = engine_settings(STATE / "unused")
    setup = PyodideSetup(find_deno(), find_pyodide_dir(settings), (STATE / "pyodide").resolve(), None)
    return setup.snapshot_path().exists()


def server_env(cache_dir: Path, **settings: str | int) -> dict[str, str]:
    """This process's environment without CODE_MODE_* settings, plus the benchmark's and ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODE_MODE_")}
    env |= {
        "CODE_MODE_CACHE_DIR": str(cache_dir),
        "CODE_MODE_PYODIDE_CACHE_DIR": str(STATE / "pyodide"),
        "CODE_MODE_DENO_DIR": str(STATE / "deno"),
        "CODE_MODE_LOG_LEVEL": "WARNING",
    }
    return env | {f"CODE_MODE_{k.upper()}": str(v) for k, v in settings.items()}


def engine_settings(cache_dir: Path, **overrides: Any) -> Any:
    """``Settings`` for an engine in this process, with the same directories as ``server_env``.

    Every runner is eager (``CODE_MODE_EAGER_RUNNERS=all``, where the server has that setting): the sections
    that use an engine in this process measure warm runners; start-up as it is by default is ``startup.py``'s.
    """
    from mcp_code_mode.config import Settings

    values: dict[str, Any] = {
        "cache_dir": cache_dir,
        "pyodide_cache_dir": STATE / "pyodide",
        "deno_dir": STATE / "deno",
        "log_level": "WARNING",
    }
    if "eager_runners" in Settings.model_fields:
        values["eager_runners"] = "all"
    return Settings(**(values | overrides))


def engine(servers: dict[str, dict[str, Any]], cache_dir: Path, **overrides: Any) -> Any:
    """A ``CodeMode`` over ``servers`` (not yet entered)."""
    from mcp_code_mode.config import CodeModeConfig
    from mcp_code_mode.engine import CodeMode

    settings = engine_settings(cache_dir, **overrides)
    return CodeMode(CodeModeConfig.from_servers(servers, settings=settings, env=dict(os.environ)))


async def wait_warm(cm: Any, runner: str, count: int = 1, timeout: float = 180) -> None:
    """Wait until ``count`` workers of a runner's default pool are idle and warm."""
    pool = cm.runners[runner].pool
    with anyio.fail_after(timeout):
        while pool.warm < count:
            await anyio.sleep(0.005)  # polling the pool's counter: there is no event for "n are warm"


@asynccontextmanager
async def stdio(command: str, args: list[str], env: dict[str, str], errlog: TextIO) -> AsyncGenerator[Client]:
    """A real MCP client over stdio to a child process."""
    params = StdioServerParameters(command=command, args=args, env=env)
    async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
        yield client


@asynccontextmanager
async def executor(config: Path, env: dict[str, str], errlog: TextIO) -> AsyncGenerator[Client]:
    """``mcp-code-mode serve --config CONFIG`` as a child, through a real stdio client."""
    async with stdio(str(EXECUTABLE), ["serve", "--config", str(config)], env, errlog) as client:
        yield client


def structured(result: Any) -> dict[str, Any]:
    """The structured content of an ``execute_code`` result; exits naming the failure if the run failed."""
    data = result.structured_content or {}
    if not data.get("success"):
        raise SystemExit(f"execute_code failed: {json.dumps(data)[:800]}")
    return data


def wire_bytes(result: Any) -> int:
    """Bytes of a CallToolResult as JSON on the wire (by alias, no nulls)."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


# ----- processes --------------------------------------------------------------------------------


def process_stats() -> dict[int, list[str]]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, ...), of every process."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="utf-8")
            except OSError:
                continue
            stats[int(entry.name)] = stat.rsplit(")", 1)[1].split()
    return stats


def process_table(stats: dict[int, list[str]] | None = None) -> dict[int, int]:
    """pid -> ppid of every process."""
    stats = process_stats() if stats is None else stats
    return {pid: int(fields[1]) for pid, fields in stats.items()}


def descendants(parent: int, table: dict[int, int] | None = None) -> list[int]:
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, ppid in table.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    frontier = [parent]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(parent: int) -> dict[int, float]:
    """CPU time (user + system, all threads) used so far by each descendant of ``parent``: one read
    of the process table."""
    stats = process_stats()
    pids = descendants(parent, process_table(stats))
    return {pid: (int(stats[pid][11]) + int(stats[pid][12])) / _TICK for pid in pids}


async def quiesce(window: float = 0.1, busy: float = 0.1, timeout: float = 10) -> float:
    """Wait until this process's children are idle: under ``busy`` of one core over ``window``.

    A worker the pools just started goes on compiling in V8's background threads after it says ready
    (Pyodide optimizes its interpreter loop, about 0.35 s of CPU); a measurement made meanwhile
    shares two cores with it. A process that appears during a window counts with all its CPU time.
    Returns the seconds waited (``timeout`` at most).
    """
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        before = tree_cpu_seconds(os.getpid())
        await anyio.sleep(window)
        after = tree_cpu_seconds(os.getpid())
        used = sum(max(0.0, seconds - before.get(pid, 0.0)) for pid, seconds in after.items())
        if used <= busy * window:
            break
    return time.perf_counter() - started


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in KiB, from /proc/<pid>/smaps_rollup; (0, 0) when it is gone."""
    rss = pss = 0
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8")
    except OSError:
        return 0, 0
    for line in text.splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1])
        elif line.startswith("Pss:"):
            pss = int(line.split()[1])
    return rss, pss


def peak_rss_kib(pid: int) -> int:
    """The kernel's high-water mark of one process's RSS (VmHWM)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def find_child(marker: str) -> int | None:
    """The pid of this process's descendant whose command line contains ``marker`` (the first found)."""
    for pid in descendants(os.getpid()):
        if marker in cmdline(pid):
            return pid
    return None


@contextlib.contextmanager
def quiet_logs() -> Generator[None]:
    """Engines in this process log at WARNING (their INFO lines would interleave with the tables)."""
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    yield
