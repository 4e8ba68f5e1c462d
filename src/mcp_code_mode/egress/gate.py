"""A run's one way out: the proxy's Unix socket in a directory bound into the worker's sandbox.

The sandbox has its own, empty network namespace; the directory (``SandboxSpec.egress``) is bound into it
read-only at ``SANDBOX_EGRESS`` when the worker is made. The socket exists only while a run that may use
the network runs (``serve_gate``): it is made when the run starts, with that run's grant, and removed
with every connection still open when the run ends, so nothing a run leaves behind can speak for the
next one. Inside the sandbox, ``cm_egress.py`` forwards a loopback TCP port to it (clients take a proxy as
``http://host:port``, never a socket path).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import ByteStream

from .._leftovers import make_owned_directory
from .policy import EgressPolicy
from .proxy import EgressLog, EgressProxy

SOCKET_NAME = "proxy.sock"
GATE_PREFIX = "mcp-code-mode-gate-"
"""Gate directories are ``<temp dir>/mcp-code-mode-gate-<random>`` (``_leftovers``: swept when their server is gone)."""
SANDBOX_EGRESS = "/sandbox/egress"
"""Where the gate's directory appears inside a namespaced sandbox."""


@dataclass(frozen=True)
class NetworkGrant:
    """What one run may do on the network: the policy (the server's, narrowed by the run) and its caps."""

    policy: EgressPolicy
    max_bytes: int
    max_connections: int

    def log(self) -> EgressLog:
        return EgressLog(max_bytes=self.max_bytes, max_connections=self.max_connections)


def make_gate_directory(owner: int | None = None) -> Path:
    """A fresh host directory for one worker's gate, private to this user, or (as root) to the worker's
    uid ``owner`` (read-only inside the sandbox, so the run cannot touch the socket file either)."""
    directory = make_owned_directory(GATE_PREFIX)  # locked while in use: a later server removes it if this one dies
    if owner is not None:
        os.chown(directory, owner, owner)
        directory.chmod(0o500)
    return directory


class UnixStream(ByteStream):
    """A connection accepted by ``serve_unix``: asyncio's stream transport behind anyio's ``ByteStream``.

    Not anyio's own Unix socket stream: closing or cancelling one while a task waits to read it can race its
    reader callback (``InvalidStateError`` in the event loop, seen here when a run's gate closed). Here a read
    waits on the transport's buffer, which closing ends with end-of-stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._closed = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            data = await self._reader.read(max_bytes)
        except OSError as exc:
            raise anyio.BrokenResourceError from exc
        if not data:
            if self._closed:
                raise anyio.ClosedResourceError
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            self._writer.write(item)
            await self._writer.drain()
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def send_eof(self) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            if self._writer.can_write_eof():
                self._writer.write_eof()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        with anyio.CancelScope(shield=True), contextlib.suppress(OSError):
            await self._writer.wait_closed()


@contextlib.asynccontextmanager
async def serve_unix(
    path: Path, handler: Callable[[ByteStream], Awaitable[None]], *, owner: int | None = None
) -> AsyncGenerator[None]:
    """Serve ``handler`` for each connection to a new Unix socket at ``path`` (mode 0600, owned by ``owner``
    when given) until the block ends; then no new connection is taken, open ones are closed, and handlers
    still running are cancelled."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    live: set[UnixStream] = set()
    async with anyio.create_task_group() as tg:

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            stream = UnixStream(reader, writer)
            live.add(stream)
            finished = asyncio.Event()

            async def serve() -> None:
                try:
                    await handler(stream)
                finally:
                    live.discard(stream)
                    await stream.aclose()
                    finished.set()

            tg.start_soon(serve)  # inside the task group: ending the block ends it
            await finished.wait()

        server = await asyncio.start_unix_server(connected, path=str(path))
        try:
            if owner is not None:
                os.chown(path, owner, owner)
            path.chmod(0o600)  # the worker's uid alone connects (and root)
            yield
        finally:
            server.close()
            for stream in list(live):
                await stream.aclose()
            tg.cancel_scope.cancel()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


@contextlib.asynccontextmanager
async def serve_gate(
    directory: Path, grant: NetworkGrant, log: EgressLog, *, owner: int | None = None
) -> AsyncGenerator[EgressProxy]:
    """Serve ``grant`` on ``directory``'s socket for as long as the block lasts (one run); ``owner`` is the
    worker's uid when it is not ours (as root)."""
    proxy = EgressProxy(grant.policy, log)
    async with serve_unix(directory / SOCKET_NAME, proxy.handle, owner=owner):
        yield proxy


__all__ = [
    "SANDBOX_EGRESS",
    "SOCKET_NAME",
    "NetworkGrant",
    "UnixStream",
    "make_gate_directory",
    "serve_gate",
    "serve_unix",
]
