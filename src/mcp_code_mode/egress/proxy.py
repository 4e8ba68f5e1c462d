"""The egress proxy: the only way out of a sandbox, on the host, deciding every connection itself.

It speaks HTTP/1.1 proxying on any stream listener (a Unix socket bound into the sandbox, or TCP for tests):

- ``CONNECT host:port`` opens a tunnel (HTTPS, or anything over TCP) once the policy allows it; TLS in it must
  name that host (``sni``);
- ``GET http://host/path`` (absolute form) is forwarded as one request with ``Connection: close``.

The proxy resolves names itself and hands the policy every address (``EgressPolicy.check_addresses``), then
connects to the address it approved, never to the name again (no second lookup a rebinding DNS could
answer differently). A refusal is ``403`` with a one-line reason naming the host and the rule, which the
script's HTTP client shows. Each connection's decision, bytes out and in are counted per ``EgressLog``.

Everything the client sends is untrusted: the request line and headers are bounded (``MAX_HEAD_BYTES``),
and a byte cap per log ends tunnels that pass it.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream

from .policy import AddressRefused, EgressPolicy, IPAddress
from .sni import Hello, check_server_name, client_hello

MAX_HEAD_BYTES = 32 * 1024
"""Request line and headers, at most."""
CONNECT_TIMEOUT = 10.0
MAX_DRAIN_BYTES = 1 << 20
"""What is read and dropped of a refused request's body before the connection is closed."""
READ_BYTES = 1 << 18
"""At most this much is read at once from either side of a connection."""
REFUSAL_HOST = "egress.invalid"
"""``GET http://egress.invalid/refusal?target=host:port`` asks the proxy why it refused that connection (a
reserved name: it is never resolved)."""

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


@functools.cache
def _client_tls() -> ssl.SSLContext:
    """The host's trust store, for ``https://`` URLs a client sends in absolute form."""
    return ssl.create_default_context()


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (a literal address is itself)."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    out: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if address not in out:
            out.append(address)
    return out


@dataclass
class Connection:
    host: str
    port: int
    allowed: bool
    reason: str = ""
    bytes_out: int = 0
    bytes_in: int = 0


@dataclass
class EgressLog:
    """What one run did through the proxy, and its caps."""

    max_bytes: int | None = None
    max_connections: int | None = None
    connections: list[Connection] = field(default_factory=list[Connection])
    bytes_total: int = 0
    """Bytes both ways over every connection so far (kept as they pass: the cap is checked per chunk)."""
    limit: str | None = None
    """The cap that was reached, once one is."""

    def count(self, record: Connection, out: int = 0, into: int = 0) -> None:
        record.bytes_out += out
        record.bytes_in += into
        self.bytes_total += out + into
        if self.max_bytes is not None and self.bytes_total > self.max_bytes and self.limit is None:
            self.limit = f"the run passed its network cap of {_megabytes(self.max_bytes)} (CODE_MODE_NETWORK_MAX_MB)"

    def summary(self) -> dict[str, object]:
        """The figures a run's result shows (``bridge.NetworkUse``)."""
        return {
            "hosts": sorted({f"{c.host}:{c.port}" for c in self.connections if c.allowed}),
            "bytesOut": sum(c.bytes_out for c in self.connections),
            "bytesIn": sum(c.bytes_in for c in self.connections),
            "refused": [f"{c.host}:{c.port}: {c.reason}" for c in self.connections if not c.allowed][:100],
            "limit": self.limit,
        }


def _megabytes(count: int) -> str:
    return f"{count / (1 << 20):g} MB"


def _printable(text: str) -> str:
    """Client-given text made safe for a status line (no control characters, bounded)."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:300]


def _body_framing(headers: list[str]) -> int | None:
    """The body of a request: its ``Content-Length`` (0 without one), or None when it is chunked; ``ValueError``
    for framing a proxy must not guess at (two lengths, another transfer coding)."""
    lengths = {h.split(":", 1)[1].strip() for h in headers if h.lower().startswith("content-length:")}
    codings = [h.split(":", 1)[1].strip().lower() for h in headers if h.lower().startswith("transfer-encoding:")]
    if codings:
        if codings != ["chunked"] or lengths:
            raise ValueError("a request body must have one Content-Length or be chunked")
        return None
    if len(lengths) > 1 or (lengths and not next(iter(lengths)).isdigit()):
        raise ValueError("a request must have at most one valid Content-Length")
    return int(next(iter(lengths))) if lengths else 0


def _split_host_port(authority: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6]:port`` from a client's request; ``ValueError`` for anything else."""
    host, port_text = authority, ""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0 or (authority[end + 1 :] and not authority[end + 1 :].startswith(":")):
            raise ValueError(f"bad address in {authority[:100]!r}")
        host, port_text = authority[1:end], authority[end + 2 :]
    elif authority.count(":") == 1:
        host, port_text = authority.split(":")
    if not host or (port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536)):
        raise ValueError(f"bad host or port in {authority[:100]!r}")
    return host, int(port_text) if port_text else default_port


