"""Framing: one JSON object per line, in both directions, on any pair of byte streams.

Decoding is bounded: a line longer than ``MAX_MESSAGE_BYTES``, bytes that are not UTF-8 JSON, JSON
nested deeper than the parser's recursion limit, or anything but an object raises ``ProtocolError``
(a ``RunnerError``), never ``RecursionError`` or ``MemoryError`` past the host loop.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
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


class LineChannel:
    """Messages over a byte stream pair (a worker's pipes, or a run's socket)."""

    def __init__(self, send: ByteSendStream, receive: ByteReceiveStream, *, limit: int = MAX_MESSAGE_BYTES) -> None:
        self._send = send
        self._raw_receive = receive
        self._receive = (
            receive if isinstance(receive, BufferedByteReceiveStream) else BufferedByteReceiveStream(receive)
        )
        self._limit = limit

    async def send(self, message: dict[str, Any]) -> None:
        await self._send.send(encode(message))

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None when the other end closed (or the stream broke)."""
        try:
            line = await self._receive.receive_until(b"\n", self._limit)
        except anyio.DelimiterNotFound:
            raise ProtocolError(f"the run sent a message over {self._limit} bytes (flooding the bridge)") from None
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return None
        return decode(line)

    async def aclose(self) -> None:
        same = id(self._send) == id(self._raw_receive)  # one socket stream for both directions
        streams: list[ByteSendStream | ByteReceiveStream] = [self._send] if same else [self._send, self._receive]
        for stream in streams:
            try:
                await stream.aclose()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass
