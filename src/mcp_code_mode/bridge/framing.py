"""Framing: one JSON object per line, in both directions, on any pair of byte streams.

Decoding is bounded: a line longer than ``MAX_MESSAGE_BYTES``, bytes that are not UTF-8 JSON, JSON
nested deeper than the parser's recursion limit, or anything but an object raises ``ProtocolError``
(a ``RunnerError``), never ``RecursionError`` or ``MemoryError`` past the host loop.

On a socket stream (a zygote's run channel) the channel reads and writes the socket itself: a line that
is already there, or one that fits in the socket's buffer, costs no turn of the event loop (anyio's socket
stream takes one per send and per receive).
"""

from __future__ import annotations

import json
import socket
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, SocketAttribute
from anyio.streams.buffered import BufferedByteReceiveStream

from ..errors import ProtocolError

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""A bridge line longer than this ends the run: the script is flooding the bridge."""


def encode(message: dict[str, Any]) -> bytes:
    """One line, compact, keys in insertion order: the Pyodide worker takes a line that starts with
    ``{"op":"result","id":N,`` as the answer to its call ``N`` without parsing it (Python does)."""
    return json.dumps(message, separators=(",", ":"), default=repr).encode() + b"\n"


def decode(line: bytes | bytearray) -> dict[str, Any]:
    """One line as a JSON object, or ``ProtocolError`` saying what is wrong with it."""
    try:
        message = json.loads(line)
    except RecursionError:
        raise ProtocolError("the run sent a message nested too deeply") from None
    except MemoryError:
        raise ProtocolError("the run sent a message too large to parse") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise ProtocolError(f"the run sent a malformed message: {str(exc)[:200]}") from None
    if not isinstance(message, dict):
        raise ProtocolError("the run sent a message that is not a JSON object")
    return message  # pyright: ignore[reportUnknownVariableType]


READ_CHUNK = 1 << 16
"""Bytes read from a run's socket at a time."""


class LineChannel:
    """Messages over a byte stream pair (a worker's pipes, or a run's socket).

    Given one socket stream for both directions, the channel is its only reader and writer: it uses the
    stream's socket directly (``_raw``), and the stream only to wait for room to write and to close."""

    def __init__(self, send: ByteSendStream, receive: ByteReceiveStream, *, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._send = send
        self._raw_receive = receive
        self._receive = (
            receive if isinstance(receive, BufferedByteReceiveStream) else BufferedByteReceiveStream(receive)
        )
        self._limit = limit
        self._raw = _own_socket(send) if id(send) == id(receive) else None
        self._buffer = bytearray()
        self._closed = False

    async def send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        raw = self._raw
        if raw is not None:
            try:
                sent = raw.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise (anyio.ClosedResourceError if self._closed else anyio.BrokenResourceError)() from exc
            if sent == len(data):
                return
            data = data[sent:]  # the socket's buffer is full: the rest waits for room
        await self._send.send(data)

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the other end closed (or the stream broke)."""
        if self._raw is not None:
            return await self._receive_raw(self._raw)
        try:
            line = await self._receive.receive_until(b"\n", self._limit)
        except anyio.DelimiterNotFound:
            raise ProtocolError(f"the run sent a message over {self._limit} bytes (flooding the bridge)") from None
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return None
        return decode(line)

    async def _receive_raw(self, raw: socket.socket) -> dict[str, Any] | None:
        """``receive`` on the socket itself: the same bound (no more than ``limit`` bytes without a newline)."""
        buffer = self._buffer
        searched = 0
        while True:
            end = buffer.find(b"\n", searched)
            if end >= 0:
                if end > self._limit:
                    break
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                return decode(line)
            if len(buffer) >= self._limit:
                break
            searched = len(buffer)
            try:
                chunk = raw.recv(READ_CHUNK)
            except BlockingIOError:
                if self._closed:
                    return None
                try:
                    await anyio.wait_readable(raw)
                except (anyio.ClosedResourceError, OSError):
                    return None
                continue
            except OSError:
                return None
            if not chunk:
                return None
            buffer += chunk
        raise ProtocolError(f"the run sent a message over {self._limit} bytes (flooding the bridge)")

    async def aclose(self) -> None:
        if self._raw is not None and not self._closed:
            anyio.notify_closing(self._raw)  # a receive waiting on the socket ends (with None)
        self._closed = True
        same = id(self._send) == id(self._raw_receive)  # one socket stream for both directions
        streams: list[ByteSendStream | ByteReceiveStream] = [self._send] if same else [self._send, self._receive]
        for stream in streams:
            try:
                await stream.aclose()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass


def _own_socket(stream: ByteSendStream) -> socket.socket | None:
    """The non-blocking socket under an anyio socket stream, else None."""
    raw = stream.extra(SocketAttribute.raw_socket, None)
    return raw if isinstance(raw, socket.socket) and not raw.getblocking() else None
