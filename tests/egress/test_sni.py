"""A ``CONNECT`` tunnel carries TLS only for the host it was opened for: the ClientHello's server name is read
before any client byte reaches the origin (``egress/sni.py``). Real ClientHellos (Python's ``ssl``), a real TLS
origin on loopback with a certificate made here, the proxy on a Unix socket as a sandbox sees it."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteStream, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from mcp_code_mode.egress import EgressPolicy, serve_unix
from mcp_code_mode.egress.proxy import EgressLog, EgressProxy
from mcp_code_mode.egress.sni import Hello, check_server_name, client_hello

pytestmark = pytest.mark.anyio


def hello_bytes(server_name: str | None) -> bytes:
    """The ClientHello Python's ssl sends for ``server_name`` (None: no SNI)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def parsed(data: bytes, chunk: int = 1 << 20) -> Hello:
    """``client_hello`` over a stream that delivers ``data`` ``chunk`` bytes at a time."""
    send, receive = anyio.create_memory_object_stream[bytes](100)
    async with send, receive:
        for at in range(0, len(data), chunk):
            await send.send(data[at : at + chunk])
        return await client_hello(BufferedByteReceiveStream(receive))


def refragmented(data: bytes, cut: int) -> bytes:
    """The same ClientHello as two TLS records, the handshake message cut after ``cut`` bytes (a client may)."""
    body = data[5:]
    head = data[:3]
    first, second = body[:cut], body[cut:]
    return head + len(first).to_bytes(2, "big") + first + head + len(second).to_bytes(2, "big") + second


def with_extension(data: bytes, kind: int, payload: bytes = b"\x00") -> bytes:
    """The ClientHello with one more extension appended (lengths fixed up)."""
    body = data[9:]  # after the record header (5) and the handshake header (4)
    at = 2 + 32
    at += 1 + body[at]
    at += 2 + int.from_bytes(body[at : at + 2], "big")
    at += 1 + body[at]
    extensions = body[at + 2 :] + kind.to_bytes(2, "big") + len(payload).to_bytes(2, "big") + payload
    body = body[:at] + len(extensions).to_bytes(2, "big") + extensions
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    return data[:3] + len(message).to_bytes(2, "big") + message


async def test_the_server_name_of_a_real_client_hello_is_read() -> None:
    hello = await parsed(hello_bytes("api.test"))
    assert hello.tls and hello.server_name == "api.test" and hello.malformed is None and not hello.encrypted


async def test_a_client_hello_arriving_a_few_bytes_at_a_time_and_over_two_records_is_read_whole() -> None:
    data = refragmented(hello_bytes("api.test"), 40)
    hello = await parsed(data, chunk=7)
    assert hello.server_name == "api.test" and hello.raw == data


async def test_a_hello_without_a_name_has_none_and_plain_bytes_are_not_tls() -> None:
    assert (await parsed(hello_bytes(None))).server_name is None
    plain = await parsed(b"SSH-2.0-client\r\n")
    assert not plain.tls and plain.raw == b"SSH-2.0-client\r\n"


async def test_another_name_is_refused_naming_both() -> None:
    why = check_server_name(await parsed(hello_bytes("blocked.test")), "api.test")
    assert why is not None and "'blocked.test'" in why and "'api.test'" in why
    assert check_server_name(await parsed(hello_bytes("API.test.")), "api.test") is None  # case and root dot


async def test_an_encrypted_client_hello_is_refused() -> None:
    why = check_server_name(await parsed(with_extension(hello_bytes("api.test"), 0xFE0D)), "api.test")
    assert why is not None and "ECH" in why


async def test_a_second_server_name_extension_is_refused_as_unreadable() -> None:
    sni = b"\x00\x0e\x00\x00\x0bother.test\x00"[:-1]  # list length 14: one host_name of 11 bytes
    hello = await parsed(with_extension(hello_bytes("api.test"), 0x0000, sni))
    assert hello.malformed is not None and check_server_name(hello, "api.test") is not None


async def test_a_record_that_claims_more_than_tls_allows_is_refused_without_waiting_for_it() -> None:
    data = b"\x16\x03\x01\xff\xff" + b"\x01" * 10
    with anyio.fail_after(5):
        hello = await parsed(data)
    assert hello.malformed is not None and "65535" in hello.malformed


# ----- through the proxy ----------------------------------------------------------------------------------


