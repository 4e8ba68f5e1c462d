#!/usr/bin/env python3
"""16. Replicas behind nginx: throughput and latency for 1, 2 and 3 replicas, and one SIGKILLed mid-run.

    .venv/bin/python bench/replicas.py [--agents 8] [--seconds 10] [--rounds 3] [--replicas 1 2 3] [--database sqlite]

(``make bench-replicas``.) Each level starts N real ``mcp-code-mode serve --http --stateless`` processes
(``tests/scaleout/harness.py``: minimal environment, the fixture server downstream, one shared store: one SQLite
file in WAL mode, or with ``--database postgresql`` a pgserver whose URL goes to ``CODE_MODE_DATABASE_URL``) behind
one nginx with the repo's configuration (``deploy/nginx``); the levels run at once and are measured in turn,
``--rounds`` times (interleaved, so that other load on the machine falls on each alike). ``--agents`` MCP
clients over streamable HTTP through nginx each do, one after another for ``--seconds``, a mix from its own
place: a script with a tool call of its own (``tool_run``: a new script each time, stored), the script every
agent sends (``cache_hit``: a hit after its first run), ``search_cached_scripts`` then ``search_tools``
(``search``), a script calling a saved skill (``skill``). Throughput is acknowledged operations (the client got
its result) per second; latency is per operation, the whole MCP call as the client sees it.

The kill scenario: three replicas, the same agents with a 0.2 s sleep in each tool run (so runs are in flight),
replica r1 SIGKILLed a third of the way in. Checked: every acknowledged tool run is stored exactly once
(``run_count`` 1); every failure is a run that was on r1, and says the replica went away; no process of r1 is
left; r1 restarted removes the gate directories and cgroups it left; the survivors serve every request after the
kill (nginx passes a request that found r1 refusing connections to another replica, never one that was sent).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.scaleout: the harness the tests use

from common import Section, median, parser, percentile, ratio, run_section
from tests.scaleout.agents import GONE, Agents, Op, save_skill, store_integrity, stored_runs
from tests.scaleout.harness import Cluster, Database, alive, cluster, descendants

KINDS = ("tool_run", "cache_hit", "search", "skill")
SETTINGS = {"pool_size": "2", "monty_pool_size": "0"}
"""Per replica: two warm workers of the local runner (the default python runner), no Monty ones."""
SLOW = "import time\ntime.sleep(0.2)\n"
TICK = os.sysconf("SC_CLK_TCK")


def p50_p95(ops: list[Op], kind: str) -> str:
    values = [op.ms for op in ops if op.kind == kind and op.ok]
    if not values:
        return "–"
    return f"{median(values):.0f} / {percentile(values, 0.95):.0f}"


def held_directories(pids: set[int]) -> set[Path]:
    held: set[Path] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = Path(os.readlink(fd))
            except OSError:
                continue
            if target.name.startswith(("mcp-code-mode-gate-", "mcp-code-mode-workspace-")):
                held.add(target)
    return held


def cpu_seconds(root: int) -> float:
    """CPU time (user + system, with reaped children) of ``root`` and its live descendants."""
    total = 0.0
    for pid in {root} | descendants(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / TICK
    return total


def cpu_now(running: Cluster) -> tuple[float, float, float]:
    """CPU seconds so far of this process (the agents), of the replicas' trees, of nginx."""
    replicas = sum(cpu_seconds(r.process.pid) for r in running.replicas)
    return time.process_time(), replicas, cpu_seconds(running.balancer.process.pid)


async def drive(running: Cluster, agents: Agents, k: int, seconds: float, at: float | None = None) -> dict[str, Any]:
    """``k`` agents for ``seconds``; with ``at``, r1 is SIGKILLed that many seconds in."""
    end = time.monotonic() + seconds
    facts: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        for agent in range(k):
            tg.start_soon(lambda a=agent: agents.run_agent(a, until=lambda: time.monotonic() >= end))
        if at is not None:
            await anyio.sleep(at)
            victim = running.replicas[0]
            tree = descendants(victim.process.pid)
            facts["held"] = held_directories({victim.process.pid})
            facts["tree"] = victim.kill() | tree
            facts["killed_at"] = time.monotonic()
            started = time.monotonic()
            while any(alive(pid) for pid in facts["tree"]) and time.monotonic() - started < 10:
                await anyio.sleep(0.02)
            facts["gone_ms"] = (time.monotonic() - started) * 1000
            facts["left"] = [pid for pid in facts["tree"] if alive(pid)]
    return facts


