"""A run's one way out: the proxy's Unix socket in a directory bound into the worker's sandbox.

The sandbox has its own, empty network namespace; the directory (``SandboxSpec.egress``) is bound into it
read-only at ``SANDBOX_EGRESS`` when the worker is made. The socket exists only while a run that may use
the network runs (``serve_gate``): it is made when the run starts, with that run's grant, and removed
with every connection still open when the run ends, so nothing a run leaves behind can speak for the
next one. Inside the sandbox, ``cm_egress.py`` forwards a loopback TCP port to it (clients take a proxy as
``http://host:port``, never a socket path).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

import anyio

from .policy import EgressPolicy
from .proxy import EgressLog, EgressProxy

SOCKET_NAME = "proxy.sock"
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


def make_gate_directory(parent: Path | None = None) -> Path:
    """A fresh host directory for one worker's gate (searchable by the sandbox's uid, writable by us only)."""
    directory = Path(os.path.realpath(tempfile.mkdtemp(prefix="cm-egress-", dir=parent)))
    directory.chmod(0o711)
    return directory


@contextlib.asynccontextmanager
async def serve_gate(directory: Path, grant: NetworkGrant, log: EgressLog) -> AsyncGenerator[EgressProxy]:
    """Serve ``grant`` on ``directory``'s socket for as long as the block lasts (one run)."""
    path = directory / SOCKET_NAME
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    listener = await anyio.create_unix_listener(path)
    proxy = EgressProxy(grant.policy, log)
    try:
        path.chmod(0o666)  # the sandbox's uid connects; only its sandbox sees the directory
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, proxy.handle)
            try:
                yield proxy
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await listener.aclose()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


__all__ = ["SANDBOX_EGRESS", "SOCKET_NAME", "NetworkGrant", "make_gate_directory", "serve_gate"]
