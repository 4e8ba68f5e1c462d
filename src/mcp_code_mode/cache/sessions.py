"""``SessionPlaces``: where each open session lives (table ``sessions``: SQLite migration 8, PostgreSQL's 1).

A session's worker is a process on one replica; its metadata (tenant, owning client, replica name, opened and
last used) is in the shared database, so that another replica asked about the session can say where it lives
instead of answering "unknown session". Only metadata: nothing of the session's state is here. Every method
takes the tenant; one tenant's session ids are unknown to another. ``prune_idle`` is the host's sweep."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..database import Database, open_database


@dataclass(frozen=True)
class SessionPlace:
    session_id: str
    client: str
    replica: str
    opened_at: float
    last_used_at: float


class SessionPlaces:
    """Thread-safe. ``target``: a SQLite file (opened here, closed by ``close``) or an open ``Database``."""

    def __init__(self, target: Path | Database) -> None:
        self._owned = isinstance(target, Path)
        self._db: Database = open_database(target) if isinstance(target, Path) else target

    def close(self) -> None:
        if self._owned:
            self._db.close()

    def opened(self, session_id: str, *, tenant: str, client: str, replica: str, now: float | None = None) -> None:
        """Record a session opened on ``replica`` (an id used again is moved there)."""
        moment = time.time() if now is None else now
        self._db.write(
            lambda tx: tx.execute(
                "INSERT INTO sessions(tenant, id, client, replica, opened_at, last_used_at) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(tenant, id) DO UPDATE SET client = excluded.client, replica = excluded.replica,"
                " opened_at = excluded.opened_at, last_used_at = excluded.last_used_at",
                (tenant, session_id, client, replica, moment, moment),
            ),
            scope="sessions",
        )

    def touched(self, session_id: str, *, tenant: str, now: float | None = None) -> bool:
        """Note a use of the session; False when it is not recorded (for this tenant)."""
        moment = time.time() if now is None else now
        changed: int = self._db.write(
            lambda tx: (
                tx.execute(
                    "UPDATE sessions SET last_used_at = ? WHERE tenant = ? AND id = ?", (moment, tenant, session_id)
                ).rowcount
            ),
            scope="sessions",
        )
        return changed == 1

    def closed(self, session_id: str, *, tenant: str) -> None:
        self._db.write(
            lambda tx: tx.execute("DELETE FROM sessions WHERE tenant = ? AND id = ?", (tenant, session_id)),
            scope="sessions",
        )

    def where(self, session_id: str, *, tenant: str) -> SessionPlace | None:
        rows = self._db.read(
            "SELECT id, client, replica, opened_at, last_used_at FROM sessions WHERE tenant = ? AND id = ?",
            (tenant, session_id),
        )
        if not rows:
            return None
        r = rows[0]
        return SessionPlace(str(r[0]), str(r[1]), str(r[2]), float(r[3]), float(r[4]))

    def prune_idle(self, idle_s: float, *, now: float | None = None) -> int:
        """The host's sweep: forget sessions of every tenant not used for ``idle_s`` seconds (a replica that died
        without closing them); how many."""
        cutoff = (time.time() if now is None else now) - idle_s
        gone: int = self._db.write(
            lambda tx: tx.execute("DELETE FROM sessions WHERE last_used_at < ?", (cutoff,)).rowcount, scope="sessions"
        )
        return gone
