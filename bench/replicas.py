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

The kill scenarios, each on three fresh replicas: the same agents with a 0.2 s sleep in each tool run (so runs are
in flight), a replica SIGKILLed a third of the way in. Stateless: r1, every request balanced. Stateful (no
``--stateless``, ``deploy/nginx`` pinning each MCP session to the replica named in its id): each agent also keeps
a code-mode session and counts on in it, and the replica killed is the one holding most of them. Checked: every
acknowledged tool run is stored exactly once (``run_count`` 1); every failure says the replica went away; no
process of the dead replica is left; restarted, it removes the gate directories and cgroups it left; every agent
is served after the kill (stateless: every request; stateful: an agent whose session died opens another, on a
survivor; nginx passes a request that found the dead replica refusing connections on, never one it had sent).
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
from tests.scaleout.harness import Cluster, Database, Replica, alive, cluster, descendants, held_directories

KINDS = ("tool_run", "cache_hit", "search", "skill")
MIX = ("tool_run", "cache_hit", "tool_run", "search", "skill")
SESSION_MIX = ("tool_run", "session", "cache_hit", "session", "search", "skill")
"""The stateful kill's mix: each agent keeps a code-mode session and counts on in it."""
SETTINGS = {"pool_size": "2", "monty_pool_size": "0"}
"""Per replica: two warm workers of the local runner (the default python runner), no Monty ones."""
SLOW = "import time\ntime.sleep(0.2)\n"
TICK = os.sysconf("SC_CLK_TCK")


def p50_p95(ops: list[Op], kind: str) -> str:
    values = [op.ms for op in ops if op.kind == kind and op.ok]
    if not values:
        return "–"
    return f"{median(values):.0f} / {percentile(values, 0.95):.0f}"


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


def busiest(running: Cluster, since: int) -> Replica:
    """The replica named by most MCP sessions in the balancer's log after its first ``since`` lines."""
    names = Counter(sid.partition(".")[0] for *_, sid in running.balancer.routes()[since:] if sid)
    top = names.most_common(1)[0][0] if names else running.replicas[0].name
    return next(r for r in running.replicas if r.name == top)


async def drive(
    running: Cluster, agents: Agents, k: int, seconds: float, at: float | None = None, *, stateful: bool = False
) -> dict[str, Any]:
    """``k`` agents for ``seconds``; with ``at``, a replica is SIGKILLed that many seconds in: r1, or with
    ``stateful`` the one holding most of the agents' sessions."""
    end = time.monotonic() + seconds
    facts: dict[str, Any] = {}
    since = len(running.balancer.routes())
    async with anyio.create_task_group() as tg:
        for agent in range(k):
            tg.start_soon(lambda a=agent: agents.run_agent(a, until=lambda: time.monotonic() >= end))
        if at is not None:
            await anyio.sleep(at)
            victim = busiest(running, since) if stateful else running.replicas[0]
            facts["victim"] = victim
            tree = descendants(victim.process.pid)
            facts["held"] = held_directories(victim.process.pid)
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
            await kill_scenario(args, section, Path(tmp) / "kill", database, stateful=False)
            await kill_scenario(args, section, Path(tmp) / "kill-stateful", database, stateful=True)
    section.notes.append(
        f"Per replica: CODE_MODE_POOL_SIZE={SETTINGS['pool_size']}, no Monty pool, no Pyodide pool, the hashing "
        "embedder. nginx, the replicas, their workers and the agents share this machine's cores with other "
        "work (the load average column): a level with more replicas has more processes, not more cores. CPU per "
        "op: this process (the agents: MCP clients), the replicas with their workers and downstream servers, "
        "nginx; summed over the rounds and divided by the acknowledged operations."
    )