async def warm(running: Cluster) -> None:
    """One of each operation on every replica (directly, not through nginx), so that the levels measure warm
    replicas: the skill saved, the shared script cached, each replica's stubs and search index loaded."""
    await save_skill(running.url)
    for replica in running.replicas:
        agents = Agents(replica.url)
        await agents.run_agent(0, steps=len(agents.mix))


async def measure(args: Any, section: Section) -> None:
    database: Database = args.database
    ops: dict[int, list[Op]] = {n: [] for n in args.replicas}
    rates: dict[int, list[float]] = {n: [] for n in args.replicas}
    loads: dict[int, list[float]] = {n: [] for n in args.replicas}
    cpu: dict[int, list[float]] = {n: [0.0, 0.0, 0.0] for n in args.replicas}
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp, contextlib.ExitStack() as stack:
        clusters: dict[int, Cluster] = {}
        for n in args.replicas:
            clusters[n] = stack.enter_context(
                cluster(n, Path(tmp) / f"n{n}", stateless=True, database=database, settings=SETTINGS)
            )
            await warm(clusters[n])
        # Rounds interleave the levels, so that the load other work puts on the machine falls on each alike.
        for _ in range(args.rounds):
            for n in args.replicas:
                agents = Agents(clusters[n].url)
                loads[n].append(os.getloadavg()[0])
                before = cpu_now(clusters[n])
                await drive(clusters[n], agents, args.agents, args.seconds)
                after = cpu_now(clusters[n])
                cpu[n] = [c + (a - b) for c, a, b in zip(cpu[n], after, before, strict=True)]
                ops[n] += agents.ops
                rates[n].append(sum(op.ok for op in agents.ops) / args.seconds)
        stack.close()
        table = section.table(
            f"{args.agents} agents, {args.rounds} rounds of {args.seconds:g} s per level (the levels interleaved), "
            f"`--stateless` replicas behind nginx, store: {database}. Throughput: median of the rounds (their range); "
            "latency p50 / p95 in ms over every round, per operation as the client sees it.",
            [
                "replicas",
                "ops acknowledged",
                "failed",
                "throughput (ops/s)",
                "× 1 replica",
                *KINDS,
                "load average",
                "CPU ms per op: agents / replicas / nginx",
            ],
        )
        base = median(rates[args.replicas[0]])
        for n in args.replicas:
            done = ops[n]
            rate = median(rates[n])
            table.rows.append(
                [
                    str(n),
                    str(sum(op.ok for op in done)),
                    str(sum(not op.ok for op in done)),
                    f"{rate:.1f} ({min(rates[n]):.1f}–{max(rates[n]):.1f})",
                    ratio(rate / base) if base else "–",
                    *(p50_p95(done, kind) for kind in KINDS),
                    f"{median(loads[n]):.1f}",
                    " / ".join(f"{c * 1000 / max(1, sum(op.ok for op in done)):.1f}" for c in cpu[n]),
                ]
            )
            failures = Counter((op.error or "")[:120] for op in done if not op.ok)
            section.notes.extend(f"{n} replicas: {count} × {error}" for error, count in failures.most_common(3))
        if args.kill:
            await kill_scenario(args, section, Path(tmp) / "kill", database)
    section.notes.append(
        f"Per replica: CODE_MODE_POOL_SIZE={SETTINGS['pool_size']}, no Monty pool, no Pyodide pool, the hashing "
        "embedder. nginx, the replicas, their workers and the agents share this machine's cores with other "
        "work (the load average column): a level with more replicas has more processes, not more cores. CPU per "
        "op: this process (the agents: MCP clients), the replicas with their workers and downstream servers, "
        "nginx; summed over the rounds and divided by the acknowledged operations."
    )


