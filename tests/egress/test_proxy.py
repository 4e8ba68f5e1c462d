"""The egress proxy with real traffic on loopback: a test HTTP server, the proxy on a Unix socket (as a
sandbox sees it) or on TCP (for an unmodified client library), and the policy deciding each connection."""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteStream, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from mcp_code_mode.egress import EgressPolicy, serve_unix
from mcp_code_mode.egress.proxy import EgressLog, EgressProxy

pytestmark = pytest.mark.anyio

BODY = b"hello from upstream\n"


@asynccontextmanager
async def upstream_server(body: bytes = BODY) -> AsyncGenerator[int]:
    """A minimal HTTP server on 127.0.0.1 that answers every request with ``body`` (or echoes a tunnel)."""

    async def serve(stream: SocketStream) -> None:
        async with stream:
            data = b""
            with anyio.move_on_after(5):
                while b"\r\n\r\n" not in data:
                    chunk = await stream.receive()
                    data += chunk
            if data.startswith(b"ECHO"):
                await stream.send(data)
                return
            head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            await stream.send(head + body)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield port
        tg.cancel_scope.cancel()


@asynccontextmanager
async def proxy_on_unix(proxy: EgressProxy, path: Path) -> AsyncGenerator[Path]:
    """The proxy on a Unix socket, served as a run's gate serves it."""
    async with serve_unix(path, proxy.handle):
        yield path


@asynccontextmanager
async def proxy_on_tcp(proxy: EgressProxy) -> AsyncGenerator[int]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        yield port
        tg.cancel_scope.cancel()


async def exchange(path: Path, request: bytes, then: bytes = b"") -> bytes:
    stream: ByteStream = await anyio.connect_unix(path)
    async with stream:
        await stream.send(request)
        if then:
            await anyio.sleep(0.05)
            await stream.send(then)
        out = b""
        with anyio.fail_after(10):
            try:
                while True:
                    out += await stream.receive()
                    if then and then in out:
                        break
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                pass
        return out


def opened(port: int) -> EgressPolicy:
    return EgressPolicy.from_settings(allow_private=f"127.0.0.1:{port}")