async def kill_scenario(args: Any, section: Section, base: Path, database: Database, *, stateful: bool) -> None:
    mode = "stateful replicas, each agent with a code-mode session" if stateful else "`--stateless` replicas"
    with cluster(3, base, stateless=not stateful, database=database, settings=SETTINGS) as running:
        await warm(running)
        agents = Agents(running.url, mix=SESSION_MIX if stateful else MIX, tool_prefix=SLOW)
        load = os.getloadavg()[0]
        at = args.seconds / 3
        facts = await drive(running, agents, args.agents, args.seconds, at=at, stateful=stateful)
        killed_at: float = facts["killed_at"]
        victim: Replica = facts["victim"]
        name = victim.name
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
        integrity = store_integrity(store)
        after = [op for op in agents.ops if op.started > killed_at]
        after_ok = [op for op in after if op.ok]
        clear = [op for op in failed if op.error and any(g in op.error for g in GONE)]
        late_failures = [op for op in failed if op.started > killed_at]
        served = {op.agent for op in agents.ops if op.ok and op.started > killed_at}
        running.restart(victim)
        left_dirs = [p for p in facts["held"] if p.exists()]
        healthy = all(
            httpx2.get(f"http://127.0.0.1:{r.port}/healthz", timeout=5).status_code == 200 for r in running.replicas
        )
    table = section.table(
        f"Kill ({mode}): 3 replicas, {args.agents} agents for {args.seconds:g} s, {name} SIGKILLed {at:.1f} s in "
        f"(load average {load:.1f}).",
        ["check", "measured"],
    )
    rows = [
        ("operations acknowledged (of them tool runs)", f"{sum(op.ok for op in agents.ops)} ({len(acknowledged)})"),
        ("acknowledged tool runs stored exactly once", f"{once} of {len(acknowledged)}"),
        (f"failed operations (on {name})", str(len(failed))),
        ("… saying the replica went away", f"{len(clear)} of {len(failed)}"),
        ("… failed tool runs stored anyway (run ended, answer lost)", f"{orphans} of {len(failed_runs)}"),
        (
            "store",
            f"integrity {integrity['integrity']}, scripts {integrity.get('scripts', '?')}, "
            f"indexed {integrity.get('indexed', '?')}",
        ),
        (
            f"{name}'s processes (replica, workers, sandboxes, downstream server)",
            f"{len(facts['tree'])}, all gone {facts['gone_ms']:.0f} ms after the kill"
            if not facts["left"]
            else f"{len(facts['left'])} left",
        ),
        (f"{name}'s gate/workspace directories after its restart", f"{len(left_dirs)} of {len(facts['held'])} left"),
        ("operations started after the kill", f"{len(after_ok)} of {len(after)} acknowledged"),
        ("agents served after the kill", f"{len(served)} of {args.agents}"),
        (
            "throughput before / after the kill (ops/s)",
            f"{sum(1 for op in agents.ops if op.ok and op.started <= killed_at) / at:.1f} / "
            f"{sum(1 for op in agents.ops if op.ok and op.started > killed_at) / (args.seconds - at):.1f}",
        ),
        (f"every replica healthy after {name}'s restart", "yes" if healthy else "no"),
    ]
    if stateful:
        rows.append(
            ("code-mode sessions opened / lost with the replica", f"{agents.sessions_opened} / {agents.sessions_lost}")
        )
    table.rows.extend([name, value] for name, value in rows)
    errors = Counter((op.error or "")[:160] for op in failed)
    kind = "stateful" if stateful else "stateless"
    section.notes.extend(f"kill ({kind}): {count} × {error}" for error, count in errors.most_common(4))
    # Stateless: every request after the kill finds a survivor. Stateful: a session pinned to the dead replica
    # fails once more (its next request), and its agent opens a new one on a survivor.
    survived = len(served) == args.agents and (stateful or not late_failures)
    section.target(
        f"every acknowledged run stored exactly once ({kind})",
        f"{once} of {len(acknowledged)}",
        once == len(acknowledged),
    )
    section.target(
        f"runs on the killed replica fail saying so ({kind})",
        f"{len(clear)} of {len(failed)}",
        len(clear) == len(failed),
    )
    section.target(
        f"no process or directory left ({kind})",
        f"{len(facts['left'])} processes, {len(left_dirs)} directories",
        not facts["left"] and not left_dirs,
    )
    section.target(
        f"survivors keep serving ({kind})",
        f"{len(served)} of {args.agents} agents served after the kill, {len(late_failures)} failures after it; "
        f"healthy: {healthy}",
        survived and healthy,
    )
    if once != len(acknowledged) or facts["left"] or left_dirs or not healthy or not survived:
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