async def kill_scenario(args: Any, section: Section, base: Path, database: Database) -> None:
    with cluster(3, base, stateless=True, database=database, settings=SETTINGS) as running:
        await warm(running)
        agents = Agents(running.url, tool_prefix=SLOW)
        load = os.getloadavg()[0]
        at = args.seconds / 3
        facts = await drive(running, agents, args.agents, args.seconds, at=at)
        killed_at: float = facts["killed_at"]
        acknowledged = agents.acknowledged()
        failed = agents.failed()
        failed_runs = [op for op in failed if op.kind == "tool_run" and op.nonce]
        store = running.store
        if database == "postgresql" and running.store_file.exists():
            section.failed = (
                "the replicas stored in SQLite, not in PostgreSQL: this build does not read CODE_MODE_DATABASE_URL"
            )
            store = running.store_file
        stored = stored_runs(store, [op.nonce for op in [*acknowledged, *failed_runs] if op.nonce])
        once = sum(1 for op in acknowledged if op.nonce and [c for _, c in stored[op.nonce]] == [1])
        orphans = sum(1 for op in failed_runs if op.nonce and stored[op.nonce])
        integrity = store_integrity(store) if isinstance(store, Path) else {"integrity": "n/a (PostgreSQL)"}
        after = [op for op in agents.ops if op.started > killed_at]
        after_ok = [op for op in after if op.ok]
        clear = [op for op in failed if op.error and any(g in op.error for g in GONE)]
        late_failures = [op for op in failed if op.started > killed_at]
        running.restart(running.replicas[0])
        left_dirs = [p for p in facts["held"] if p.exists()]
        healthy = all(
            httpx2.get(f"http://127.0.0.1:{r.port}/healthz", timeout=5).status_code == 200 for r in running.replicas
        )
    table = section.table(
        f"Kill: 3 replicas, {args.agents} agents for {args.seconds:g} s, r1 SIGKILLed {at:.1f} s in (load average "
        f"{load:.1f}).",
        ["check", "measured"],
    )
    rows = [
        ("operations acknowledged (of them tool runs)", f"{sum(op.ok for op in agents.ops)} ({len(acknowledged)})"),
        ("acknowledged tool runs stored exactly once", f"{once} of {len(acknowledged)}"),
        ("failed operations (in flight on r1)", str(len(failed))),
        ("… saying the replica went away", f"{len(clear)} of {len(failed)}"),
        ("… failed tool runs stored anyway (run ended, answer lost)", f"{orphans} of {len(failed_runs)}"),
        (
            "store",
            f"integrity {integrity['integrity']}, scripts {integrity.get('scripts', '?')}, "
            f"indexed {integrity.get('indexed', '?')}",
        ),
        (
            "r1's processes (replica, workers, sandboxes, downstream server)",
            f"{len(facts['tree'])}, all gone {facts['gone_ms']:.0f} ms after the kill"
            if not facts["left"]
            else f"{len(facts['left'])} left",
        ),
        ("r1's gate/workspace directories after its restart", f"{len(left_dirs)} of {len(facts['held'])} left"),
        ("operations started after the kill", f"{len(after_ok)} of {len(after)} acknowledged"),
        (
            "throughput before / after the kill (ops/s)",
            f"{sum(1 for op in agents.ops if op.ok and op.started <= killed_at) / at:.1f} / "
            f"{sum(1 for op in agents.ops if op.ok and op.started > killed_at) / (args.seconds - at):.1f}",
        ),
        ("every replica healthy after r1's restart", "yes" if healthy else "no"),
    ]
    table.rows.extend([name, value] for name, value in rows)
    errors = Counter((op.error or "")[:160] for op in failed)
    section.notes.extend(f"kill: {count} × {error}" for error, count in errors.most_common(4))
    section.target(
        "every acknowledged run stored exactly once", f"{once} of {len(acknowledged)}", once == len(acknowledged)
    )
    section.target(
        "runs on the killed replica fail saying so", f"{len(clear)} of {len(failed)}", len(clear) == len(failed)
    )
    section.target(
        "no process or directory left",
        f"{len(facts['left'])} processes, {len(left_dirs)} directories",
        not facts["left"] and not left_dirs,
    )
    section.target(
        "survivors keep serving",
        f"{len(late_failures)} failures after the kill; healthy: {healthy}",
        not late_failures and healthy,
    )
    if once != len(acknowledged) or facts["left"] or left_dirs or not healthy:
        section.failed = section.failed or "a kill check failed (see the table)"


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument("--agents", type=int, default=8, help="concurrent MCP clients")
    cli.add_argument("--seconds", type=float, default=10.0, help="how long each round of a level runs")
    cli.add_argument("--rounds", type=int, default=3, help="rounds per level (interleaved)")
    cli.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 3], help="replica counts to measure")
    cli.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite", help="the shared store")
    cli.add_argument("--no-kill", dest="kill", action="store_false", help="skip the kill scenario")
    section = Section("replicas", "16. Replicas behind nginx", "")
    return run_section(measure, section, cli.parse_args())


if __name__ == "__main__":
    sys.exit(main())
