"""The vault: token ↔ value, per client session, on the host only.

A value found in what goes to the model gets a token ``[EMAIL_1]``, ``[PHONE_2]``: the kind in capitals and
a number counted per client and kind. The same value (exactly: same kind, same string) gets the same token
for as long as it stays in the vault; another client's vault is unrelated (its ``[EMAIL_1]`` is whatever
that client saw first). A token lasts ``ttl`` seconds after it was last given or looked up; a number is never
given twice to a client, so a token that expired never comes back meaning another value.

``MemoryVault`` keeps everything in this process (the default: nothing is written anywhere). The persisted
vault (``privacy.store.DatabaseVault``, ``CODE_MODE_PII_VAULT=database``) keeps the same contract in the
cache database, values sealed with ``CODE_MODE_PII_KEY``. Every method blocks briefly and is thread-safe.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

SECRET = "[SECRET]"
"""What a secret becomes: never restored."""

KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")
"""A kind's name (``email``, ``employee_id``); its tokens spell it in capitals."""

TOKEN = re.compile(r"\[([A-Z][A-Z0-9_]{0,31})_([1-9][0-9]{0,8})\]")
"""A token as it appears in text: ``[EMAIL_1]``, ``[EMPLOYEE_ID_12]`` (the kind, then the number)."""

DEFAULT_TTL = 86_400.0
DEFAULT_MAX_VALUES = 50_000


def token_text(kind: str, number: int) -> str:
    return f"[{kind.upper()}_{number}]"


def kind_of(token: str) -> str | None:
    """The kind a token names (``[EMAIL_3]`` → ``email``), or None for text that is not a token."""
    match = TOKEN.fullmatch(token)
    return match.group(1).lower() if match else None


@dataclass(frozen=True)
class Entry:
    """One token and what it stands for. ``origins``: the servers whose results carried the value (the
    tools a token is restored for by default)."""

    token: str
    kind: str
    value: str
    origins: frozenset[str] = frozenset()


class Vault(Protocol):
    """Token ↔ value per tenant and client. ``client`` is the engine's client name (an MCP session, a token's
    hash); ``tenant`` the tenant it acts for (``tenants``): two tenants' clients of one name share nothing."""

    def token_for(self, client: str, kind: str, value: str, origin: str | None = None, *, tenant: str) -> str | None:
        """The value's token in this client's vault, given now if it had none (``origin`` is added to its
        origins). None when the client's vault is full: the caller writes the kind alone, ``[EMAIL]``."""
        ...

    def lookup(self, client: str, token: str, *, tenant: str) -> Entry | None:
        """What this client's token stands for, or None (unknown, expired, another client's or tenant's)."""
        ...

    def forget(self, client: str, *, tenant: str) -> None:
        """Drop every token and counter of a client (its session ended: its name is not used again)."""
        ...

    def prune(self) -> int:
        """Drop expired tokens; how many were dropped."""
        ...

    def close(self) -> None: ...


@dataclass
class _Session:
    by_value: dict[tuple[str, str], str] = field(default_factory=dict[tuple[str, str], str])
    by_token: dict[str, Entry] = field(default_factory=dict[str, Entry])
    expires: dict[str, float] = field(default_factory=dict[str, float])
    last: dict[str, int] = field(default_factory=dict[str, int])


class MemoryVault:
    """The vault in this process's memory: lost on restart, never written anywhere."""

    def __init__(
        self,
        ttl: float = DEFAULT_TTL,
        max_values: int = DEFAULT_MAX_VALUES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl <= 0 or max_values < 1:
            raise ValueError("ttl must be positive and max_values at least 1")
        self.ttl = ttl
        self.max_values = max_values
        self._clock = clock
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._lock = threading.Lock()

    def token_for(self, client: str, kind: str, value: str, origin: str | None = None, *, tenant: str) -> str | None:
        now = self._clock()
        with self._lock:
            session = self._sessions.setdefault((tenant, client), _Session())
            token = session.by_value.get((kind, value))
            if token is not None and session.expires[token] <= now:
                self._drop(session, token)
                token = None
            if token is None:
                if len(session.by_token) >= self.max_values:
                    self._expire(session, now)
                    if len(session.by_token) >= self.max_values:
                        return None
                number = session.last.get(kind, 0) + 1
                session.last[kind] = number
                token = token_text(kind, number)
                session.by_value[(kind, value)] = token
                session.by_token[token] = Entry(token, kind, value, frozenset((origin,) if origin else ()))
            elif origin and origin not in (entry := session.by_token[token]).origins:
                session.by_token[token] = Entry(token, kind, value, entry.origins | {origin})
            session.expires[token] = now + self.ttl
            return token

    def lookup(self, client: str, token: str, *, tenant: str) -> Entry | None:
        now = self._clock()
        with self._lock:
            session = self._sessions.get((tenant, client))
            if session is None or token not in session.by_token:
                return None
            if session.expires[token] <= now:
                self._drop(session, token)
                return None
            session.expires[token] = now + self.ttl
            return session.by_token[token]

    def forget(self, client: str, *, tenant: str) -> None:
        with self._lock:
            self._sessions.pop((tenant, client), None)

    def prune(self) -> int:
        now = self._clock()
        dropped = 0
        with self._lock:
            for session in self._sessions.values():  # the counters stay: no number is given twice
                dropped += self._expire(session, now)
        return dropped

    def close(self) -> None:
        with self._lock:
            self._sessions.clear()

    def size(self, client: str, *, tenant: str) -> int:
        with self._lock:
            session = self._sessions.get((tenant, client))
            return len(session.by_token) if session else 0

    def _expire(self, session: _Session, now: float) -> int:
        gone = [token for token, at in session.expires.items() if at <= now]
        for token in gone:
            self._drop(session, token)
        return len(gone)

    @staticmethod
    def _drop(session: _Session, token: str) -> None:
        entry = session.by_token.pop(token)
        session.by_value.pop((entry.kind, entry.value), None)
        session.expires.pop(token, None)


def tokens_in(text: str) -> Iterable[re.Match[str]]:
    return TOKEN.finditer(text)


__all__ = [
    "DEFAULT_MAX_VALUES",
    "DEFAULT_TTL",
    "KIND",
    "SECRET",
    "TOKEN",
    "Entry",
    "MemoryVault",
    "Vault",
    "kind_of",
    "token_text",
    "tokens_in",
]
