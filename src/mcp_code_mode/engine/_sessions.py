"""The session book: which client holds which session, and when a session ends.

A session (``execute_code(session="new")``) is one runner's interpreter kept for a client's later runs
(``runners.RunnerSession``: a worker of its own, killed when the session closes). The book keys sessions by an
unguessable id (``secrets.token_urlsafe``) and by the client that opened it: another client's id, an expired
one and a made-up one all answer the same "unknown session", so an id tells nothing about other clients. A
client's identity carries its tenant (``_clients.scoped``), so another tenant's session is another client's:
``max_per_client`` is per client (an MCP session of a tenant), ``max_total`` counts every tenant's.

A session runs one run at a time: a second call while one runs is refused (``SessionBusy`` words it), not
queued behind a run whose length nobody knows. A session closes when its client closes it, when it has been
idle for ``idle_s`` (the sweeper), when a run of it times out or its worker dies (the runner ends it; its next
call says why, from a small tombstone per client that lasts ``idle_s`` too), and when the engine closes.

With ``places`` (``cache.sessions.SessionPlaces``, in the shared database), each open session's metadata is
recorded there too (tenant, client, replica, opened, last used), deleted when it closes, and the sweeper
removes rows nobody used for longer than a session may idle (a replica that died without closing its own).
Those writes are the host's bookkeeping: a failing one is logged, never a run's error.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import UnsupportedError
from ..runners import RunnerSession
from ..tenants import current_tenant

if TYPE_CHECKING:
    from ..cache.sessions import SessionPlaces

logger = logging.getLogger(__name__)

MAX_TOMBSTONES = 16
"""Ended sessions a client is told about (why they ended) before the oldest is forgotten."""
IDLE = "idle"
"""The tombstone of a session the sweeper closed: its owner is told it idled out, as an unknown session."""
SWEEP_EVERY = 5.0
"""Longest pause between two sweeps for idle sessions (shorter when ``idle_s`` is)."""
STALE_MARGIN_S = 60.0
"""How much longer than ``idle_s`` a recorded session may go unused before any replica's sweeper removes its row."""


@dataclass
class Session:
    id: str
    client: str
    runner: str
    language: str
    handle: RunnerSession
    created: float = field(default_factory=time.time)
    used: float = field(default_factory=time.monotonic)
    runs: int = 0
    busy: bool = False
    packages: list[str] | None = None
    """The packages its first run asked for: a later call that names none gets them."""
    network: Any = None
    """Its first run's ``allowNetworking``: a later call that says nothing gets it."""
    tenant: str = "default"
    """The tenant it was opened for (its row in ``SessionPlaces``)."""

    def describe(self) -> dict[str, Any]:
        """What ``list_sessions`` shows of it."""
        return {
            "sessionId": self.id,
            "runner": self.runner,
            "language": self.language,
            "created": round(self.created),
            "idleSeconds": 0 if self.busy else round(time.monotonic() - self.used),
            "runs": self.runs,
        }


