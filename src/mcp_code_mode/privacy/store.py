"""The persisted vault: ``DatabaseVault``, the vault's contract (``privacy.vault``) kept in the cache database.

For the HTTP server's stateless mode and for replicas (``CODE_MODE_PII_VAULT=database``): several processes
that share the cache file and the key (``CODE_MODE_PII_KEY``) share every client's tokens, and a restart
keeps them. The tables are ``pii_vault`` and ``pii_counters`` (migration 5), opened by ``ScriptStore``'s own
code as the audit log is: the same checks, migrations and pragmas, a connection of its own.

What is written, per row of ``pii_vault``:

- ``client``: ``Sealer.mac("client", name)``, never the client's name;
- ``value_mac``: ``Sealer.mac("value", name, kind, value)``, to find a value's token again;
- ``sealed``: the value sealed with the client's MAC and the token as associated data, so that a sealed value
  opens only in the row it was written for (moved to another row or client, it does not open);
- ``token``, ``kind``, ``number`` and ``origins`` (the servers the value came from) in plaintext;
- ``expires_at``: seconds since the epoch (``clock``, ``time.time`` by default: the processes that share the
  file compare each other's times, so their clocks must agree).

So a value is never written in plaintext, and without the key neither a value nor a client's name can be read
or checked against a guess. Whoever can write the file can still delete tokens, change their expiry, or add a
server to a token's ``origins`` (which are not authenticated) and so to the servers its value is restored for
by default; they cannot change what a token stands for (a row whose value does not open, or does not match
its MAC, is looked up as None).

A token given or looked up again has its expiry moved to ``ttl`` from then, as in ``MemoryVault``, except
within ``REFRESH_SLACK`` of the last move (at most a second, and at most a thousandth of the TTL): then it is
read and nothing is written. So a token may expire up to that much before ``ttl`` after its last use.

``pii_counters`` holds the last number given per client and kind; it is incremented in the transaction that
adds the token, and only ``forget`` removes it, so a number is never given twice to a client, whichever
process gives it, even after its token expired and was pruned. Every write is one short ``BEGIN IMMEDIATE``
transaction committed before the method returns; a value's lookup and its new token are in the same
transaction, so two processes that ask for the same value at once get one token. A writer waits up to
``store.BUSY_TIMEOUT_MS`` for another (then ``sqlite3.OperationalError``). Every method blocks: from async
code, call it in a worker thread (the vault is thread-safe).

Processes with different keys may share the file without harm: each sees only its own rows (a client's MAC
differs with the key), and their numbers are counted apart. ``prune`` drops every expired row, whichever key
wrote it.
"""

from __future__ import annotations

import hmac
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from ..cache.store import ScriptStore
from .seal import Sealer
from .vault import DEFAULT_MAX_VALUES, DEFAULT_TTL, Entry, token_text

logger = logging.getLogger(__name__)

REFRESH_SLACK = 1.0
"""Seconds (at most, and at most a thousandth of the TTL) within which a token given or looked up again keeps
the expiry it was given: a value seen a thousand times in one run costs one write, not a thousand."""

_INSERT = (
    "INSERT INTO pii_vault(client, token, kind, number, value_mac, sealed, origins, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_CATCH_UP = (
    "UPDATE pii_counters SET last = max(last, (SELECT max(number) FROM pii_vault WHERE client = ? AND kind = ?))"
    " WHERE client = ? AND kind = ?"
)
_ROW = "SELECT kind, value_mac, sealed, origins, expires_at FROM pii_vault WHERE client = ? AND token = ?"
_NEXT = (
    "INSERT INTO pii_counters(client, kind, last) VALUES (?, ?, 1)"
    " ON CONFLICT(client, kind) DO UPDATE SET last = last + 1 RETURNING last"
)


