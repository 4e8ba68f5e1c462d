#!/usr/bin/env python3
"""10. Egress proxy: what a run's traffic pays for going through ``EgressProxy`` instead of straight out.

    .venv/bin/python bench/egress.py [--reps 5] [--mib 10] [--requests 100] [--runners cpython deno]

The upstream is a test host in a network namespace of its own (``tests/egress/netns.py``: a veth, a private
address opened with ``CODE_MODE_NETWORK_ALLOW_PRIVATE``, a threaded stdlib HTTP server), so the traffic
crosses a real interface and the proxy makes real decisions; the machine needs root and ``ip``. Two
workloads, side by side in each repetition (the paths' order rotates):

- a download of ``--mib`` MiB (``GET /bytes?n=...``, read in 64 KiB chunks);
- ``--requests`` small sequential requests (``GET /hello``), each on a new connection: the proxy closes
  every absolute-form request's connection, so that is what a client gets through it, and the direct path
  does the same so the two compare like for like.

Paths: (1) direct from the host to the test host; (2) through the proxy, which runs in a process of its own
(as it will in the server, apart from the sandboxed client) on a loopback TCP listener, both as a client
sends plain HTTP (absolute form: ``GET http://host/...``) and as it sends HTTPS (``CONNECT`` and the request
inside the tunnel; no TLS here, so only the proxy's cost is measured). The client is http.client in this
process. The proxy's own CPU time (its threads' time on a CPU, from /proc schedstat) is given per workload.
A control: a bare anyio forwarder (no request parsing, no policy) in the same place as the proxy. (3) from a
sandboxed run through the proxy (``sandboxed_through_proxy``): the same workload made by a script in a
cpython and a deno run of an engine in this process whose policy opens the test host, timed by the script.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from common import Section, engine, median, ms, parser, quiesce, quiet_logs, ratio, run_section, size, wait_warm
from tests.egress.netns import NetnsHost, test_host, unavailable

from mcp_code_mode.runners.deno import find_deno

CHUNK = 65536
PROXY_READY_TIMEOUT = 30.0


# ----- the proxy, in a process of its own --------------------------------------------------------


async def serve_proxy(allow_private: str) -> None:
    """``--serve-proxy ALLOW_PRIVATE``: print the port, serve until stdin closes."""
    from anyio.abc import SocketAttribute

    from mcp_code_mode.egress import EgressPolicy
    from mcp_code_mode.egress.proxy import EgressLog, EgressProxy

    proxy = EgressProxy(EgressPolicy.from_settings(allow_private=allow_private), EgressLog())
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        print(listener.extra(SocketAttribute.local_port), flush=True)
        await anyio.to_thread.run_sync(sys.stdin.buffer.read)
        tg.cancel_scope.cancel()


async def serve_splice(authority: str) -> None:
    """``--serve-splice HOST:PORT``: the control, a bare anyio forwarder with no parsing and no policy: every
    connection is spliced to HOST:PORT as the proxy splices a tunnel (print the port, serve until stdin closes)."""
    from anyio.abc import ByteStream, SocketAttribute

    host, port = authority.rsplit(":", 1)

    async def pump(source: ByteStream, sink: ByteStream) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            while True:
                await sink.send(await source.receive())
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await sink.send_eof()

    async def handle(client: ByteStream) -> None:
        async with client, await anyio.connect_tcp(host, int(port)) as upstream, anyio.create_task_group() as tg:
            tg.start_soon(pump, client, upstream)
            await pump(upstream, client)
            tg.cancel_scope.cancel()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        print(listener.extra(SocketAttribute.local_port), flush=True)
        await anyio.to_thread.run_sync(sys.stdin.buffer.read)
        tg.cancel_scope.cancel()


@dataclass
class ProxyProcess:
    process: subprocess.Popen[bytes]
    port: int

    def cpu_seconds(self) -> float:
        """CPU time of all the process's threads so far, in nanoseconds' resolution (schedstat's first field;
        /proc/<pid>/stat counts in 10 ms ticks, too coarse for a 10 MB transfer)."""
        total = 0
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                total += int((task / "schedstat").read_text(encoding="utf-8").split()[0])
        return total / 1e9

    def stop(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process.stdout.close()


def start_proxy(host: NetnsHost, mode: str = "--serve-proxy") -> ProxyProcess:
    argv = [sys.executable, str(Path(__file__).resolve()), mode, host.authority()]
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdout is not None
    line = process.stdout.readline()  # the proxy prints its port once it listens (or exits, with EOF)
    if not line.strip().isdigit():
        process.kill()
        raise SystemExit(f"the proxy process did not start: {line!r}, exit status {process.wait()}")
    return ProxyProcess(process, int(line))


# ----- clients ----------------------------------------------------------------------------------


def connection(path: str, host: NetnsHost, proxy_port: int) -> tuple[http.client.HTTPConnection, str]:
    """A new connection for one of the paths, and the request target to send on it."""
    if path == "direct":
        return http.client.HTTPConnection(host.address, host.port, timeout=30), ""
    if path == CONTROL:
        return http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30), ""
    conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=30)
    if path == "proxy, CONNECT tunnel":
        conn.set_tunnel(host.address, host.port)
        return conn, ""
    return conn, f"http://{host.authority()}"  # absolute form, as a client with http_proxy sends it


Sink = Callable[[http.client.HTTPResponse], int]


def get(path: str, host: NetnsHost, proxy_port: int, target: str, sink: Sink) -> int:
    conn, prefix = connection(path, host, proxy_port)
    try:
        conn.request("GET", prefix + target, headers={"Host": host.authority()})
        response = conn.getresponse()
        if response.status != 200:
            raise SystemExit(f"{path}: GET {target} answered {response.status} {response.read()[:300]!r}")
        return sink(response)
    finally:
        conn.close()


def drain(response: http.client.HTTPResponse) -> int:
    total = 0
    while chunk := response.read(CHUNK):
        total += len(chunk)
    return total


def download(path: str, host: NetnsHost, proxy_port: int, n: int) -> None:
    received = get(path, host, proxy_port, f"/bytes?n={n}", drain)
    if received != n:
        raise SystemExit(f"{path}: the download brought {received} of {n} bytes")


def small_requests(path: str, host: NetnsHost, proxy_port: int, count: int) -> None:
    for _ in range(count):
        answer = get(path, host, proxy_port, "/hello", lambda r: len(r.read()))
        if not answer:
            raise SystemExit(f"{path}: an empty answer to /hello")


PY_DOWNLOAD = """
import time, urllib.request
started = time.perf_counter()
received = 0
with urllib.request.urlopen({url!r}, timeout=60) as response:
    chunk = response.read(65536)
    while chunk:
        received += len(chunk)
        chunk = response.read(65536)