class SessionBook:
    """Open sessions of every client, their caps, the idle sweeper and the tombstones of ended ones."""

    def __init__(self, *, idle_s: float, max_total: int, max_per_client: int, replica: str | None = None) -> None:
        self.idle_s = idle_s
        self.replica = replica
        """This replica's name (``CODE_MODE_REPLICA_ID``): session ids start with ``<replica>~``, so that another
        replica, reached by a stateless client, says where the session is instead of "unknown"."""
        self.max_total = max_total
        self.max_per_client = max_per_client
        self._open: dict[str, Session] = {}
        self._ended: dict[str, OrderedDict[str, tuple[str, float]]] = {}
        """client → session id → (why it ended, when the tombstone expires)."""
        self._reserved = 0
        self._wake = anyio.Event()
        self.places: SessionPlaces | None = None
        """Where the sessions' metadata is recorded (the engine sets it once the database is open)."""
        self._pruned_at = 0.0
        self._unrecorded: list[tuple[str, str]] = []
        """(session id, tenant) of sessions that closed and whose rows the sweeper has still to delete."""

    @property
    def open_count(self) -> int:
        """Sessions open now (every client's)."""
        return len(self._open)

    def _of(self, client: str) -> list[Session]:
        return [s for s in self._open.values() if s.client == client]

    async def open(
        self, client: str, runner: str, language: str, opener: Callable[[], Awaitable[RunnerSession]]
    ) -> Session:
        """A new session of ``client`` on ``runner`` (``opener`` makes its worker); refused beyond the caps."""
        self.room(client)
        self._reserved += 1
        try:
            handle = await opener()
        finally:
            self._reserved -= 1
        token = secrets.token_urlsafe(18)
        session = Session(f"{self.replica}~{token}" if self.replica else token, client, runner, language, handle)
        session.tenant = current_tenant().name
        self._open[session.id] = session
        self._wake.set()
        if self.places is not None:
            opened = partial(self.places.opened, tenant=session.tenant, client=client, replica=self.replica or "")
            await self._record(partial(opened, session.id))
        return session

    async def used(self, session: Session) -> None:
        """After a run of ``session``: its row's last use (so that no replica's sweeper takes it for a dead one's)."""
        if self.places is not None and session.id in self._open:
            await self._record(partial(self.places.touched, session.id, tenant=session.tenant))

    async def _record(self, write: Callable[[], object]) -> None:
        try:
            await anyio.to_thread.run_sync(write)
        except (sqlite3.Error, OSError):
            logger.warning("recording a session's metadata failed", exc_info=True)

    def room(self, client: str) -> None:
        """``UnsupportedError`` naming the cap when ``client`` may not open another session now."""
        close = "close one with close_session (list_sessions shows yours) or let it idle out"
        if len(self._open) + self._reserved >= self.max_total:
            if self.max_total == 0:
                raise UnsupportedError("sessions are off on this server (CODE_MODE_MAX_SESSIONS=0)")
            raise UnsupportedError(
                f"too many sessions open on this server (CODE_MODE_MAX_SESSIONS={self.max_total}): {close}"
            )
        if len(self._of(client)) >= self.max_per_client:
            raise UnsupportedError(
                f"this client has {self.max_per_client} sessions open (CODE_MODE_MAX_SESSIONS_PER_CLIENT): {close}"
            )

    def get(self, client: str, session_id: str) -> Session:
        """The client's open session, else ``UnsupportedError``: why it ended (its tombstone) or "unknown"."""
        session = self._open.get(session_id)
        if session is not None and session.client == client:
            if session.handle.ended is None:
                return session
            self._bury(session, session.handle.ended)
        tomb = self._ended.get(client, {}).get(session_id)
        if tomb is not None and tomb[1] > time.monotonic():
            if tomb[0] == IDLE:
                raise UnsupportedError(
                    f"unknown session {session_id!r}: it was closed after {self.idle_s:g} s idle "
                    '(CODE_MODE_SESSION_IDLE_S); start one with session="new"'
                )
            raise UnsupportedError(f'session {session_id!r} has ended: {tomb[0]}; start another with session="new"')
        owner, tilde, _ = session_id.partition("~")
        if tilde and self.replica and owner != self.replica:
            raise UnsupportedError(
                f"session {session_id!r} lives on replica {owner[:64]!r}, and this request reached replica "
                f"{self.replica!r}: a session needs every request on one replica (stateful HTTP behind the balancer, "
                'not --stateless; see deploy/nginx); start one here with session="new"'
            )
        raise UnsupportedError(f'unknown session {session_id!r}: start one with session="new"')

    def list(self, client: str) -> list[dict[str, Any]]:
        self._reap_ended()
        return [s.describe() for s in self._of(client)]

    async def close(self, client: str, session_id: str) -> bool:
        """Close the client's session (its worker killed); False when it has no such open session."""
        session = self._open.get(session_id)
        if session is None or session.client != client:
            return False
        self._bury(session, "it was closed", tombstone=False)
        await session.handle.aclose()
        return True

    def ended(self, session: Session) -> None:
        """After a run: a session whose runner ended it (timeout, dead worker) leaves the book, with its reason."""
        if session.handle.ended is not None and session.id in self._open:
            self._bury(session, session.handle.ended)

    def _bury(self, session: Session, reason: str, *, tombstone: bool = True) -> None:
        if self._open.pop(session.id, None) is not None and self.places is not None:
            self._unrecorded.append((session.id, session.tenant))
            self._wake.set()
        if not tombstone:
            return
        tombs = self._ended.setdefault(session.client, OrderedDict())
        tombs[session.id] = (reason, time.monotonic() + self.idle_s)
        while len(tombs) > MAX_TOMBSTONES:
            tombs.popitem(last=False)

    def _reap_ended(self) -> None:
        for session in [s for s in self._open.values() if s.handle.ended is not None]:
            self._bury(session, session.handle.ended or "it ended")

    async def _flush(self) -> None:
        """Delete the rows of sessions that closed; on a sweep, also the rows no replica has used for long."""
        places = self.places
        if places is None:
            return
        while self._unrecorded:
            session_id, tenant = self._unrecorded.pop()
            await self._record(partial(places.closed, session_id, tenant=tenant))
        if time.monotonic() >= self._pruned_at + SWEEP_EVERY:
            self._pruned_at = time.monotonic()
            await self._record(partial(places.prune_idle, self.idle_s + STALE_MARGIN_S))

    async def sweep(self) -> None:
        """Forever: close sessions idle longer than ``idle_s``, and forget expired tombstones."""
        self._pruned_at = time.monotonic()
        while True:
            now = time.monotonic()
            idle = [s for s in self._open.values() if not s.busy and now - s.used >= self.idle_s]
            for session in idle:
                self._bury(session, IDLE)
                await session.handle.aclose()
            await self._flush()
            for client, tombs in list(self._ended.items()):
                for key in [k for k, (_, expires) in tombs.items() if expires <= now]:
                    del tombs[key]
                if not tombs:
                    del self._ended[client]
            pause = min(SWEEP_EVERY, self.idle_s / 2)
            if self._open:
                soonest = min(s.used for s in self._open.values()) + self.idle_s - now
                pause = max(0.05, min(pause, soonest))
            with anyio.move_on_after(pause if self._open or self._ended else SWEEP_EVERY):
                self._wake = anyio.Event()
                await self._wake.wait()

    async def aclose(self) -> None:
        """Close every session (the engine is closing): no session's worker outlives it."""
        with anyio.CancelScope(shield=True):
            for session in list(self._open.values()):
                self._bury(session, "the server closed", tombstone=False)
                await session.handle.aclose()
            await self._flush()

    def __len__(self) -> int:
        return len(self._open)


__all__ = ["Session", "SessionBook"]