def _encode(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def _origins(text: str) -> list[str]:
    """A row's origins; what is not a JSON list of strings counts as none."""
    try:
        parsed = json.loads(text)
    except (ValueError, TypeError):
        return []
    if not isinstance(parsed, list):
        return []
    return [o for o in parsed if isinstance(o, str)]


def _origins_text(origins: list[str]) -> str:
    return json.dumps(sorted(set(origins)), ensure_ascii=False)


class DatabaseVault:
    """The vault in the cache database file at ``path``, values sealed by ``sealer``. Open on construction,
    ``close`` after (it cannot be used again); thread-safe.

    Opening creates, checks and migrates the file with ``ScriptStore.open`` (a file that is not a database, is
    corrupt or has a newer schema is moved aside and started anew; ``problems`` says so). Raises
    ``sqlite3.Error`` or ``OSError`` when the file cannot be used at all, ``ValueError`` for a ``ttl`` that is
    not positive or a ``max_values`` below 1.
    """

    def __init__(
        self,
        path: Path,
        sealer: Sealer,
        ttl: float = DEFAULT_TTL,
        max_values: int = DEFAULT_MAX_VALUES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl <= 0 or max_values < 1:
            raise ValueError("ttl must be positive and max_values at least 1")
        self.path = path
        self.sealer = sealer
        self.ttl = ttl
        self.max_values = max_values
        self._clock = clock
        self._slack = min(REFRESH_SLACK, ttl / 1000)
        self._store = ScriptStore(path).open()  # its own connection, opened and migrated by the cache's code
        self.problems: list[str] = list(self._store.problems)

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> DatabaseVault:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ----- the contract --------------------------------------------------------------------------

    def token_for(self, client: str, kind: str, value: str, origin: str | None = None) -> str | None:
        """The value's token in this client's vault, given now if it had none (``origin`` is added to its
        origins); its expiry is moved to ``ttl`` from now (``REFRESH_SLACK``). None when the client holds
        ``max_values`` tokens that have not expired (expired ones are dropped first to make room)."""
        owner = self.sealer.mac("client", client)
        value_mac = self.sealer.mac("value", client, kind, value)
        now = self._clock()
        known = self._read(
            "SELECT token, origins, expires_at FROM pii_vault WHERE client = ? AND value_mac = ?", (owner, value_mac)
        )
        if known is not None and self._fresh(known, now) and (not origin or origin in _origins(known["origins"])):
            fresh: str = known["token"]
            return fresh
        data = _encode(value)

        def body(conn: sqlite3.Connection) -> str | None:
            token = self._refresh(conn, owner, value_mac, origin, now)
            if token is not None:
                return token
            held: int = conn.execute("SELECT count(*) FROM pii_vault WHERE client = ?", (owner,)).fetchone()[0]
            if held >= self.max_values:
                held -= conn.execute(
                    "DELETE FROM pii_vault WHERE client = ? AND expires_at <= ?", (owner, now)
                ).rowcount
                if held >= self.max_values:
                    return None
            origins = _origins_text([origin] if origin else [])
            while True:
                number: int = conn.execute(_NEXT, (owner, kind)).fetchall()[0][0]
                token = token_text(kind, number)
                sealed = self.sealer.seal(data, owner + _encode(token))
                row = (owner, token, kind, number, value_mac, sealed, origins, now + self.ttl)
                if conn.execute(_INSERT, row).rowcount == 1:
                    return token
                # Not reached while the counters are intact: a row already has this token (its counter was
                # lowered or deleted by hand). The counter moves past the highest number in use; the next try
                # gets a free one.
                conn.execute(_CATCH_UP, (owner, kind, owner, kind))
                logger.warning("the vault's counter of a client's %s tokens was behind its rows; moved on", kind)

        given: str | None = self._store._write(body)
        return given

    def lookup(self, client: str, token: str) -> Entry | None:
        """What this client's token stands for, its expiry moved to ``ttl`` from now (``REFRESH_SLACK``); None
        when it is unknown, expired (the row is dropped), another client's, sealed under another key, or altered."""
        owner = self.sealer.mac("client", client)
        now = self._clock()
        known = self._read(_ROW, (owner, token))
        if known is None:
            return None
        if self._fresh(known, now):
            return self._entry(client, owner, token, known)

        def body(conn: sqlite3.Connection) -> Entry | None:
            row = conn.execute(_ROW, (owner, token)).fetchone()
            if row is None:
                return None
            if row["expires_at"] <= now:
                conn.execute("DELETE FROM pii_vault WHERE client = ? AND token = ?", (owner, token))
                return None
            entry = self._entry(client, owner, token, row)
            if entry is not None:
                conn.execute(
                    "UPDATE pii_vault SET expires_at = ? WHERE client = ? AND token = ?",
                    (now + self.ttl, owner, token),
                )
            return entry

        found: Entry | None = self._store._write(body)
        return found

    def forget(self, client: str) -> None:
        """Drop every token and counter of a client (its session ended: its name is not used again)."""
        owner = self.sealer.mac("client", client)

        def body(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM pii_vault WHERE client = ?", (owner,))
            conn.execute("DELETE FROM pii_counters WHERE client = ?", (owner,))

        self._store._write(body)

    def prune(self) -> int:
        """Drop every expired token in the file, of every client and key; how many were dropped. The counters
        stay: no number is given twice."""
        now = self._clock()
        dropped: int = self._store._write(
            lambda conn: conn.execute("DELETE FROM pii_vault WHERE expires_at <= ?", (now,)).rowcount
        )
        return dropped

    def size(self, client: str) -> int:
        """How many tokens the client holds, expired ones not dropped yet included (as ``MemoryVault.size``)."""
        owner = self.sealer.mac("client", client)
        with self._store._lock:
            held: int = self._store.conn.execute(
                "SELECT count(*) FROM pii_vault WHERE client = ?", (owner,)
            ).fetchone()[0]
        return held

    # ----- rows ----------------------------------------------------------------------------------

    def _read(self, sql: str, args: tuple[object, ...]) -> sqlite3.Row | None:
        with self._store._lock:
            row: sqlite3.Row | None = self._store.conn.execute(sql, args).fetchone()
        return row

    def _fresh(self, row: sqlite3.Row, now: float) -> bool:
        """Whether a row's expiry was moved less than ``REFRESH_SLACK`` ago, so that it need not be written."""
        expires: float = row["expires_at"]
        return expires >= now + self.ttl - self._slack

    def _refresh(
        self, conn: sqlite3.Connection, owner: bytes, value_mac: bytes, origin: str | None, now: float
    ) -> str | None:
        """The live token of a value, its expiry moved and ``origin`` added; None when it has none (an expired
        one is dropped)."""
        row = conn.execute(
            "SELECT token, origins, expires_at FROM pii_vault WHERE client = ? AND value_mac = ?", (owner, value_mac)
        ).fetchone()
        if row is None:
            return None
        token: str = row["token"]
        if row["expires_at"] <= now:
            conn.execute("DELETE FROM pii_vault WHERE client = ? AND token = ?", (owner, token))
            return None
        origins = _origins(row["origins"])
        if origin and origin not in origins:
            conn.execute(
                "UPDATE pii_vault SET expires_at = ?, origins = ? WHERE client = ? AND token = ?",
                (now + self.ttl, _origins_text([*origins, origin]), owner, token),
            )
        else:
            conn.execute(
                "UPDATE pii_vault SET expires_at = ? WHERE client = ? AND token = ?", (now + self.ttl, owner, token)
            )
        return token

    def _entry(self, client: str, owner: bytes, token: str, row: sqlite3.Row) -> Entry | None:
        """The row's entry, or None when its value does not open here or does not match its MAC."""
        data = self.sealer.open(row["sealed"], owner + _encode(token))
        if data is None:
            return None
        kind: str = row["kind"]
        try:
            value = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return None
        stored = row["value_mac"]
        if not isinstance(stored, bytes) or not hmac.compare_digest(
            self.sealer.mac("value", client, kind, value), stored
        ):
            return None  # the kind was altered, or the row belongs to another value
        return Entry(token, kind, value, frozenset(_origins(row["origins"])))


__all__ = ["DatabaseVault"]
