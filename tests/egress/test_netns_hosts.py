"""The egress proxy with real traffic to test hosts in network namespaces (``netns.py``): private addresses
that really answer, so every refusal is the proxy's own and not a dead address. The proxy serves on a TCP
listener on the host; the clients are the standard library's (urllib, http.client) configured with it as
their proxy, as a script's would be. Each security test asserts the refusal (403 and the reason naming the
host and the rule) and that the server behind it saw nothing."""

from __future__ import annotations

import http.client
import ipaddress
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from mcp_code_mode.egress import EgressPolicy, classify
from mcp_code_mode.egress.proxy import EgressLog, EgressProxy

from . import netns
from .netns import NetnsHost

pytestmark = pytest.mark.anyio

T = TypeVar("T")
FORMS = ["absolute", "connect"]
"""``GET http://host/...`` to the proxy (plain HTTP), or ``CONNECT host:port`` and the request in the tunnel."""


@asynccontextmanager
async def proxy_on_tcp(proxy: EgressProxy) -> AsyncGenerator[int]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        yield port
        tg.cancel_scope.cancel()


@asynccontextmanager
async def loopback_server() -> AsyncGenerator[tuple[int, list[str]]]:
    """A server on 127.0.0.1 that records every connection it accepts (and answers 200)."""
    accepted: list[str] = []

    async def serve(stream: SocketStream) -> None:
        async with stream:
            accepted.append(str(stream.extra(SocketAttribute.remote_address)))
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nhi\n")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield port, accepted
        tg.cancel_scope.cancel()


async def in_thread(call: Callable[[], T]) -> T:
    with anyio.fail_after(30):
        return await anyio.to_thread.run_sync(call)