print(received, (time.perf_counter() - started) * 1000)
"""
PY_SMALL = """
import time, urllib.request
started = time.perf_counter()
answered = 0
for _ in range({count}):
    with urllib.request.urlopen({url!r}, timeout=60) as response:
        answered += bool(response.read())
print(answered, (time.perf_counter() - started) * 1000)
"""
JS_DOWNLOAD = """
const started = performance.now();
const response = await fetch({url!r});
let received = 0;
for await (const chunk of response.body) received += chunk.length;
console.log(received, performance.now() - started);
"""
JS_SMALL = """
const started = performance.now();
let answered = 0;
for (let i = 0; i < {count}; i++) answered += (await (await fetch({url!r})).text()).length > 0 ? 1 : 0;
console.log(answered, performance.now() - started);
"""
SANDBOXED = {"sandboxed run (cpython), via the proxy": "cpython", "sandboxed run (deno), via the proxy": "deno"}
"""(3): the workload made by a script in a sandboxed run: the sandbox's own loopback, ``cm_egress``'s
forwarder to the Unix socket, the engine's ``EgressProxy`` (in this process), the test host."""


async def sandboxed_through_proxy(cm: Any, runner: str, host: NetnsHost, workload: str, amount: int) -> float:
    """(3) FROM A SANDBOXED RUN THROUGH THE PROXY: milliseconds of the workload as the script itself times it
    (a ``"download"`` of ``amount`` bytes, or ``"small"``: ``amount`` requests to ``/hello``), so the run's own
    start and answer are left out. The script uses its HTTP client as is: the run's environment names the
    proxy (``HTTP_PROXY``)."""
    js = runner == "deno"
    if workload == "download":
        template, url, expected = (JS_DOWNLOAD if js else PY_DOWNLOAD), host.url(f"/bytes?n={amount}"), amount
    else:
        template, url, expected = (JS_SMALL if js else PY_SMALL), host.url("/hello"), amount
    code = template.format(url=url, count=amount)
    await wait_warm(cm, runner)
    await quiesce()
    result = await cm.execute(code, "javascript" if js else "python", runner=runner, allow_networking=True, cache="off")
    fields = result.output.split() if result.success else []
    if len(fields) != 2 or int(fields[0]) != expected:
        raise SystemExit(f"{runner}: the {workload} script failed: {result.error} {result.output[:300]!r}")
    return float(fields[1])


