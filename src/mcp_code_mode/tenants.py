"""Tenants: whom a request acts for, and so which stored things it may see.

Every stored thing (scripts, search, skills, audit, plans, artifacts, PII vaults, sessions) belongs to one
tenant, and one tenant never reads, replays, searches or deletes another's. Over stdio, and over HTTP with
one shared token (``CODE_MODE_AUTH_TOKEN``), there is one tenant, ``DEFAULT_TENANT``. With
``CODE_MODE_AUTH_TOKENS`` each token names its tenant.

The tenant is decided by the host from the verified token, never from anything a client or a script says,
and set for the handling of one request with ``acting_as``; code below the MCP handlers reads it with
``current_tenant()`` and passes its ``name`` explicitly to every store call (a store never guesses).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
"""A tenant's name: lower-case letters, digits, ``_``, ``.`` and ``-``, at most 63 characters."""


@dataclass(frozen=True)
class Tenant:
    name: str
    servers: frozenset[str] | None = None
    """The downstream servers this tenant's runs may see; None: every configured server."""
    policy: Path | None = None
    """This tenant's governance policy file, instead of the server-wide one; None: the server-wide one."""

    def __post_init__(self) -> None:
        if not TENANT_NAME.match(self.name):
            raise ValueError(f"a tenant's name must match {TENANT_NAME.pattern}, got {self.name!r}")


DEFAULT_TENANT = Tenant("default")

_current: ContextVar[Tenant] = ContextVar("mcp_code_mode_tenant", default=DEFAULT_TENANT)


def current_tenant() -> Tenant:
    """The tenant the request being handled acts for (``DEFAULT_TENANT`` outside any)."""
    return _current.get()


@contextmanager
def acting_as(tenant: Tenant) -> Generator[Tenant]:
    """Handle one request as ``tenant`` (tasks and threads started inside inherit it)."""
    token = _current.set(tenant)
    try:
        yield tenant
    finally:
        _current.reset(token)