def certificate(tmp_path: Path, name: str) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@asynccontextmanager
async def origin(tls: ssl.SSLContext | None, received: list[bytes], banner: bytes = b"") -> AsyncGenerator[int]:
    """An origin on 127.0.0.1: TLS with ``tls`` (answering ``hello``), or plain, saying ``banner`` first and
    echoing; ``received`` gets what the proxy delivered to it (before any TLS)."""

    async def serve(stream: SocketStream) -> None:
        async with stream:
            if banner:
                await stream.send(banner)
            try:
                with anyio.fail_after(10):
                    if tls is None:
                        data = await stream.receive()
                        received.append(data)
                        await stream.send(data)
                        return
                    first = await stream.receive()
                    received.append(first)
                    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
                    server = tls.wrap_bio(incoming, outgoing, server_side=True)
                    incoming.write(first)
                    while True:
                        try:
                            server.do_handshake()
                            break
                        except ssl.SSLWantReadError:
                            if outgoing.pending:
                                await stream.send(outgoing.read())
                            incoming.write(await stream.receive())
                    if outgoing.pending:
                        await stream.send(outgoing.read())
                    while True:
                        try:
                            server.read(100)
                            break
                        except ssl.SSLWantReadError:
                            incoming.write(await stream.receive())
                    server.write(b"hello over tls")
                    await stream.send(outgoing.read())
            except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, TimeoutError):
                return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield port
        tg.cancel_scope.cancel()


async def to_loopback(_host: str, _port: int) -> list[object]:
    return [ipaddress.ip_address("127.0.0.1")]


@asynccontextmanager
async def tunnel(tmp_path: Path, port: int, host: str = "api.test") -> AsyncGenerator[tuple[ByteStream, EgressLog]]:
    """A CONNECT tunnel to ``host:port`` (resolved to loopback) through the proxy on a Unix socket."""
    log = EgressLog()
    policy = EgressPolicy.from_settings(allow_private=f"127.0.0.1:{port}")
    proxy = EgressProxy(policy, log, resolver=to_loopback)  # pyright: ignore[reportArgumentType]
    async with serve_unix(tmp_path / "p.sock", proxy.handle):
        stream = await anyio.connect_unix(tmp_path / "p.sock")
        async with stream:
            await stream.send(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
            head = b""
            with anyio.fail_after(10):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive()
            assert head.startswith(b"HTTP/1.1 200 ")
            yield stream, log


async def tls_exchange(stream: ByteStream, server_name: str) -> bytes:
    """A real TLS client (trusting anything: the test is about names, not trust) over ``stream``."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with anyio.fail_after(10):
        while True:
            try:
                client.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    await stream.send(outgoing.read())
                incoming.write(await stream.receive())
        client.write(b"GET / HTTP/1.1\r\n\r\n")
        await stream.send(outgoing.read())
        while True:
            try:
                return client.read(100)
            except ssl.SSLWantReadError:
                incoming.write(await stream.receive())


def server_context(tmp_path: Path) -> ssl.SSLContext:
    cert, key = certificate(tmp_path, "api.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


async def test_tls_for_the_tunnels_own_host_goes_through(tmp_path: Path) -> None:
    received: list[bytes] = []
    async with origin(server_context(tmp_path), received) as port:
        async with tunnel(tmp_path, port) as (stream, log):
            assert await tls_exchange(stream, "api.test") == b"hello over tls"
    assert log.connections[0].allowed and log.summary()["refused"] == []


async def test_tls_for_another_name_never_reaches_the_origin_and_is_recorded_refused(tmp_path: Path) -> None:
    received: list[bytes] = []
    async with origin(server_context(tmp_path), received) as port:
        async with tunnel(tmp_path, port) as (stream, log):
            with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError)):
                await tls_exchange(stream, "blocked.test")
    assert received == []  # not one byte of that ClientHello reached the origin
    refused = log.summary()["refused"]
    assert isinstance(refused, list) and len(refused) == 1
    assert "'blocked.test'" in refused[0] and "'api.test'" in refused[0]
    assert log.summary()["hosts"] == []


async def test_a_tunnel_to_an_address_takes_a_name_only_the_policy_would_open(tmp_path: Path) -> None:
    log = EgressLog()
    received: list[bytes] = []
    async with origin(None, received) as port:
        policy = EgressPolicy.from_settings(allow=f"api.test,127.0.0.1:{port}", allow_private=f"127.0.0.1:{port}")
        proxy = EgressProxy(policy, log)
        async with serve_unix(tmp_path / "p.sock", proxy.handle):
            stream = await anyio.connect_unix(tmp_path / "p.sock")
            async with stream:
                await stream.send(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode() + hello_bytes("blocked.test"))
                out = b""
                with anyio.fail_after(10):
                    try:
                        while True:
                            out += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        pass
    assert out.startswith(b"HTTP/1.1 200 ") and received == []
    assert "CODE_MODE_NETWORK_ALLOW" in str(log.summary()["refused"])


async def test_a_protocol_where_the_server_speaks_first_still_works(tmp_path: Path) -> None:
    received: list[bytes] = []
    async with origin(None, received, banner=b"SSH-2.0-origin\r\n") as port:
        async with tunnel(tmp_path, port) as (stream, _log):
            with anyio.fail_after(10):
                assert await stream.receive() == b"SSH-2.0-origin\r\n"  # before the client said anything
                await stream.send(b"SSH-2.0-client\r\n")
                assert await stream.receive() == b"SSH-2.0-client\r\n"
    assert received == [b"SSH-2.0-client\r\n"]
