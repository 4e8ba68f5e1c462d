"""Test hosts in network namespaces of the suite's own: a private address with a real HTTP server behind it.

``test_host()`` creates a namespace ``cmt-<pid>-<n>`` and a veth pair, the host end ``cmt<pid>h<n>`` in the
root namespace with ``10.233.X.Y/30`` and the peer inside with the next address, then starts this file as an
HTTP server inside (``ip netns exec``), on two ports (8080 and 8081 by default), and waits until it listens:

- ``GET /hello``: ``{"host": "<namespace>", "port": <port>}``;
- ``GET /bytes?n=N``: N bytes (``Content-Length: N``), streamed in 64 KiB chunks;
- ``POST /echo``: the request body back.

Every request is appended to a JSON-lines log before it is answered (``NetnsHost.requests``), so a test can
assert that the server never saw one. On exit the server is killed and the namespace and veth deleted, even
after a failure. The server also exits when its stdin closes (the process that started it died); what such
a run leaves behind (a namespace or veth whose pid is dead) is swept by the next ``test_host``.

The /30 blocks are taken from ``10.233.0.0/16``, starting at one derived from the pid and skipping any block
with an address in the root namespace, under a lock file: parallel runs do not clash.

Only the standard library here (the file is also the server's program, run with ``python -I``), and no
pytest: ``NetnsUnavailable`` says why this machine cannot have test hosts, ``conftest.py`` skips on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

PREFIX = "cmt"
RANGE = ipaddress.IPv4Network("10.233.0.0/16")
PORTS = (8080, 8081)
READY_TIMEOUT = 30.0
LOCK = Path("/run/cmt-netns.lock")

_NAMESPACE = re.compile(rf"^{PREFIX}-(\d+)-(\d+)$")
_LINK = re.compile(rf"^{PREFIX}(\d+)h(\d+)$")
_counter = 0
_live: set[str] = set()
"""Namespaces of this process that are in use (a leftover with this pid, from a reused pid, is not)."""


class NetnsUnavailable(Exception):
    """This machine cannot have test hosts (not Linux, not root, no ``ip``): the message says which."""


class NetnsError(Exception):
    """Making a test host failed on a machine that should manage it; the message has the command's output."""


# ----- the server, run inside the namespace -----------------------------------------------------


def _handler(name: str, port: int, log_path: str, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "cmt-test-host"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _record(self) -> None:
            entry = {
                "port": port,
                "method": self.command,
                "path": self.path,
                "peer": self.client_address[0],
                "host": self.headers.get("Host", ""),
            }
            line = json.dumps(entry) + "\n"
            with lock, open(log_path, "a", encoding="utf-8") as log:
                log.write(line)

        def _send(self, status: int, body: bytes, content_type: str = "application/octet-stream") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._record()
            url = urlsplit(self.path)
            if url.path == "/hello":
                body = json.dumps({"host": name, "port": port}).encode()
                self._send(200, body, "application/json")
            elif url.path == "/bytes":
                try:
                    n = int(parse_qs(url.query).get("n", ["0"])[0])
                except ValueError:
                    self._send(400, b"n must be a number\n", "text/plain")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(n))
                self.end_headers()
                chunk = b"x" * 65536
                with contextlib.suppress(OSError):  # a client (or a proxy's byte cap) may end it early
                    while n > 0:
                        self.wfile.write(chunk[: min(n, len(chunk))])
                        n -= len(chunk)
            else:
                self._send(404, b"not found\n", "text/plain")

        def do_POST(self) -> None:
            self._record()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if urlsplit(self.path).path == "/echo":
                self._send(200, body)
            else:
                self._send(404, b"not found\n", "text/plain")

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer is no news for a test host


def serve(argv: Sequence[str]) -> int:
    """``serve NAME LOG ADDRESS PORT...``: answer on every port, say ``ready``, exit when stdin closes."""
    name, log_path, address, *ports = argv
    lock = threading.Lock()
    servers = [_Server((address, int(port)), _handler(name, int(port), log_path, lock)) for port in ports]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()  # EOF: whoever started us is gone
    return 0


# ----- the host side ----------------------------------------------------------------------------


@dataclass
class NetnsHost:
    """A test host: a namespace with its own address and an HTTP server on ``ports``."""

    name: str
    """The namespace (also what ``/hello`` answers as ``host``)."""
    address: str
    """The server's address inside the namespace, e.g. ``10.233.7.2`` (RFC 1918: refused unless opened)."""
    gateway: str
    """The root namespace's end of the veth (the peer every request comes from)."""
    ports: tuple[int, ...]
    log_path: Path
    link: str = ""
    """The veth's name in the root namespace."""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return self.ports[0]

    def authority(self, port: int | None = None) -> str:
        """``address:port`` (the main port by default): a ``CONNECT`` target, or an ``ALLOW_PRIVATE`` entry."""
        return f"{self.address}:{self.port if port is None else port}"

    def url(self, path: str = "/hello", port: int | None = None) -> str:
        return f"http://{self.authority(port)}{path}"

    def requests(self, port: int | None = None) -> list[dict[str, Any]]:
        """Every request the server has seen (``port``, ``method``, ``path``, ``peer``, ``host``), oldest first;
        with ``port``, only those on that port."""
        try:
            text = self.log_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        entries = [json.loads(line) for line in text.splitlines() if line]
        return [e for e in entries if port is None or e["port"] == port]