# ----- the benchmark ----------------------------------------------------------------------------

CONTROL = "control: a bare anyio splice"
PATHS = ["direct", "proxy, absolute form", "proxy, CONNECT tunnel", CONTROL]
"""(1) and (2), from this process (and the control)."""


async def timed_call(server: ProxyProcess | None, action: Callable[[], None]) -> tuple[float, float]:
    """(milliseconds, CPU milliseconds of the process in between) of one blocking workload, in a worker thread."""
    await quiesce()
    cpu = server.cpu_seconds() if server else 0.0
    started = time.perf_counter()
    await anyio.to_thread.run_sync(action)
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, ((server.cpu_seconds() - cpu) * 1000 if server else 0.0)


async def measure(args: argparse.Namespace, section: Section) -> None:
    why = unavailable()
    if why is not None:
        raise SystemExit(f"no test host in a network namespace: {why}")
    n = args.mib * 1024 * 1024
    count = args.requests
    sandboxed = {label: r for label, r in SANDBOXED.items() if r in args.runners and (r != "deno" or find_deno())}
    paths = PATHS + list(sandboxed)
    times: dict[str, dict[str, list[float]]] = {w: {p: [] for p in paths} for w in ("download", "small")}
    cpu: dict[str, dict[str, list[float]]] = {w: {p: [] for p in PATHS} for w in ("download", "small")}
    with test_host(ports=(8080,)) as host, tempfile.TemporaryDirectory(prefix="bench-egress-") as tmp, quiet_logs():
        cm = engine(
            {},
            Path(tmp),
            network_allow_private=host.authority(),
            pyodide_pool_size=0,
            cache_embedder="none",
        )
        proxy = await anyio.to_thread.run_sync(start_proxy, host)
        splice = await anyio.to_thread.run_sync(start_proxy, host, "--serve-splice")
        between = {"direct": None, CONTROL: splice} | dict.fromkeys(PATHS[1:3], proxy)

        def port(path: str) -> int:
            server = between[path]
            return server.port if server else 0

        async def once(path: str, workload: str) -> None:
            if path in sandboxed:
                amount = n if workload == "download" else count
                times[workload][path].append(await sandboxed_through_proxy(cm, sandboxed[path], host, workload, amount))
                return
            if workload == "download":
                work = functools.partial(download, path, host, port(path), n)
            else:
                work = functools.partial(small_requests, path, host, port(path), count)
            elapsed, used = await timed_call(between[path], work)
            times[workload][path].append(elapsed)
            cpu[workload][path].append(used)

        try:
            async with cm:
                for path in PATHS:  # unmeasured: connections, the server's threads, the proxy's imports
                    await anyio.to_thread.run_sync(download, path, host, port(path), n)
                    await anyio.to_thread.run_sync(small_requests, path, host, port(path), 10)
                for runner in sandboxed.values():
                    await sandboxed_through_proxy(cm, runner, host, "download", n)
                    await sandboxed_through_proxy(cm, runner, host, "small", 10)
                for rep in range(args.reps):
                    order = paths[rep % len(paths) :] + paths[: rep % len(paths)]
                    for workload in ("download", "small"):
                        for path in order:
                            await once(path, workload)
        finally:
            await anyio.to_thread.run_sync(proxy.stop)
            await anyio.to_thread.run_sync(splice.stop)
        requests_seen = len(host.requests())

    table = section.table(
        f"A {size(n)} download and {count} small sequential requests (each on a new connection) from the host "
        f"to a test host in a network namespace; medians of {args.reps} interleaved repetitions.",
        [
            "path",
            f"{size(n)} download",
            "throughput",
            "ratio",
            "CPU in between",
            f"{count} small requests",
            "per request",
            "ratio",
            "CPU in between, per request",
        ],
    )
    direct_download, direct_small = median(times["download"]["direct"]), median(times["small"]["direct"])
    for path in paths:
        d, s = median(times["download"][path]), median(times["small"][path])
        proxied = path in PATHS[1:]
        table.rows.append(
            [
                path,
                ms(d),
                f"{n / 1024 / 1024 / (d / 1000):,.0f} MiB/s",
                ratio(d / direct_download),
                ms(median(cpu["download"][path]), 0) if proxied else "",
                ms(s),
                ms(s / count, 2),
                ratio(s / direct_small),
                ms(median(cpu["small"][path]) / count, 2) if proxied else "",
            ]
        )
    spreads = {
        path: ", ".join(f"{x:,.0f}" for x in times["download"][path])
        + " / "
        + ", ".join(f"{x:,.0f}" for x in times["small"][path])
        for path in paths
    }
    section.notes.append(
        "Every repetition, in ms (download / small requests): "
        + "; ".join(f"{path}: {spread}" for path, spread in spreads.items())
        + "."
    )
    section.notes.append(
        "Sandboxed runs (3): the script's own timing of the workload (urllib for cpython, fetch for deno, each "
        "with the proxy its run's environment names), so the run's start and answer are left out; the path "
        "is the sandbox's loopback, the run's forwarder (cm_egress) to the Unix socket bound into the sandbox, "
        "and the engine's EgressProxy, in this benchmark's process."
    )
    section.notes.append(
        "CPU in between: the time the proxy's (or the control's) process spent on a CPU (its threads' "
        "/proc schedstat) over the measured workload. The control forwards each connection to the test host "
        "with anyio as the proxy splices a tunnel, without reading a request or asking a policy: what asyncio "
        "and anyio cost by themselves. "
        "The proxy is `EgressProxy` in a process of its own on a loopback TCP listener (anyio, asyncio backend), "
        "its policy opening the test host with CODE_MODE_NETWORK_ALLOW_PRIVATE; the test host's server is "
        "Python's ThreadingHTTPServer writing 64 KiB at a time. "
        f"The test host answered {requests_seen} requests in all."
    )


def main(argv: list[str] | None = None) -> int:
    cli = parser(__doc__)
    cli.add_argument("--reps", type=int, default=5)
    cli.add_argument("--mib", type=int, default=10, help="size of the download in MiB")
    cli.add_argument("--requests", type=int, default=100, help="small requests per measurement")
    cli.add_argument("--runners", nargs="*", default=list(SANDBOXED.values()), help="sandboxed runs (3) to measure")
    cli.add_argument("--serve-proxy", metavar="ALLOW_PRIVATE", default=None, help=argparse.SUPPRESS)
    cli.add_argument("--serve-splice", metavar="HOST:PORT", default=None, help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    if args.serve_proxy is not None:
        anyio.run(serve_proxy, args.serve_proxy)
        return 0
    if args.serve_splice is not None:
        anyio.run(serve_splice, args.serve_splice)
        return 0
    section = Section("egress", "10. Egress proxy", "")
    return run_section(measure, section, args)


if __name__ == "__main__":
    sys.exit(main())
