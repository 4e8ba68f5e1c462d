"""An in-memory worker for tests of the host loop: it "sends" prepared lines and records the answers.

``FakeWorker(lines)`` is a ``RunChannel`` backed by the real framing (``LineChannel``) over in-memory
byte streams, so tests exercise exactly the decoding a real worker's bytes go through.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

from .framing import MAX_MESSAGE_BYTES, LineChannel


class _Feed(ByteReceiveStream):
    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = [c for c in chunks if c]

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self._chunks:
            raise anyio.EndOfStream
        chunk = self._chunks.pop(0)
        if len(chunk) > max_bytes:
            chunk, rest = chunk[:max_bytes], chunk[max_bytes:]
            self._chunks.insert(0, rest)
        return chunk

    async def aclose(self) -> None:
        self._chunks = []


class _Record(ByteSendStream):
    def __init__(self) -> None:
        self.data = bytearray()

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        self.data += item

    async def aclose(self) -> None:
        pass


class FakeWorker(LineChannel):
    """A run that sends ``lines`` (bytes, or dicts encoded as JSON lines) and then closes its end."""

    def __init__(self, lines: Iterable[bytes | dict[str, Any]], *, limit: int = MAX_MESSAGE_BYTES) -> None:
        chunks = [line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n" for line in lines]
        self._record = _Record()
        super().__init__(self._record, _Feed(chunks), limit=limit)

    @property
    def sent(self) -> list[dict[str, Any]]:
        """Every message the host sent to this worker."""
        return [json.loads(line) for line in bytes(self._record.data).splitlines() if line]
