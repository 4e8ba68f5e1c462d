"""Three real replicas behind a real nginx (the repo's configuration), one shared PostgreSQL: sessions keep their
replica while other traffic is balanced; a replica SIGKILLed mid-run loses only its own runs, none stored twice or
half, leaves no process or directory behind once it restarts, and the others keep serving.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest

from .agents import GONE, Agents, connect, save_skill, store_integrity, stored_runs
from .harness import NGINX_DIR, Cluster, Replica, alive, cluster, free_port, held_directories, nginx_binary

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SETTINGS = {"pool_size": "1", "monty_pool_size": "0"}
"""Few warm workers: three replicas share two cores with the rest of the suite."""
AGENTS = 4
SLOW_RUN = "import time\ntime.sleep(0.3)\n"
"""Before each tool run of the kill test: runs are in flight when the replica dies."""


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # One PostgreSQL (pgserver) shared by the three, as replicas on several hosts would share it.
    with cluster(
        3, tmp_path_factory.mktemp("replicas"), stateless=False, settings=SETTINGS, database="postgresql"
    ) as running:
        yield running


def test_the_shipped_nginx_conf_passes_nginx_t(tmp_path: Path) -> None:
    for name in ("nginx.conf", "code-mode.conf", "code-mode-proxy.conf"):
        shutil.copy(NGINX_DIR / name, tmp_path / name)
    conf = tmp_path / "nginx.conf"
    text = re.sub(r"replica-\d:8000", f"127.0.0.1:{free_port()}", conf.read_text(encoding="utf-8"))
    conf.write_text(text, encoding="utf-8")
    (tmp_path / "logs").mkdir()
    argv = [str(nginx_binary()), "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "logs/error.log")]
    checked = subprocess.run(
        [*argv, "-g", f"pid {tmp_path}/nginx.pid;"], capture_output=True, text=True, timeout=30, check=False
    )
    assert checked.returncode == 0, checked.stderr
    # A request that reached a replica is never sent to another (a run acknowledged once is stored once).
    proxy = [
        line.split("#")[0] for line in (NGINX_DIR / "code-mode-proxy.conf").read_text(encoding="utf-8").splitlines()
    ]
    assert "proxy_next_upstream error timeout;" in [line.strip() for line in proxy]
    assert not any("non_idempotent" in line for line in proxy)


async def test_a_session_keeps_its_replica_through_nginx_while_other_sessions_are_balanced(three: Cluster) -> None:
    async def other(i: int) -> None:
        async with connect(three.url) as client:
            for _ in range(2):
                result = await client.call_tool("execute_code", {"language": "python", "code": f"print({i})"})
                assert result.structured_content is not None and result.structured_content["success"]

    with anyio.fail_after(60):
        async with connect(three.url) as pinned:
            opened = await pinned.call_tool("execute_code", {"language": "python", "code": "n = 0", "session": "new"})
            assert opened.structured_content is not None, opened
            session = opened.structured_content["sessionId"]
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(other, i)
                for k in range(1, 6):
                    code = {"language": "python", "code": "n += 1\nprint(n)", "session": session}
                    ran = await pinned.call_tool("execute_code", code)
                    assert ran.structured_content is not None and ran.structured_content["output"] == f"{k}\n", ran
    ports = {f"127.0.0.1:{r.port}": r.name for r in three.replicas}
    by_session: dict[str, set[str]] = {}
    for _, _, upstream, session_id in three.balancer.routes():
        if session_id and upstream in ports:
            by_session.setdefault(session_id, set()).add(ports[upstream])
    assert len(by_session) >= 7
    for session_id, replicas in by_session.items():  # every request of a session went to the replica it names
        assert replicas == {session_id.partition(".")[0]}, (session_id, replicas)
    assert len({r for rs in by_session.values() for r in rs}) >= 2  # and the sessions were spread


def memory_cgroups(pid: int) -> list[Path]:
    for line in Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8").splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return list((Path("/sys/fs/cgroup/memory") / path.lstrip("/")).glob(f"mcp-code-mode-{pid}-*"))
    return []


async def test_a_replica_killed_mid_run_loses_only_its_runs_and_leaves_nothing_once_it_restarts(
    three: Cluster,
) -> None:
    await save_skill(three.url)
    agents = Agents(three.url, tool_prefix=SLOW_RUN)
    seen = len(three.balancer.routes())
    victims: list[Replica] = []
    killed_at: list[float] = []
    tree: set[int] = set()
    held: set[Path] = set()
    cgroups: list[Path] = []

    def enough() -> bool:  # each agent did an operation after the kill
        return bool(killed_at) and {op.agent for op in agents.ops if op.ok and op.started > killed_at[0]} == set(
            range(AGENTS)
        )

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for agent in range(AGENTS):
                tg.start_soon(lambda a=agent: agents.run_agent(a, until=enough))
            while len(agents.acknowledged()) < AGENTS:
                await anyio.sleep(0.05)
            # The victim: the replica holding most of the agents' sessions (so some of their runs are on it).
            names = Counter(sid.partition(".")[0] for *_, sid in three.balancer.routes()[seen:] if sid)
            victim = next(r for r in three.replicas if r.name == names.most_common(1)[0][0])
            victims.append(victim)
            held |= held_directories(victim.process.pid)
            cgroups += memory_cgroups(victim.process.pid)
            tree |= victim.kill()
            killed_at.append(time.monotonic())
    # No process of the victim is left: its workers, their sandboxes, its downstream servers.
    with anyio.fail_after(10):
        while any(alive(pid) for pid in tree):
            await anyio.sleep(0.05)
    assert tree and held  # it had workers, and gate directories on the host
    # Runs in flight on it failed saying the replica went away; nothing else failed.
    failed = agents.failed()
    assert failed, "no run was in flight on the killed replica"
    assert all(op.error is not None and any(g in op.error for g in GONE) for op in failed), [op.error for op in failed]
    # Every acknowledged run is stored exactly once; the store is whole.
    acknowledged = agents.acknowledged()
    assert len(acknowledged) >= AGENTS
    stored = stored_runs(three.store, [op.nonce for op in acknowledged if op.nonce])
    assert all(len(rows) == 1 and rows[0][1] == 1 for rows in stored.values()), stored
    assert {op.hash for op in acknowledged} == {rows[0][0] for rows in stored.values()}
    integrity = store_integrity(three.store)
    assert integrity["integrity"] == "ok" and integrity["scripts"] == integrity["indexed"], integrity
    # The survivors kept serving; the victim, restarted, sweeps what it left and serves again.
    again = three.restart(victims[0])
    assert not [p for p in held if p.exists()], held
    assert not [p for p in cgroups if p.exists()], cgroups
    assert not list(three.workspace_dir.glob("mcp-code-mode-*"))
    for replica in three.replicas:
        assert httpx2.get(f"http://127.0.0.1:{replica.port}/healthz", timeout=5).status_code == 200
    async with connect(again.url) as client:
        result = await client.call_tool("execute_code", {"language": "python", "code": "print(fixture.add(a=1, b=1))"})
        assert result.structured_content is not None and result.structured_content["output"] == "{'result': 2}\n"