def ip_binary() -> str | None:
    """``ip`` on PATH, or where iproute2 puts it (a non-root PATH may lack /usr/sbin)."""
    found = shutil.which("ip")
    return found or next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if Path(p).exists()), None)


def unavailable() -> str | None:
    """Why test hosts cannot be made here, or None."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux's ({sys.platform} here)"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (ip netns add)"
    if ip_binary() is None:
        return "no `ip` binary (iproute2) on this machine"
    return None


def _ip(*args: str, check: bool = True) -> str:
    binary = ip_binary()
    assert binary is not None
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise NetnsError(f"`ip {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(pid: int, namespace: str | None = None) -> bool:
    if pid == os.getpid():
        return namespace is not None and namespace not in _live
    return not _alive(pid)


@contextmanager
def _locked() -> Generator[None]:
    path = LOCK if LOCK.parent.is_dir() else Path(tempfile.gettempdir()) / LOCK.name
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_namespace(namespace: str) -> None:
    for pid in _ip("netns", "pids", namespace, check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", namespace, check=False)


def sweep() -> list[str]:
    """Remove what earlier runs that died left behind (namespaces and veths whose pid is dead); their names."""
    removed: list[str] = []
    for line in _ip("netns", "list").splitlines():
        namespace = line.split(" ")[0]
        match = _NAMESPACE.match(namespace)
        if match and _stale(int(match[1]), namespace):
            _remove_namespace(namespace)
            removed.append(namespace)
    for link in json.loads(_ip("-j", "link", "show") or "[]"):
        name = str(link.get("ifname", ""))
        match = _LINK.match(name)
        if match and _stale(int(match[1]), f"{PREFIX}-{match[1]}-{match[2]}"):
            _ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def _free_block() -> ipaddress.IPv4Network:
    """A /30 of ``RANGE`` with no address in the root namespace, searched from a pid-derived start."""
    used: set[ipaddress.IPv4Address] = set()
    for link in json.loads(_ip("-j", "-4", "addr", "show") or "[]"):
        for info in link.get("addr_info", []):
            with contextlib.suppress(KeyError, ValueError):
                used.add(ipaddress.IPv4Address(info["local"]))
    blocks = list(RANGE.subnets(new_prefix=30))
    start = (os.getpid() % 256) * 64
    for i in range(len(blocks)):
        block = blocks[(start + i) % len(blocks)]
        if not any(address in block for address in used):
            return block
    raise NetnsError(f"no free /30 left in {RANGE}")


def _wait_ready(process: subprocess.Popen[bytes], errors: Path) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise NetnsError(f"the test host's server did not start in {READY_TIMEOUT:.0f} s")
            chunk = os.read(process.stdout.fileno(), 64)
            if not chunk:
                text = errors.read_text(encoding="utf-8", errors="replace")
                raise NetnsError(f"the test host's server exited ({process.wait()}):\n{text}")
            line += chunk
    if line != b"ready\n":
        raise NetnsError(f"the test host's server said {line!r}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()


@contextmanager
def test_host(ports: Sequence[int] = PORTS, workdir: Path | None = None) -> Generator[NetnsHost]:
    """A test host in a fresh network namespace, removed on exit (see the module's docstring).

    ``workdir`` holds the request log and the server's stderr (a temporary directory by default).
    ``NetnsUnavailable`` where it cannot work at all; ``NetnsError`` when making it failed.
    """
    global _counter
    why = unavailable()
    if why is not None:
        raise NetnsUnavailable(why)
    pid, n = os.getpid(), _counter
    _counter += 1
    namespace, link = f"{PREFIX}-{pid}-{n}", f"{PREFIX}{pid}h{n}"
    with contextlib.ExitStack() as stack:
        folder = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"{namespace}-")))
        folder.mkdir(parents=True, exist_ok=True)
        with _locked():
            sweep()
            _live.add(namespace)
            stack.callback(_live.discard, namespace)
            block = _free_block()
            gateway, address = (str(a) for a in list(block.hosts())[:2])
            _ip("netns", "add", namespace)
            stack.callback(_remove_namespace, namespace)
            _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            stack.callback(_ip, "link", "del", link, check=False)  # at once: the namespace goes asynchronously
            _ip("addr", "add", f"{gateway}/30", "dev", link)
            _ip("link", "set", link, "up")
            _ip("-n", namespace, "addr", "add", f"{address}/30", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
        log_path = folder / f"{namespace}.requests.jsonl"
        log_path.touch()
        errors = folder / f"{namespace}.stderr"
        binary = ip_binary()
        assert binary is not None
        argv = [binary, "netns", "exec", namespace, sys.executable, "-I", str(Path(__file__).resolve())]
        argv += ["serve", namespace, str(log_path), address, *(str(p) for p in ports)]
        with errors.open("wb") as sink:
            process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sink, env={"PATH": os.defpath}
            )
        stack.callback(_stop, process)
        _wait_ready(process, errors)
        yield NetnsHost(namespace, address, gateway, tuple(ports), log_path, link, process)


test_host.__test__ = False  # pyright: ignore[reportFunctionMemberAccess]  (not a test, whatever its name)


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    sys.exit(serve(sys.argv[2:]))
