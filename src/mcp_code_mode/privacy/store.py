"""The persisted vault: ``DatabaseVault``, the vault's contract (``privacy.vault``) kept in the cache database.

For the HTTP server's stateless mode and for replicas (``CODE_MODE_PII_VAULT=database``): several processes
that share the stores' database (the SQLite cache file, or PostgreSQL with ``CODE_MODE_DATABASE_URL``) and the
key (``CODE_MODE_PII_KEY``) share every client's tokens, and a restart keeps them. The tables are
``pii_vault`` and ``pii_counters`` (SQLite migrations 5 and 8). Every row belongs to a tenant and every method
takes it: a client of one tenant never sees the tokens of a client of the same name in another.

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
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ..database import Database, Row, Tx, open_database
from .seal import Sealer
from .vault import DEFAULT_MAX_VALUES, DEFAULT_TTL, Entry, token_text

logger = logging.getLogger(__name__)

REFRESH_SLACK = 1.0
"""Seconds (at most, and at most a thousandth of the TTL) within which a token given or looked up again keeps
the expiry it was given: a value seen a thousand times in one run costs one write, not a thousand."""

_INSERT = (
    "INSERT INTO pii_vault(tenant, client, token, kind, number, value_mac, sealed, origins, expires_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_CATCH_UP = (
    "UPDATE pii_counters SET last = {greatest}(last, (SELECT max(number) FROM pii_vault"
    " WHERE tenant = ? AND client = ? AND kind = ?)) WHERE tenant = ? AND client = ? AND kind = ?"
)
_ROW = (
    "SELECT kind, value_mac, sealed, origins, expires_at FROM pii_vault WHERE tenant = ? AND client = ? AND token = ?"
)
_BY_VALUE = "SELECT token, origins, expires_at FROM pii_vault WHERE tenant = ? AND client = ? AND value_mac = ?"
_NEXT = (
    "INSERT INTO pii_counters(tenant, client, kind, last) VALUES (?, ?, ?, 1)"
    " ON CONFLICT(tenant, client, kind) DO UPDATE SET last = pii_counters.last + 1 RETURNING last"
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

    ``path``: a SQLite file, opened with a connection of its own (a file that is not a database, is corrupt or has
    a newer schema is moved aside and started anew; ``problems`` says so); or an open ``Database`` (shared, left
    open). Raises ``sqlite3.Error`` (``database.StoreError`` included) or ``OSError`` when it cannot be used at
    all, ``ValueError`` for a ``ttl`` that is not positive or a ``max_values`` below 1.
    """

    def __init__(
        self,
        path: Path | Database,
        sealer: Sealer,
        ttl: float = DEFAULT_TTL,
        max_values: int = DEFAULT_MAX_VALUES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl <= 0 or max_values < 1:
            raise ValueError("ttl must be positive and max_values at least 1")
        self.sealer = sealer
        self.ttl = ttl
        self.max_values = max_values
        self._clock = clock
        self._slack = min(REFRESH_SLACK, ttl / 1000)
        self._owned = isinstance(path, Path)
        self._db: Database = open_database(path) if isinstance(path, Path) else path
        self.path = self._db.where
        self.problems: list[str] = list(self._db.problems)
        self._catch_up = _CATCH_UP.format(greatest="max" if self._db.dialect == "sqlite" else "GREATEST")

    def close(self) -> None:
        if self._owned:
            self._db.close()

    def _write(self, body: Any) -> Any:
        return self._db.write(body, scope="pii")

    def __enter__(self) -> DatabaseVault:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ----- the contract --------------------------------------------------------------------------

    def token_for(self, client: str, kind: str, value: str, origin: str | None = None, *, tenant: str) -> str | None:
        """The value's token in this client's vault, given now if it had none (``origin`` is added to its
        origins); its expiry is moved to ``ttl`` from now (``REFRESH_SLACK``). None when the client holds
        ``max_values`` tokens that have not expired (expired ones are dropped first to make room)."""
        owner = self.sealer.mac("client", client)
        value_mac = self.sealer.mac("value", client, kind, value)
        now = self._clock()
        known = self._read(_BY_VALUE, (tenant, owner, value_mac))
        if known is not None and self._fresh(known, now) and (not origin or origin in _origins(known["origins"])):
            fresh: str = known["token"]
            return fresh
        data = _encode(value)

        def body(tx: Tx) -> str | None:
            token = self._refresh(tx, tenant, owner, value_mac, origin, now)
            if token is not None:
                return token
            held: int = tx.execute(
                "SELECT count(*) FROM pii_vault WHERE tenant = ? AND client = ?", (tenant, owner)
            ).fetchone()[0]
            if held >= self.max_values:
                held -= tx.execute(
                    "DELETE FROM pii_vault WHERE tenant = ? AND client = ? AND expires_at <= ?", (tenant, owner, now)
                ).rowcount
                if held >= self.max_values:
                    return None
            origins = _origins_text([origin] if origin else [])
            while True:
                number: int = tx.execute(_NEXT, (tenant, owner, kind)).fetchall()[0][0]
                token = token_text(kind, number)
                sealed = self.sealer.seal(data, owner + _encode(token))
                row = (tenant, owner, token, kind, number, value_mac, sealed, origins, now + self.ttl)
                if tx.execute(_INSERT, row).rowcount == 1:
                    return token
                # Not reached while the counters are intact: a row already has this token (its counter was
                # lowered or deleted by hand). The counter moves past the highest number in use; the next try
                # gets a free one.
                tx.execute(self._catch_up, (tenant, owner, kind, tenant, owner, kind))
                logger.warning("the vault's counter of a client's %s tokens was behind its rows; moved on", kind)

        given: str | None = self._write(body)
        return given

    def lookup(self, client: str, token: str, *, tenant: str) -> Entry | None:
        """What this client's token stands for, its expiry moved to ``ttl`` from now (``REFRESH_SLACK``); None
        when it is unknown, expired (the row is dropped), another client's, sealed under another key, or altered."""
        owner = self.sealer.mac("client", client)
        now = self._clock()
        known = self._read(_ROW, (tenant, owner, token))
        if known is None:
            return None
        if self._fresh(known, now):
            return self._entry(client, owner, token, known)

        def body(tx: Tx) -> Entry | None:
            row = tx.execute(_ROW, (tenant, owner, token)).fetchone()
            if row is None:
                return None
            if row["expires_at"] <= now:
                tx.execute(
                    "DELETE FROM pii_vault WHERE tenant = ? AND client = ? AND token = ?", (tenant, owner, token)
                )
                return None
            entry = self._entry(client, owner, token, row)
            if entry is not None:
                tx.execute(
                    "UPDATE pii_vault SET expires_at = ? WHERE tenant = ? AND client = ? AND token = ?",
                    (now + self.ttl, tenant, owner, token),
                )
            return entry

        found: Entry | None = self._write(body)
        return found

    def forget(self, client: str, *, tenant: str) -> None:
        """Drop every token and counter of a client (its session ended: its name is not used again)."""
        owner = self.sealer.mac("client", client)

        def body(tx: Tx) -> None:
            tx.execute("DELETE FROM pii_vault WHERE tenant = ? AND client = ?", (tenant, owner))
            tx.execute("DELETE FROM pii_counters WHERE tenant = ? AND client = ?", (tenant, owner))

        self._write(body)

    def prune(self) -> int:
        """The host's sweep: drop every expired token in the database, of every tenant, client and key; how many
        were dropped. The counters stay: no number is given twice."""
        now = self._clock()
        dropped: int = self._write(
            lambda tx: tx.execute("DELETE FROM pii_vault WHERE expires_at <= ?", (now,)).rowcount
        )
        return dropped

    def size(self, client: str, *, tenant: str) -> int:
        """How many tokens the client holds, expired ones not dropped yet included (as ``MemoryVault.size``)."""
        owner = self.sealer.mac("client", client)
        held = self._db.read("SELECT count(*) FROM pii_vault WHERE tenant = ? AND client = ?", (tenant, owner))
        return int(held[0][0])

    # ----- rows ----------------------------------------------------------------------------------

    def _read(self, sql: str, args: tuple[object, ...]) -> Row | None:
        rows = self._db.read(sql, args)
        return rows[0] if rows else None

    def _fresh(self, row: Row, now: float) -> bool:
        """Whether a row's expiry was moved less than ``REFRESH_SLACK`` ago, so that it need not be written."""
        expires: float = row["expires_at"]
        return expires >= now + self.ttl - self._slack

    def _refresh(
        self, tx: Tx, tenant: str, owner: bytes, value_mac: bytes, origin: str | None, now: float
    ) -> str | None:
        """The live token of a value, its expiry moved and ``origin`` added; None when it has none (an expired
        one is dropped)."""
        row = tx.execute(_BY_VALUE, (tenant, owner, value_mac)).fetchone()
        if row is None:
            return None
        token: str = row["token"]
        if row["expires_at"] <= now:
            tx.execute("DELETE FROM pii_vault WHERE tenant = ? AND client = ? AND token = ?", (tenant, owner, token))
            return None
        origins = _origins(row["origins"])
        if origin and origin not in origins:
            tx.execute(
                "UPDATE pii_vault SET expires_at = ?, origins = ? WHERE tenant = ? AND client = ? AND token = ?",
                (now + self.ttl, _origins_text([*origins, origin]), tenant, owner, token),
            )
        else:
            tx.execute(
                "UPDATE pii_vault SET expires_at = ? WHERE tenant = ? AND client = ? AND token = ?",
                (now + self.ttl, tenant, owner, token),
            )
        return token

    def _entry(self, client: str, owner: bytes, token: str, row: Row) -> Entry | None:
        """The row's entry, or None when its value does not open here or does not match its MAC."""
        data = self.sealer.open(bytes(row["sealed"]), owner + _encode(token))
        if data is None:
            return None
        kind: str = row["kind"]
        try:
            value = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return None
        stored = bytes(row["value_mac"]) if isinstance(row["value_mac"], bytes | memoryview) else row["value_mac"]
        if not isinstance(stored, bytes) or not hmac.compare_digest(
            self.sealer.mac("value", client, kind, value), stored
        ):
            return None  # the kind was altered, or the row belongs to another value
        return Entry(token, kind, value, frozenset(_origins(row["origins"])))


__all__ = ["DatabaseVault"]
