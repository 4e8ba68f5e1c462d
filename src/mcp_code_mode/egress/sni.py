"""The server name a TLS client asks for: read from the first bytes a ``CONNECT`` tunnel carries.

A tunnel is opened for the host the ``CONNECT`` line names, and the policy decided on that name. A script that
then speaks TLS with another server name (SNI) reaches, on a shared address (a CDN, a cloud load balancer),
whichever site that name selects: the name the policy saw is not the one served. So before the client's first
byte reaches the origin, the proxy reads its ClientHello (``client_hello``) and the tunnel carries on only when
the name in it is the ``CONNECT`` host (``check_server_name``). What the ClientHello says is untrusted: every
length is bounded and checked against what arrived.

Only the first bytes are read: a protocol where the server speaks first (SMTP, SSH) is unaffected, since the
origin's side of the tunnel is open from the start; a client whose first bytes are not a TLS handshake record
(plain TCP over ``CONNECT``) is passed as it is. What this cannot see: the HTTP ``Host`` inside the encrypted
stream (a proxy that does not end TLS never can). An encrypted ClientHello (ECH) hides the real name, so it
is refused.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from anyio.streams.buffered import BufferedByteReceiveStream

HANDSHAKE = 0x16
CLIENT_HELLO = 0x01
EXT_SERVER_NAME = 0x0000
EXT_ENCRYPTED_CLIENT_HELLO = 0xFE0D
MAX_RECORD = (1 << 14) + 256
"""A TLS record's payload, at most (RFC 8446 §5.2 allows 2^14 plus expansion)."""
MAX_HELLO = 1 << 16
"""A ClientHello over several records, at most (a post-quantum key share makes it about 2 KB)."""


@dataclass(frozen=True)
class Hello:
    """What the client's first bytes were, and what they ask for."""

    raw: bytes
    """Every byte read from the client, to be forwarded first."""
    tls: bool
    """Whether they began a TLS handshake (else nothing below is known)."""
    server_name: str | None = None
    encrypted: bool = False
    """The ClientHello carries an encrypted inner hello (ECH): its real server name cannot be read."""
    malformed: str | None = None
    """Why the handshake could not be read, when it could not."""


async def client_hello(reader: BufferedByteReceiveStream) -> Hello:
    """Read the client's ClientHello (whole, across records), or its first chunk when it does not start a TLS
    handshake. Raises what the stream raises when it ends first."""
    first = await reader.receive()
    if not first or first[0] != HANDSHAKE:
        return Hello(raw=first, tls=False)
    raw = bytearray(first)
    message = bytearray()
    offset = 0
    while True:
        while len(raw) < offset + 5:
            raw += await reader.receive()
        if raw[offset] != HANDSHAKE:
            return Hello(raw=bytes(raw), tls=True, malformed="a record of another type inside the ClientHello")
        length = int.from_bytes(raw[offset + 3 : offset + 5], "big")
        if length == 0 or length > MAX_RECORD:
            return Hello(raw=bytes(raw), tls=True, malformed=f"a TLS record of {length} bytes")
        while len(raw) < offset + 5 + length:
            raw += await reader.receive()
        message += raw[offset + 5 : offset + 5 + length]
        offset += 5 + length
        if len(message) >= 4:
            if message[0] != CLIENT_HELLO:
                return Hello(raw=bytes(raw), tls=True, malformed="the first handshake message is not a ClientHello")
            wanted = 4 + int.from_bytes(message[1:4], "big")
            if wanted > MAX_HELLO:
                return Hello(raw=bytes(raw), tls=True, malformed=f"a ClientHello of {wanted} bytes")
            if len(message) >= wanted:
                return _parse(bytes(raw), bytes(message[4:wanted]))


def _parse(raw: bytes, body: bytes) -> Hello:
    """The server name and whether ECH is offered, from a ClientHello's body (RFC 8446 §4.1.2, RFC 6066 §3)."""
    try:
        at = 2 + 32  # legacy_version, random
        at += 1 + body[at]  # legacy_session_id
        at += 2 + int.from_bytes(body[at : at + 2], "big")  # cipher_suites
        at += 1 + body[at]  # legacy_compression_methods
        if at == len(body):
            return Hello(raw=raw, tls=True)  # no extensions: no name
        end = at + 2 + int.from_bytes(body[at : at + 2], "big")
        if end != len(body):
            raise IndexError
        at += 2
        name: str | None = None
        encrypted = False
        seen: set[int] = set()
        while at < end:
            kind = int.from_bytes(body[at : at + 2], "big")
            size = int.from_bytes(body[at + 2 : at + 4], "big")
            data = body[at + 4 : at + 4 + size]
            if len(data) != size or kind in seen:
                raise IndexError
            seen.add(kind)
            at += 4 + size
            if kind == EXT_ENCRYPTED_CLIENT_HELLO:
                encrypted = True
            elif kind == EXT_SERVER_NAME:
                name = _server_name(data)
        if at != end:
            raise IndexError
    except (IndexError, ValueError):
        return Hello(raw=raw, tls=True, malformed="a ClientHello the proxy cannot read")
    return Hello(raw=raw, tls=True, server_name=name, encrypted=encrypted)


def _server_name(data: bytes) -> str:
    """The one ``host_name`` of a server_name extension (ValueError for two, or for a name that is not ASCII)."""
    total = int.from_bytes(data[0:2], "big")
    if total != len(data) - 2:
        raise ValueError("server_name list length")
    at, names = 2, list[str]()
    while at < len(data):
        kind, size = data[at], int.from_bytes(data[at + 1 : at + 3], "big")
        value = data[at + 3 : at + 3 + size]
        if len(value) != size:
            raise ValueError("server_name entry length")
        at += 3 + size
        if kind == 0:
            names.append(value.decode("ascii"))
    if len(names) != 1:
        raise ValueError("not exactly one host_name")
    return names[0]


def _normal(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def check_server_name(hello: Hello, host: str) -> str | None:
    """Why the tunnel to ``host`` must not carry this ClientHello (None: it may). A tunnel to an address literal
    allows any name the policy would (checked by the caller); one to a name allows that name only."""
    if not hello.tls:
        return None
    if hello.malformed is not None:
        return f"its TLS ClientHello could not be read ({hello.malformed})"
    if hello.encrypted:
        return "its TLS ClientHello is encrypted (ECH), so the server name it asks for cannot be checked"
    if hello.server_name is None:
        return None
    if _literal(host):
        return None
    if _normal(hello.server_name) != _normal(host):
        shown = "".join(c if " " < c <= "~" else "?" for c in hello.server_name)[:100]
        return f"its TLS server name {shown!r} is not {host!r}, the host the tunnel was opened for"
    return None


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


__all__ = ["Hello", "check_server_name", "client_hello"]