def fetch(proxy_port: int, form: str, host: str, port: int, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """(status, body) of one request through the proxy, made as a client library makes it.

    ``absolute``: urllib with ``http_proxy`` set. ``connect``: http.client's ``set_tunnel``, whose refusal is
    an ``OSError`` naming the status (status 0 with that message as the body).
    """
    if form == "absolute":
        proxies = urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy_port}"})
        opener = urllib.request.build_opener(proxies)
        request = urllib.request.Request(f"http://{host}:{port}{path}", data=body)
        try:
            with opener.open(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as refused:
            with refused:
                return refused.code, refused.read()
    connection = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
    connection.set_tunnel(host, port)
    try:
        connection.request("POST" if body is not None else "GET", path, body=body)
        response = connection.getresponse()
        return response.status, response.read()
    except OSError as refused:
        return 0, str(refused).encode()
    finally:
        connection.close()


async def raw_connect(proxy_port: int, target: str) -> bytes:
    """The proxy's whole answer to ``CONNECT target`` (a refusal's body names the host and the rule)."""
    with anyio.fail_after(10):
        stream = await anyio.connect_tcp("127.0.0.1", proxy_port)
        async with stream:
            await stream.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            out = b""
            try:
                while True:
                    out += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
    return out


def opening(host: NetnsHost, **settings: str) -> EgressPolicy:
    """The policy an operator writes to let runs reach ``host``'s main port and nothing else private."""
    return EgressPolicy.from_settings(allow_private=host.authority(), **settings)


def assert_refused(status: int, body: bytes, form: str, host: str, port: int, rule: str) -> None:
    if form == "connect":  # http.client keeps only the status line of a refused tunnel
        assert status == 0 and b"Tunnel connection failed: 403" in body, body
        return
    assert status == 403, (status, body)
    assert f"connection to {host}:{port} refused".encode() in body and rule.encode() in body, body


# ----- the hosts themselves ---------------------------------------------------------------------


async def test_the_test_hosts_answer_directly_on_both_ports(netns_host: NetnsHost, netns_other_host: NetnsHost) -> None:
    for host in (netns_host, netns_other_host):
        for port in host.ports:

            def hello(url: str = host.url("/hello", port)) -> bytes:
                with urllib.request.urlopen(url, timeout=10) as response:
                    return response.read()

            assert json.loads(await in_thread(hello)) == {"host": host.name, "port": port}
            assert host.requests(port)[-1]["path"] == "/hello"
    assert netns_host.address != netns_other_host.address
    assert classify(ipaddress.ip_address(netns_host.address)) == "a private network (RFC 1918)"


async def test_a_test_host_and_its_veth_are_gone_after_its_block(tmp_path_factory: pytest.TempPathFactory) -> None:
    if netns.unavailable():
        pytest.skip(str(netns.unavailable()))
    with netns.test_host(ports=(8080,), workdir=tmp_path_factory.mktemp("gone")) as host:
        assert host.name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        server = host.process
    assert server is not None and server.poll() is not None
    assert host.name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert host.link not in links


# ----- what is allowed --------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
async def test_the_opened_private_host_is_reached_through_the_proxy(netns_host: NetnsHost, form: str) -> None:
    log = EgressLog()
    seen = len(netns_host.requests())
    async with proxy_on_tcp(EgressProxy(opening(netns_host), log)) as pport:
        status, body = await in_thread(lambda: fetch(pport, form, netns_host.address, 8080, "/hello"))
    assert status == 200 and json.loads(body) == {"host": netns_host.name, "port": 8080}
    (request,) = netns_host.requests()[seen:]
    assert request["path"] == "/hello" and request["peer"] == netns_host.gateway
    assert log.summary()["hosts"] == [netns_host.authority()] and log.summary()["refused"] == []


@pytest.mark.parametrize("form", FORMS)
async def test_a_request_body_goes_through_and_comes_back(netns_host: NetnsHost, form: str) -> None:
    body = bytes(range(256)) * 400
    log = EgressLog()
    async with proxy_on_tcp(EgressProxy(opening(netns_host), log)) as pport:
        status, echoed = await in_thread(lambda: fetch(pport, form, netns_host.address, 8080, "/echo", body))
    assert status == 200 and echoed == body
    (record,) = log.connections
    assert record.bytes_out > len(body) and record.bytes_in > len(body)


# ----- what is refused --------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
async def test_another_host_in_the_same_private_range_is_refused_naming_it_and_the_rule(
    netns_host: NetnsHost, netns_other_host: NetnsHost, form: str
) -> None:
    other = netns_other_host
    seen = len(other.requests())
    log = EgressLog()
    async with proxy_on_tcp(EgressProxy(opening(netns_host), log)) as pport:
        status, body = await in_thread(lambda: fetch(pport, form, other.address, 8080, "/hello"))
        answer = await raw_connect(pport, other.authority())
    rule = f"{other.address} is a private network (RFC 1918); open it with CODE_MODE_NETWORK_ALLOW_PRIVATE"
    assert_refused(status, body, form, other.address, 8080, rule)
    assert answer.startswith(b"HTTP/1.1 403 ") and rule.encode() in answer
    assert len(other.requests()) == seen  # not opened, not reached
    assert all(not c.allowed and c.reason.startswith(other.address) for c in log.connections)
    assert log.summary()["hosts"] == []


async def test_connect_to_the_opened_hosts_other_port_is_refused_though_it_is_open(netns_host: NetnsHost) -> None:
    other_port = netns_host.ports[1]
    seen = len(netns_host.requests(other_port))
    log = EgressLog()
    async with proxy_on_tcp(EgressProxy(opening(netns_host), log)) as pport:
        status, body = await in_thread(lambda: fetch(pport, "connect", netns_host.address, other_port, "/hello"))
        answer = await raw_connect(pport, netns_host.authority(other_port))
        plain, reason = await in_thread(lambda: fetch(pport, "absolute", netns_host.address, other_port, "/hello"))
    rule = f"CODE_MODE_NETWORK_ALLOW_PRIVATE={netns_host.authority(other_port)}"
    assert_refused(status, body, "connect", netns_host.address, other_port, rule)
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert f"connection to {netns_host.authority(other_port)} refused".encode() in answer and rule.encode() in answer
    assert_refused(plain, reason, "absolute", netns_host.address, other_port, rule)
    assert len(netns_host.requests(other_port)) == seen
    assert [c.allowed for c in log.connections] == [False, False, False]


@pytest.mark.parametrize("form", FORMS)
async def test_loopback_is_refused_though_a_server_listens_there(netns_host: NetnsHost, form: str) -> None:
    async with loopback_server() as (port, accepted):
        async with proxy_on_tcp(EgressProxy(opening(netns_host))) as pport:
            status, body = await in_thread(lambda: fetch(pport, form, "127.0.0.1", port, "/"))
            answer = await raw_connect(pport, f"127.0.0.1:{port}")

            def control() -> bytes:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
                    return response.read()

            assert await in_thread(control) == b"hi\n"  # it does answer, directly
    assert_refused(status, body, form, "127.0.0.1", port, "127.0.0.1 is loopback")
    assert answer.startswith(b"HTTP/1.1 403 ") and b"127.0.0.1 is loopback" in answer
    assert len(accepted) == 1  # the control's connection only


@pytest.mark.parametrize("allow", ["", "localhost"])
@pytest.mark.parametrize("form", FORMS)
async def test_the_name_localhost_is_refused_even_on_the_allow_list(
    netns_host: NetnsHost, form: str, allow: str
) -> None:
    async with loopback_server() as (port, accepted):
        log = EgressLog()
        async with proxy_on_tcp(EgressProxy(opening(netns_host, allow=allow), log)) as pport:
            status, body = await in_thread(lambda: fetch(pport, form, "localhost", port, "/"))
            answer = await raw_connect(pport, f"localhost:{port}")
    assert_refused(status, body, form, "localhost", port, "is loopback; open it with")
    assert answer.startswith(b"HTTP/1.1 403 ") and f"connection to localhost:{port}".encode() in answer
    assert accepted == []
    assert [c.host for c in log.connections] == ["localhost", "localhost"]
    assert all(not c.allowed and "loopback" in c.reason for c in log.connections)


# ----- the byte cap -----------------------------------------------------------------------------


def download(proxy_port: int, form: str, host: NetnsHost, n: int) -> int:
    """Bytes of ``/bytes?n=N`` received before the connection ended (a cut-short body is not an error here)."""
    path = f"/bytes?n={n}"
    connection: http.client.HTTPConnection | None = None
    if form == "absolute":
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy_port}"}))
        response = opener.open(host.url(path), timeout=10)
    else:
        connection = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=10)
        connection.set_tunnel(host.address, host.port)
        connection.request("GET", path)
        response = connection.getresponse()
    try:
        assert response.status == 200
        return len(response.read())
    except http.client.IncompleteRead as cut:
        return len(cut.partial)
    finally:
        response.close()
        if connection is not None:
            connection.close()