async def _answer(client: ByteStream, status: str, reason: str = "") -> None:
    """An error answer. A refusal carries its reason in the status line too (``403 connection to …
    refused: …``): most clients show only that line when a ``CONNECT`` fails."""
    body = (reason + "\n").encode() if reason else b""
    if reason and status.startswith(("403", "502")):
        status = f"{status[:3]} {_printable(reason)}"
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        "X-Code-Mode-Egress: refused\r\nConnection: close\r\n\r\n"
    )
    with anyio.move_on_after(5):
        try:
            await client.send(head.encode() + body)
            await client.send_eof()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, NotImplementedError):
            return
    # A lingering close: read what the client still sends (a refused request's body) before closing, for a
    # moment and a bounded amount, so that closing with unread data does not reset the connection and lose
    # the answer on its way to the client.
    with anyio.move_on_after(1), contextlib.suppress(Exception):
        drained = 0
        while drained < MAX_DRAIN_BYTES:
            drained += len(await client.receive())


async def _close(stream: ByteStream) -> None:
    """Close a client's stream, which also wakes a task waiting to read it."""
    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        await stream.aclose()


class EgressProxy:
    """Serves one policy and one log (one run's), on whatever listener ``serve`` is given."""

    def __init__(self, policy: EgressPolicy, log: EgressLog | None = None, *, resolver: Resolver = resolve) -> None:
        self.policy = policy
        self.log = log or EgressLog()
        self._resolve = resolver

    async def handle(self, client: ByteStream) -> None:
        async with client:
            reader = BufferedByteReceiveStream(client)
            try:
                head = await reader.receive_until(b"\r\n\r\n", MAX_HEAD_BYTES)
            except (anyio.DelimiterNotFound, anyio.IncompleteRead, anyio.EndOfStream, anyio.BrokenResourceError):
                await _answer(client, "400 Bad Request", "the request head is missing or over 32 KiB")
                return
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                await _answer(client, "400 Bad Request", "not an HTTP request line")
                return
            method, target, version = parts
            if target.lower().startswith(f"http://{REFUSAL_HOST}/"):
                await self._why(client, target)
                return
            try:
                if method.upper() == "CONNECT":
                    host, port = _split_host_port(target, 443)
                    await self._tunnel(client, reader, host, port)
                    return
                scheme, _, rest = target.partition("://")
                if scheme.lower() not in ("http", "https") or not rest:
                    await _answer(client, "400 Bad Request", "a proxy request needs CONNECT or an http(s):// URL")
                    return
                authority, _, path = rest.partition("/")
                host, port = _split_host_port(authority, 443 if scheme.lower() == "https" else 80)
            except ValueError as exc:
                await _answer(client, "400 Bad Request", str(exc))
                return
            try:
                body = _body_framing(lines[1:])
            except ValueError as exc:
                await _answer(client, "400 Bad Request", str(exc))
                return
            # One request per connection, to the host it names: Host is the URL's authority (a foreign Host
            # would reach another site on the same address), hop-by-hop headers go, and the client's
            # connection ends with this exchange (nothing more it sends is read, so nothing escapes the check).
            hop = ("proxy-", "connection:", "keep-alive:", "host:", "upgrade:", "te:")
            headers = [h for h in lines[1:] if h and not h.lower().startswith(hop)]
            request = "\r\n".join(
                [f"{method} /{path} {version}", f"Host: {authority}", *headers, "Connection: close", "", ""]
            )
            tls = scheme.lower() == "https"
            await self._forward(client, reader, host, port, request.encode("latin-1"), body, tls=tls)

    async def _why(self, client: ByteStream, target: str) -> None:
        """Why this run's last connection to ``?target=host:port`` was refused (empty: it was not). For clients
        that show nothing of a refused ``CONNECT`` (Deno's ``fetch``): the worker asks and puts it in the
        error. Not a connection: nothing is resolved or counted."""
        query = parse_qs(urlsplit(target).query).get("target", [""])[0]
        wanted = query.lower().replace("[", "").replace("]", "")
        reason = next(
            (
                f"connection to {c.host}:{c.port} refused: {c.reason}"
                for c in reversed(self.log.connections)
                if not c.allowed and f"{c.host}:{c.port}".lower().replace("[", "").replace("]", "") == wanted
            ),
            "",
        )
        body = reason.encode()
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with anyio.move_on_after(5):
            await client.send(head.encode() + body)

    async def _open(
        self, client: ByteStream, host: str, port: int, *, tls: bool = False
    ) -> tuple[ByteStream, Connection] | None:
        record = Connection(host, port, allowed=False)
        log = self.log
        log.connections.append(record)
        if log.max_connections is not None and len(log.connections) > log.max_connections:
            log.limit = log.limit or (
                f"the run opened {log.max_connections} connections, the most a run may "
                "(CODE_MODE_NETWORK_MAX_CONNECTIONS)"
            )
            record.reason = log.limit
            await _answer(client, "403 Forbidden", f"connection to {host}:{port} refused: {log.limit}")
            return None
        if not self._within_cap():
            record.reason = log.limit or "the run's network cap is reached"
            await _answer(client, "403 Forbidden", f"connection to {host}:{port} refused: {record.reason}")
            return None
        try:
            self.policy.check_name(host, port)
            addresses = await self._resolve(host, port)
            self.policy.check_addresses(host, port, addresses)  # every address must pass, or none is tried
        except AddressRefused as exc:
            record.reason = exc.rule
            await _answer(client, "403 Forbidden", str(exc))
            return None
        failure: BaseException | None = None
        for address in addresses:  # the approved addresses in the resolver's order, never the name again
            try:
                with anyio.fail_after(CONNECT_TIMEOUT):
                    if tls:  # an https:// URL in absolute form (axios does this): TLS to the origin is ours
                        upstream = await anyio.connect_tcp(
                            str(address),
                            port,
                            ssl_context=_client_tls(),
                            tls_hostname=host,
                            tls_standard_compatible=False,
                        )
                    else:
                        upstream = await anyio.connect_tcp(str(address), port)
            except (OSError, TimeoutError, ssl.SSLError, anyio.BrokenResourceError) as exc:
                failure = exc
                continue
            record.allowed = True
            return upstream, record
        record.reason = f"could not connect: {failure}"
        await _answer(client, "502 Bad Gateway", f"connection to {host}:{port} failed: {failure}")
        return None

    def _read_size(self) -> int:
        """Large reads (the copy is the proxy's main cost), but never far past the byte cap."""
        if self.log.max_bytes is None:
            return READ_BYTES
        return max(1, min(READ_BYTES, self.log.max_bytes - self.log.bytes_total + 1))

    def _within_cap(self) -> bool:
        return self.log.max_bytes is None or self.log.bytes_total <= self.log.max_bytes

    async def _pump(
        self, source: BufferedByteReceiveStream | ByteStream, sink: ByteStream, count: Callable[[int], None]
    ) -> None:
        """Copy until either side ends or the run's byte cap is passed (what was read ahead goes first)."""
        try:
            while self._within_cap():
                chunk = await source.receive(self._read_size())
                count(len(chunk))
                await sink.send(chunk)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await sink.send_eof()
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, NotImplementedError):
                    pass

    async def _splice(
        self,
        client: ByteStream,
        reader: BufferedByteReceiveStream,
        upstream: ByteStream,
        record: Connection,
        *,
        tunnel: bool = False,
    ) -> None:
        """Copy both ways. A ``tunnel``'s first bytes from the client go to the origin only once its TLS
        ClientHello (if it starts one) names the host the tunnel was opened for (``sni``); else the tunnel ends
        and the connection is recorded as refused, with the reason."""

        def out(n: int) -> None:
            self.log.count(record, out=n)

        def into(n: int) -> None:
            self.log.count(record, into=n)

        async def outward() -> None:
            if tunnel:
                try:
                    hello = await client_hello(reader)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                        await upstream.send_eof()
                    return
                why = self._refuse_hello(hello, record)
                if why is not None:
                    record.allowed, record.reason = False, why
                    tg.cancel_scope.cancel()
                    return
                out(len(hello.raw))
                try:
                    await upstream.send(hello.raw)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return
            await self._pump(reader, upstream, out)

        async with upstream, anyio.create_task_group() as tg:
            tg.start_soon(outward)
            await self._pump(upstream, client, into)
            await _close(client)  # the client's side ends with the origin's
        await _close(client)

    def _refuse_hello(self, hello: Hello, record: Connection) -> str | None:
        """Why a tunnel's ClientHello may not pass (``sni.check_server_name``; a tunnel opened for an address
        literal takes a server name only where the policy would open that name)."""
        why = check_server_name(hello, record.host)
        if why is None and hello.server_name is not None and hello.server_name != record.host:
            try:
                self.policy.check_name(hello.server_name, record.port)
            except AddressRefused as exc:
                why = f"its TLS server name is refused: {exc.rule}"
        return why

    async def _tunnel(self, client: ByteStream, reader: BufferedByteReceiveStream, host: str, port: int) -> None:
        opened = await self._open(client, host, port)
        if opened is None:
            return
        upstream, record = opened
        await client.send(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        await self._splice(client, reader, upstream, record, tunnel=True)

    async def _forward(
        self,
        client: ByteStream,
        reader: BufferedByteReceiveStream,
        host: str,
        port: int,
        request: bytes,
        body: int | None,
        *,
        tls: bool,
    ) -> None:
        """One request in absolute form: its head and body (``body`` bytes, or chunked when None) to the
        origin, then the origin's answer with ``Connection: close`` back until either side ends."""
        opened = await self._open(client, host, port, tls=tls)
        if opened is None:
            return
        upstream, record = opened
        async with upstream:
            try:
                self.log.count(record, out=len(request))
                await upstream.send(request)
                await self._send_body(reader, upstream, record, body)
                response = BufferedByteReceiveStream(upstream)
                head = await response.receive_until(b"\r\n\r\n", MAX_HEAD_BYTES)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError, ValueError):
                return
            except anyio.DelimiterNotFound:
                await _answer(client, "502 Bad Gateway", f"{host}:{port} answered with a head over 32 KiB")
                return
            kept = [h for h in head.split(b"\r\n") if h and not h.lower().startswith((b"connection:", b"keep-alive:"))]
            answer = b"\r\n".join([*kept, b"Connection: close", b"", b""])
            self.log.count(record, into=len(head) + 4)
            try:
                await client.send(answer)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return

            def into(n: int) -> None:
                self.log.count(record, into=n)

            pumping = anyio.CancelScope()

            async def client_gone() -> None:  # the client closes after the answer: so do we
                with contextlib.suppress(Exception):
                    while await client.receive():
                        pass  # nothing more the client sends is read as a request
                pumping.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(client_gone)
                with pumping:
                    await self._pump(response, client, into)
                await _close(client)  # ends client_gone's wait (closing, not cancelling: see _close)

    async def _send_body(
        self, reader: BufferedByteReceiveStream, upstream: ByteStream, record: Connection, body: int | None
    ) -> None:
        """The request's body, exactly as framed (``Content-Length`` bytes, or chunks up to the last one)."""
        if body is not None:
            left = body
            while left > 0 and self._within_cap():
                chunk = await reader.receive(min(left, READ_BYTES))
                left -= len(chunk)
                self.log.count(record, out=len(chunk))
                await upstream.send(chunk)
            return
        while self._within_cap():
            line = await reader.receive_until(b"\r\n", 1024)
            size = int(line.split(b";", 1)[0].strip() or b"x", 16)
            data = line + b"\r\n"
            if size == 0:  # the last chunk, then trailers up to an empty line
                while True:
                    trailer = await reader.receive_until(b"\r\n", MAX_HEAD_BYTES)
                    data += trailer + b"\r\n"
                    if not trailer:
                        break
                self.log.count(record, out=len(data))
                await upstream.send(data)
                return
            self.log.count(record, out=len(data))
            await upstream.send(data)
            left = size + 2  # the chunk and its CRLF, passed on as it comes (a chunk may claim any size)
            while left > 0 and self._within_cap():
                piece = await reader.receive(min(left, READ_BYTES))
                left -= len(piece)
                self.log.count(record, out=len(piece))
                await upstream.send(piece)


__all__ = ["Connection", "EgressLog", "EgressProxy", "resolve"]