async def test_a_plain_http_request_through_the_unix_socket_reaches_an_opened_address(tmp_path: Path) -> None:
    async with upstream_server() as port:
        log = EgressLog()
        async with proxy_on_unix(EgressProxy(opened(port), log), tmp_path / "p.sock") as sock:
            answer = await exchange(sock, f"GET http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(BODY)
    summary = log.summary()
    assert summary["hosts"] == [f"127.0.0.1:{port}"] and summary["refused"] == []
    assert isinstance(summary["bytesIn"], int) and summary["bytesIn"] >= len(BODY)


async def test_connect_opens_a_tunnel_that_carries_bytes_both_ways(tmp_path: Path) -> None:
    async with upstream_server() as port:
        async with proxy_on_unix(EgressProxy(opened(port)), tmp_path / "p.sock") as sock:
            answer = await exchange(
                sock, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode(), then=b"ECHO tunnel\r\n\r\n"
            )
    assert answer.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\n")
    assert answer.endswith(b"ECHO tunnel\r\n\r\n")


@pytest.mark.parametrize("target", ["127.0.0.1", "localhost", "[::1]", "169.254.169.254", "10.0.0.1"])
async def test_loopback_metadata_and_private_targets_are_refused_with_the_rule(tmp_path: Path, target: str) -> None:
    log = EgressLog()
    async with proxy_on_unix(EgressProxy(EgressPolicy(), log), tmp_path / "p.sock") as sock:
        answer = await exchange(sock, f"CONNECT {target}:443 HTTP/1.1\r\n\r\n".encode())
    status = answer.split(b"\r\n", 1)[0]
    assert status.startswith(b"HTTP/1.1 403 connection to ")  # the reason is in the status line clients show
    assert b"refused" in status and b"CODE_MODE_NETWORK_ALLOW_PRIVATE" in status
    assert log.summary()["hosts"] == [] and len(log.connections) == 1 and not log.connections[0].allowed


async def test_an_opened_address_is_opened_for_its_port_only(tmp_path: Path) -> None:
    async with upstream_server() as port:
        policy = EgressPolicy.from_settings(allow_private=f"127.0.0.1:{port + 1}")
        async with proxy_on_unix(EgressProxy(policy), tmp_path / "p.sock") as sock:
            answer = await exchange(sock, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 ") and b"X-Code-Mode-Egress: refused" in answer


async def test_a_name_resolving_to_loopback_is_refused_like_the_address() -> None:
    async def rebinding(host: str, port: int) -> list[object]:
        import ipaddress

        return [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("127.0.0.1")]

    proxy = EgressProxy(EgressPolicy(), resolver=rebinding)  # pyright: ignore[reportArgumentType]
    async with proxy_on_tcp(proxy) as pport:
        stream = await anyio.connect_tcp("127.0.0.1", pport)
        async with stream:
            await stream.send(b"CONNECT rebind.example:443 HTTP/1.1\r\n\r\n")
            answer = await stream.receive()
    assert answer.startswith(b"HTTP/1.1 403") and b"127.0.0.1 is loopback" in answer


async def test_garbage_and_an_oversize_head_get_400(tmp_path: Path) -> None:
    async with proxy_on_unix(EgressProxy(EgressPolicy()), tmp_path / "p.sock") as sock:
        assert (await exchange(sock, b"HELLO\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert (await exchange(sock, b"GET /relative HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert (await exchange(sock, b"GET http://x/ HTTP/1.1\r\nX: " + b"a" * 40_000)).startswith(b"HTTP/1.1 400")


async def test_the_byte_cap_ends_a_transfer(tmp_path: Path) -> None:
    big = b"x" * 2_000_000
    async with upstream_server(big) as port:
        log = EgressLog(max_bytes=100_000)
        async with proxy_on_unix(EgressProxy(opened(port), log), tmp_path / "p.sock") as sock:
            answer = await exchange(sock, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200")
    assert len(answer) < 1_000_000  # cut off after the cap, far short of the 2 MB body


async def test_an_unmodified_client_library_works_through_it() -> None:
    async with upstream_server() as port:
        async with proxy_on_tcp(EgressProxy(opened(port))) as pport:
            proxies = urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{pport}"})
            opener = urllib.request.build_opener(proxies)

            def fetch(url: str) -> bytes:
                with opener.open(url, timeout=10) as response:
                    return response.read()

            assert await anyio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port}/page") == BODY
            with pytest.raises(urllib.error.HTTPError) as caught:
                await anyio.to_thread.run_sync(fetch, f"http://127.0.0.1:{port + 1}/")
            caught.value.close()
            assert caught.value.code == 403


@pytest.mark.parametrize("target", ["127.0.0.1:99999", "[::1:443", "host:http", ":443", "[::1]x"])
async def test_a_malformed_target_gets_400_and_opens_nothing(tmp_path: Path, target: str) -> None:
    log = EgressLog()
    async with proxy_on_unix(EgressProxy(EgressPolicy(), log), tmp_path / "p.sock") as sock:
        answer = await exchange(sock, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 400") and log.connections == []


async def test_the_proxy_says_why_it_refused_a_target_without_counting_a_connection(tmp_path: Path) -> None:
    log = EgressLog()
    async with proxy_on_unix(EgressProxy(EgressPolicy(), log), tmp_path / "p.sock") as sock:
        await exchange(sock, b"CONNECT 10.1.2.3:443 HTTP/1.1\r\n\r\n")
        why = await exchange(sock, b"GET http://egress.invalid/refusal?target=10.1.2.3%3A443 HTTP/1.1\r\n\r\n")
        none = await exchange(sock, b"GET http://egress.invalid/refusal?target=10.1.2.3%3A80 HTTP/1.1\r\n\r\n")
    assert why.startswith(b"HTTP/1.1 200 OK")
    assert why.endswith(
        b"connection to 10.1.2.3:443 refused: 10.1.2.3 is a private network (RFC 1918); "
        b"open it with CODE_MODE_NETWORK_ALLOW_PRIVATE=10.1.2.3:443"
    )
    assert none.endswith(b"\r\n\r\n")  # nothing refused there: an empty answer
    assert len(log.connections) == 1


async def test_past_the_connection_cap_the_next_connection_is_refused_naming_the_setting(tmp_path: Path) -> None:
    log = EgressLog(max_connections=2)
    async with upstream_server() as port:
        policy = EgressPolicy.from_settings(allow_private=f"127.0.0.1:{port}")
        async with proxy_on_unix(EgressProxy(policy, log), tmp_path / "p.sock") as sock:
            answers = [
                await exchange(sock, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n".encode()) for _ in range(3)
            ]
    assert [a.split(b" ", 2)[1] for a in answers] == [b"200", b"200", b"403"]
    assert b"CODE_MODE_NETWORK_MAX_CONNECTIONS" in answers[2]
    assert log.limit is not None and log.summary()["limit"] == log.limit


@asynccontextmanager
async def keep_alive_server(seen: list[bytes]) -> AsyncGenerator[int]:
    """An origin that ignores ``Connection: close``: it answers every request on a connection and keeps it."""

    async def serve(stream: SocketStream) -> None:
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            with contextlib.suppress(Exception):
                while True:
                    head = await reader.receive_until(b"\r\n\r\n", 65536)
                    seen.append(head)
                    await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield port
        tg.cancel_scope.cancel()


async def ask(path: Path, request: bytes, then: bytes = b"") -> bytes:
    """Send ``request``, read until the keep-alive origin's ``ok`` (or the proxy's answer ends), send ``then``
    on the same connection, give it a moment, close."""
    stream: ByteStream = await anyio.connect_unix(path)
    out = b""
    async with stream:
        await stream.send(request)
        with anyio.fail_after(10):
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while not out.endswith(b"ok"):
                    out += await stream.receive()
        if then:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await stream.send(then)
            await anyio.sleep(0.3)
    return out


async def test_a_second_request_on_a_forwarded_connection_never_reaches_the_origin(tmp_path: Path) -> None:
    """A client that keeps the proxy connection open must not send an unchecked request through it."""
    seen: list[bytes] = []
    log = EgressLog()
    async with keep_alive_server(seen) as port:
        async with proxy_on_unix(EgressProxy(opened(port), log), tmp_path / "p.sock") as sock:
            first = f"GET http://127.0.0.1:{port}/a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
            smuggled = b"GET http://10.9.9.9/secret HTTP/1.1\r\nHost: 10.9.9.9\r\nAuthorization: x\r\n\r\n"
            answer = await ask(sock, first, then=smuggled)
    assert answer.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in answer
    assert b"keep-alive" not in answer.lower()
    assert [h.split(b"\r\n")[0] for h in seen] == [b"GET /a HTTP/1.1"]
    assert len(log.connections) == 1


async def test_the_host_header_is_the_urls_authority_whatever_the_client_sent(tmp_path: Path) -> None:
    seen: list[bytes] = []
    async with keep_alive_server(seen) as port:
        async with proxy_on_unix(EgressProxy(opened(port)), tmp_path / "p.sock") as sock:
            request = f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: not-allowed.example\r\n\r\n".encode()
            await ask(sock, request)
    assert b"\r\nHost: 127.0.0.1:" in seen[0] and b"not-allowed.example" not in seen[0]


async def test_a_request_body_is_forwarded_exactly_as_framed(tmp_path: Path) -> None:
    seen: list[bytes] = []
    async with keep_alive_server(seen) as port:
        async with proxy_on_unix(EgressProxy(opened(port)), tmp_path / "p.sock") as sock:
            url = f"http://127.0.0.1:{port}/"
            chunked = f"POST {url} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".encode()
            assert (await ask(sock, chunked)).startswith(b"HTTP/1.1 200 OK")
            both = f"POST {url} HTTP/1.1\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc".encode()
            assert (await ask(sock, both)).startswith(b"HTTP/1.1 400")
    # The origin here reads "heads" up to a blank line: the chunked body, last chunk included, is the second.
    assert len(seen) == 2 and b"Transfer-Encoding: chunked" in seen[0] and seen[1] == b"3\r\nabc\r\n0"


async def test_every_approved_address_is_tried_in_turn() -> None:
    import ipaddress

    async with upstream_server() as port:

        async def two(host: str, _port: int) -> list[object]:
            return [ipaddress.ip_address("127.0.0.2"), ipaddress.ip_address("127.0.0.1")]

        policy = EgressPolicy.from_settings(allow_private=f"127.0.0.0/8:{port}")
        proxy = EgressProxy(policy, resolver=two)  # pyright: ignore[reportArgumentType]
        async with proxy_on_tcp(proxy) as proxy_port:
            handler = urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy_port}"})
            opener = urllib.request.build_opener(handler)
            body = await anyio.to_thread.run_sync(lambda: opener.open(f"http://api.test:{port}/", timeout=10).read())
    assert body == BODY


@asynccontextmanager
async def sink_server() -> AsyncGenerator[int]:
    """An origin that reads everything it is sent and answers nothing."""

    async def serve(stream: SocketStream) -> None:
        async with stream:
            with contextlib.suppress(Exception):
                while await stream.receive():
                    pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield port
        tg.cancel_scope.cancel()


async def test_a_chunk_that_claims_a_gigabyte_is_passed_on_as_it_comes_and_stops_at_the_cap(tmp_path: Path) -> None:
    """A script's chunk size is untrusted: the proxy never waits to hold a whole chunk (it would buffer it)."""
    log = EgressLog(max_bytes=1 << 20)
    async with sink_server() as port:
        async with proxy_on_unix(EgressProxy(opened(port), log), tmp_path / "p.sock") as sock:
            stream: ByteStream = await anyio.connect_unix(sock)
            async with stream:
                head = f"POST http://127.0.0.1:{port}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40000000\r\n"
                await stream.send(head.encode())
                with anyio.move_on_after(1), contextlib.suppress(anyio.BrokenResourceError, OSError):
                    for _ in range(64):
                        await stream.send(b"x" * 65536)  # 4 MiB of a chunk that claims 1 GiB
                with anyio.fail_after(5):
                    while log.limit is None:  # the proxy reads on (polling its log: there is no event)
                        await anyio.sleep(0.01)
    assert (1 << 20) <= log.bytes_total < (1 << 20) + (1 << 18) + 4096  # passed on, then cut at the cap
    assert log.limit is not None and "CODE_MODE_NETWORK_MAX_MB" in log.limit
