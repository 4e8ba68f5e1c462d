"""The audit log: every tool call a run asked for, whatever was decided about it; and the plans clients approve.

Both live in the stores' database (``database``: the SQLite file ``scripts.db``, tables ``audit`` and ``plans``,
migrations 4 and 8, its own connection; or PostgreSQL, shared). Writes follow the store's discipline: each is one
short transaction committed before the method returns (SQLite: ``BEGIN IMMEDIATE``; with WAL and
``synchronous=NORMAL`` a committed row is in the WAL file, so it survives ``kill -9`` of the process, a power cut
may lose the last transactions). Several server processes share the file or the server; a SQLite writer waits up
to ``BUSY_TIMEOUT_MS`` for another. Every method blocks: from async code, call it in a worker thread (the log is
thread-safe).

Every row belongs to a tenant: every method takes ``tenant`` and reads, changes or deletes that tenant's rows
only (a plan of another tenant is unknown). ``prune_expired`` is the host's retention sweep over every tenant.

A row holds the arguments' digest (``arguments_digest``: SHA-256 of their canonical JSON, so that the same call
is recognisable across runs) and a short ``preview`` in which the values of secret-looking keys are
``[REDACTED]`` (``SECRET_KEY_PARTS``). The digest is of the arguments as they were, secrets included: whoever
can read the log can check a guess of a whole argument set, not read one.

Decisions (``Decision``):

- ``allowed``: the policy let the call through without asking; it was made.
- ``approved``: the client was asked (elicitation) and approved; it was made.
- ``denied``: the policy refused it, or the client was asked and declined; not made.
- ``planned``: a plan run recorded the call instead of making it.
- ``over_cap``: a cap on calls was reached; not made.
- ``refused``: it could not be made: unknown tool, invalid arguments, or approval needed and no way to ask.

``ok`` is whether the call was made and the tool succeeded; ``error`` says why not, when something failed.

A plan (``save_plan``) is bound to a code hash and a client, expires after its TTL, and is used once
(``mark_plan_used`` succeeds for one caller only, across processes). ``prune`` removes audit rows older than the
retention (``CODE_MODE_AUDIT_DAYS``) and every expired plan.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, get_args

from ..database import Database, Row, Tx, open_database

logger = logging.getLogger(__name__)

Decision = Literal["allowed", "approved", "denied", "planned", "over_cap", "refused"]
DECISIONS: tuple[str, ...] = get_args(Decision)

SECRET_KEY_PARTS: tuple[str, ...] = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "auth",
    "cookie",
    "credential",
    "privatekey",
)
"""A key whose name, lower-cased and without ``-``, ``_``, ``.`` and spaces, contains one of these has its value
redacted in previews, at any depth: ``password``, ``passwd``, ``secret``, ``token``, ``api_key``/``apikey``,
``authorization``/``auth``, ``cookie``, ``credential``, ``private_key``. So ``X-Api-Key``, ``githubToken``,
``client_secret``, ``credentials`` and ``Set-Cookie`` are redacted, and so are the harmless ``author`` and
``max_tokens`` (a preview hides too much rather than too little). Secrets in values under other keys (a URL's
query string, a ``Bearer`` header in a list) are not recognised."""

REDACTED = "[REDACTED]"
ELLIPSIS = "…"
PREVIEW_LIMIT = 200
ERROR_LIMIT = 1000
"""Characters of a call's error that are stored."""
MIN_PREFIX = 8
"""The shortest hash prefix ``query(run=…)`` matches."""
ONE_DAY = 86_400.0

_SEPARATORS = str.maketrans("", "", "-_. ")
_HEX = frozenset("0123456789abcdef")
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": ONE_DAY, "w": 7 * ONE_DAY}
_COLUMNS = (
    "at",
    "client",
    "run_id",
    "code_hash",
    "run_hash",
    "server",
    "tool",
    "arguments_digest",
    "preview",
    "decision",
    "ms",
    "ok",
    "error",
    "pii",
)
_INSERT = f"INSERT INTO audit(tenant, {', '.join(_COLUMNS)}) VALUES (?, {', '.join('?' for _ in _COLUMNS)})"


# ----- arguments ---------------------------------------------------------------------------------


def arguments_digest(arguments: Any) -> str:
    """SHA-256 (hex) of the arguments' canonical JSON: keys sorted, no spaces, UTF-8; key order does not matter."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_secret_key(key: str) -> bool:
    """Whether a key's value is redacted in previews (see ``SECRET_KEY_PARTS``)."""
    name = key.lower().translate(_SEPARATORS)
    return any(part in name for part in SECRET_KEY_PARTS)