@pytest.mark.parametrize("form", FORMS)
async def test_the_byte_cap_ends_a_download_early_and_the_log_counts_it(netns_host: NetnsHost, form: str) -> None:
    cap, size = 1_000_000, 10_000_000
    log = EgressLog(max_bytes=cap)
    async with proxy_on_tcp(EgressProxy(opening(netns_host), log)) as pport:
        received = await in_thread(lambda: download(pport, form, netns_host, size))
    assert 0 < received <= log.connections[0].bytes_in < size // 2
    assert cap < log.bytes_total <= cap + 65536  # it stops at the first chunk past the cap
    summary = log.summary()
    assert summary["bytesIn"] == log.connections[0].bytes_in and log.connections[0].allowed
    assert isinstance(summary["bytesIn"], int) and cap - 65536 < summary["bytesIn"] < size
    assert summary["limit"] == log.limit and log.limit is not None and "CODE_MODE_NETWORK_MAX_MB" in log.limit
    assert netns_host.requests()[-1]["path"] == f"/bytes?n={size}"


async def test_after_the_byte_cap_a_new_connection_is_refused_naming_the_cap(netns_host: NetnsHost) -> None:
    log = EgressLog(max_bytes=200_000)
    async with proxy_on_tcp(EgressProxy(opening(netns_host), log)) as pport:
        await in_thread(lambda: download(pport, "absolute", netns_host, 1_000_000))
        seen = len(netns_host.requests())
        status, body = await in_thread(lambda: fetch(pport, "absolute", netns_host.address, 8080, "/hello"))
    assert_refused(status, body, "absolute", netns_host.address, 8080, "CODE_MODE_NETWORK_MAX_MB")
    assert len(netns_host.requests()) == seen


async def test_the_connection_cap_refuses_the_next_connection_naming_the_setting(netns_host: NetnsHost) -> None:
    log = EgressLog(max_connections=2)
    seen = len(netns_host.requests())
    async with proxy_on_tcp(EgressProxy(opening(netns_host), log)) as pport:
        answers = [await in_thread(lambda f=f: fetch(pport, f, netns_host.address, 8080, "/hello")) for f in FORMS]
        status, body = await in_thread(lambda: fetch(pport, "absolute", netns_host.address, 8080, "/hello"))
    assert [s for s, _ in answers] == [200, 200]
    assert_refused(status, body, "absolute", netns_host.address, 8080, "CODE_MODE_NETWORK_MAX_CONNECTIONS")
    assert len(netns_host.requests()) == seen + 2
    assert [c.allowed for c in log.connections] == [True, True, False]


async def test_without_a_cap_the_whole_download_arrives(netns_host: NetnsHost) -> None:
    size = 10_000_000
    log = EgressLog()
    async with proxy_on_tcp(EgressProxy(opening(netns_host), log)) as pport:
        received = await in_thread(lambda: download(pport, "connect", netns_host, size))
    assert received == size and log.connections[0].bytes_in > size