def redact(value: Any) -> Any:
    """A copy of ``value`` in which every secret-looking key's value is ``REDACTED``, at any depth."""
    if isinstance(value, Mapping):
        return {str(k): REDACTED if is_secret_key(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def cut(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and ``ELLIPSIS``, ``limit`` in all."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def preview(arguments: Any, limit: int = PREVIEW_LIMIT) -> str:
    """The arguments as compact JSON, secrets redacted, at most ``limit`` characters (cut ones end in ``…``)."""
    text = json.dumps(redact(arguments), separators=(",", ":"), ensure_ascii=False, default=repr)
    return cut(text, limit)


# ----- entries -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    """One tool call a run asked for, and what became of it."""

    at: float
    """When the call was asked for (seconds since the epoch)."""
    client: str
    """The client: its MCP session, or its token's name over HTTP."""
    run_id: str
    """The run that asked (unique per run)."""
    code_hash: str
    """The hash of the run's request (``keys.code_key``), known before it runs."""
    run_hash: str | None = None
    """The run's hash (``RunResult.hash``), known when it ends (``AuditLog.set_run_hash``)."""
    server: str
    tool: str
    arguments_digest: str
    preview: str
    decision: Decision
    ms: float = 0.0
    """How long the call took (0 for one not made)."""
    ok: bool = False
    error: str | None = None
    pii: dict[str, Any] | None = None
    """What was done to the tokens in the arguments (``privacy.PiiNote``: the kinds restored and withheld)."""

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, got {self.decision!r}")

    @classmethod
    def of_call(
        cls,
        *,
        server: str,
        tool: str,
        arguments: Any,
        decision: Decision,
        client: str,
        run_id: str,
        code_hash: str,
        ms: float = 0.0,
        ok: bool = False,
        error: str | None = None,
        run_hash: str | None = None,
        at: float | None = None,
        preview_limit: int = PREVIEW_LIMIT,
        pii: dict[str, Any] | None = None,
    ) -> AuditEntry:
        """An entry for a call with these arguments: their digest and redacted preview computed here."""
        return cls(
            at=time.time() if at is None else at,
            client=client,
            run_id=run_id,
            code_hash=code_hash,
            run_hash=run_hash,
            server=server,
            tool=tool,
            arguments_digest=arguments_digest(arguments),
            preview=preview(arguments, preview_limit),
            decision=decision,
            ms=ms,
            ok=ok,
            error=error,
            pii=pii,
        )

    def _row(self) -> tuple[Any, ...]:
        error = None if self.error is None else cut(self.error, ERROR_LIMIT)
        return (
            self.at,
            self.client,
            self.run_id,
            self.code_hash,
            self.run_hash,
            self.server,
            self.tool,
            self.arguments_digest,
            self.preview,
            self.decision,
            self.ms,
            int(self.ok),
            error,
            json.dumps(self.pii) if self.pii else None,
        )


def iso(ts: float) -> str:
    """``2026-12-01T10:00:00.123Z``: UTC, to the millisecond."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_since(text: str, *, now: float | None = None) -> float:
    """A time (seconds since the epoch) from ISO 8601 (``2026-12-01T10:00``, UTC unless it names an offset;
    ``2026-12-01``) or an age before ``now`` (``90s``, ``15m``, ``2h``, ``3d``, ``1w``). ``ValueError`` names it."""
    age = _AGE.match(text)
    if age is not None:
        return (time.time() if now is None else now) - float(age.group(1)) * _UNITS[age.group(2).lower()]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (give an ISO 8601 time such as 2026-12-01T10:00, in UTC unless it has an "
            "offset, or an age such as 15m, 2h, 3d)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _entry_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "at": iso(row["at"]),
        "client": row["client"],
        "runId": row["run_id"],
        "codeHash": row["code_hash"],
        "runHash": row["run_hash"],
        "server": row["server"],
        "tool": row["tool"],
        "argumentsDigest": row["arguments_digest"],
        "preview": row["preview"],
        "decision": row["decision"],
        "ms": row["ms"],
        "ok": bool(row["ok"]),
        "error": row["error"],
        **({"pii": json.loads(row["pii"])} if row["pii"] else {}),
    }


def _plan_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "codeHash": row["code_hash"],
        "client": row["client"],
        "createdAt": row["created_at"],
        "expiresAt": row["expires_at"],
        "calls": json.loads(row["calls"]),
        "usedAt": row["used_at"],
    }


def _glob_regex(pattern: str) -> str:
    """A GLOB pattern (``*``, ``?``, ``[…]``, case-sensitive, whole string) as a POSIX regular expression."""
    out = ["^"]
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    out.append("$")
    return "".join(out)


def _upper_bound(prefix: str) -> str:
    """The least string greater than every string that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


# ----- the log -----------------------------------------------------------------------------------


class AuditLog:
    """The audit log and the plans in one cache database file. Thread-safe; open on construction, ``close`` after.

    ``target``: a SQLite file, opened (created, checked and migrated, a broken one moved aside: ``problems`` says
    so) with a connection of its own and closed by ``close``; or an open ``Database``, shared and left open.
    Raises ``sqlite3.Error`` (``database.StoreError`` included) or ``OSError`` when it cannot be used at all.
    """

    def __init__(self, target: Path | Database) -> None:
        self._owned = isinstance(target, Path)
        self._db: Database = open_database(target) if isinstance(target, Path) else target
        self.path = self._db.where
        self.problems: list[str] = list(self._db.problems)

    def close(self) -> None:
        if self._owned:
            self._db.close()

    def database_close(self) -> None:
        """Close a database it was given (a command that opened it for the log alone)."""
        self._db.close()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _read(self, sql: str, args: Iterable[Any] = ()) -> list[Row]:
        return self._db.read(sql, tuple(args))

    def _write(self, body: Any) -> Any:
        return self._db.write(body, scope="audit")

    # ----- audit ---------------------------------------------------------------------------------

    def record(self, entry: AuditEntry, *, tenant: str) -> None:
        """Store one entry of ``tenant``, committed before this returns."""
        self._write(lambda tx: tx.execute(_INSERT, (tenant, *entry._row())))

    def record_many(self, entries: Iterable[AuditEntry], *, tenant: str) -> None:
        """Store several entries of ``tenant`` in one transaction (all or none)."""
        rows = [(tenant, *e._row()) for e in entries]
        if rows:
            self._write(lambda tx: tx.executemany(_INSERT, rows))

    def set_run_hash(self, run_id: str, run_hash: str, *, tenant: str) -> int:
        """Give every entry of a run the run's hash, known when it ended; returns how many entries."""
        updated: int = self._write(
            lambda tx: (
                tx.execute(
                    "UPDATE audit SET run_hash = ? WHERE tenant = ? AND run_id = ?", (run_hash, tenant, run_id)
                ).rowcount
            )
        )
        return updated

    def query(
        self,
        *,
        run: str | None = None,
        tool: str | None = None,
        since: float | None = None,
        client: str | None = None,
        limit: int = 200,
        tenant: str,
    ) -> list[dict[str, Any]]:
        """Entries, newest first, as JSON-able dicts with camelCase keys (``at`` in ISO 8601 UTC).

        ``run`` matches a run id, code hash or run hash exactly, or as a prefix of at least ``MIN_PREFIX`` hex
        digits; ``tool`` is a glob (``*``, ``?``, ``[…]``; case-sensitive) over ``server.tool`` or the bare tool
        name; ``since`` keeps entries at or after that time; ``client`` matches exactly.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where: list[str] = ["tenant = ?"]
        args: list[Any] = [tenant]
        if run is not None:
            key = run.strip()
            matches = ["run_id = ?", "code_hash = ?", "run_hash = ?"]
            args += [key] * 3
            prefix = key.lower()
            if len(prefix) >= MIN_PREFIX and set(prefix) <= _HEX:
                for column in ("run_id", "code_hash", "run_hash"):
                    matches.append(f"({column} >= ? AND {column} < ?)")
                    args += [prefix, _upper_bound(prefix)]
            where.append(f"({' OR '.join(matches)})")
        if tool is not None:
            if self._db.dialect == "postgresql":
                pattern = _glob_regex(tool)
                where.append("((server || '.' || tool) ~ ? OR tool ~ ?)")
                args += [pattern, pattern]
            else:
                where.append("((server || '.' || tool) GLOB ? OR tool GLOB ?)")
                args += [tool, tool]
        if since is not None:
            where.append("at >= ?")
            args.append(since)
        if client is not None:
            where.append("client = ?")
            args.append(client)
        clause = f"WHERE {' AND '.join(where)}"
        rows = self._read(f"SELECT * FROM audit {clause} ORDER BY at DESC, id DESC LIMIT ?", [*args, limit])
        return [_entry_json(r) for r in rows]

    def prune(self, days: float, *, tenant: str, now: float | None = None) -> int:
        """Delete the tenant's entries older than ``days`` and its expired plans; returns how many entries went."""
        return self._prune(days, tenant, now)

    def prune_expired(self, days: float, *, now: float | None = None) -> int:
        """The host's retention sweep (``CODE_MODE_AUDIT_DAYS``): entries older than ``days`` and expired plans
        of every tenant; returns how many entries went. Never called for a request."""
        return self._prune(days, None, now)

    def _prune(self, days: float, tenant: str | None, now: float | None) -> int:
        if days <= 0:
            raise ValueError(f"days must be positive, got {days:g}")
        moment = time.time() if now is None else now
        cutoff = moment - days * ONE_DAY
        only, args = ("AND tenant = ?", (tenant,)) if tenant is not None else ("", ())

        def body(tx: Tx) -> tuple[int, int]:
            entries = tx.execute(f"DELETE FROM audit WHERE at < ? {only}", (cutoff, *args)).rowcount
            plans = tx.execute(f"DELETE FROM plans WHERE expires_at <= ? {only}", (moment, *args)).rowcount
            return entries, plans

        entries, plans = self._write(body)
        logger.debug("pruned %d audit entries older than %g days and %d expired plans", entries, days, plans)
        return entries

    # ----- plans ---------------------------------------------------------------------------------

    def save_plan(
        self,
        plan_id: str,
        code_hash: str,
        client: str,
        ttl_s: float,
        calls: list[dict[str, Any]],
        *,
        tenant: str,
        now: float | None = None,
    ) -> None:
        """Keep a plan for ``ttl_s`` seconds: the calls a run of ``code_hash`` would make, for ``client``.

        An id already used raises ``sqlite3.IntegrityError`` (``database.StoreIntegrityError`` on PostgreSQL; a plan
        is never replaced)."""
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s:g}")
        created = time.time() if now is None else now
        text = json.dumps(calls, ensure_ascii=False, default=repr)
        self._write(
            lambda tx: tx.execute(
                "INSERT INTO plans(id, tenant, code_hash, client, created_at, expires_at, calls)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (plan_id, tenant, code_hash, client, created, created + ttl_s, text),
            )
        )

    def load_plan(self, plan_id: str, *, tenant: str, now: float | None = None) -> dict[str, Any] | None:
        """The plan (``id``, ``codeHash``, ``client``, ``createdAt``, ``expiresAt``, ``calls``, ``usedAt``; times
        in seconds since the epoch), or None when it is unknown or expired. A used plan is returned with its
        ``usedAt``: the caller checks it, and the code hash and client it is bound to."""
        moment = time.time() if now is None else now
        rows = self._read(
            "SELECT * FROM plans WHERE id = ? AND tenant = ? AND expires_at > ?", (plan_id, tenant, moment)
        )
        return _plan_json(rows[0]) if rows else None

    def mark_plan_used(self, plan_id: str, *, tenant: str, now: float | None = None) -> bool:
        """Mark the plan used; True for the one caller that did so, False when it is unknown, expired or used."""
        moment = time.time() if now is None else now
        changed: int = self._write(
            lambda tx: (
                tx.execute(
                    "UPDATE plans SET used_at = ? WHERE id = ? AND tenant = ? AND used_at IS NULL AND expires_at > ?",
                    (moment, plan_id, tenant, moment),
                ).rowcount
            )
        )
        return changed == 1


class AuditWriter:
    """Writes a server's audit entries from a thread of its own, in batches, so a tool call's answer never
    waits for the database (one commit per call on the event loop cost about 1 ms a call).

    ``put`` takes what an entry is made of; building it (digest, redacted preview) and committing happen
    on the writer's thread. ``flush`` returns once everything put so far is committed: the engine flushes
    before it answers a run, so every call of a run that was answered is in the log (a ``kill -9`` can
    lose only calls of a run that had not been answered yet)."""

    def __init__(self, log: AuditLog, *, batch: int = 500) -> None:
        self.log = log
        self._batch = batch
        self._queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._pending = 0
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="audit-writer", daemon=True)
        self._thread.start()

    def put(self, *, tenant: str, **fields: Any) -> None:
        """Queue one call of ``tenant`` (``AuditEntry.of_call``'s keyword arguments)."""
        with self._done:
            self._pending += 1
        self._queue.put({**fields, "_tenant": tenant})

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every entry put so far is committed (or failed to be); False on timeout."""
        with self._done:
            return self._done.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(10)

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < self._batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            try:
                by_tenant: dict[str, list[AuditEntry]] = {}
                for fields in batch:
                    tenant = fields.pop("_tenant")
                    by_tenant.setdefault(tenant, []).append(AuditEntry.of_call(**fields))
                for tenant, entries in by_tenant.items():
                    self.log.record_many(entries, tenant=tenant)
            except (sqlite3.Error, ValueError):
                logger.exception("the audit log could not record %d calls", len(batch))
            finally:
                with self._done:
                    self._pending -= len(batch)
                    self._done.notify_all()
            if stop:
                return
