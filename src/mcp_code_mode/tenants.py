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

import hashlib
import hmac
import logging
import re
import secrets
import stat
from collections.abc import Collection, Generator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from ._json import read_document
from .errors import ConfigError
from .governance.policy import ServerPolicy

logger = logging.getLogger(__name__)

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


# ----- the tokens file (CODE_MODE_AUTH_TOKENS) -------------------------------------------------------------

TENANT_FIELDS = ("name", "token_sha256", "servers", "policy")
"""The fields of one tenant in the tokens file."""
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def token_digest(token: str) -> bytes:
    """What the tokens file stores of a token, and what a presented token is compared by: its SHA-256."""
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class TenantBook:
    """Each token's SHA-256 and the tenant it names: one shared token (``CODE_MODE_AUTH_TOKEN``, tenant
    ``default``) or the tokens file (``CODE_MODE_AUTH_TOKENS``)."""

    tenants: tuple[Tenant, ...]
    digests: tuple[tuple[bytes, Tenant], ...]
    source: str = "CODE_MODE_AUTH_TOKEN"

    @classmethod
    def shared(cls, token: str) -> TenantBook:
        """One shared token: every client is tenant ``default``."""
        if not token:
            raise ValueError("the token must not be empty")
        return cls((DEFAULT_TENANT,), ((token_digest(token), DEFAULT_TENANT),))

    def verify(self, token: str) -> Tenant | None:
        """The tenant of a presented token, or None. Every stored digest is compared (in constant time), so
        the time taken tells nothing about which one matched or how much of it."""
        digest = token_digest(token)
        found: Tenant | None = None
        for known, tenant in self.digests:
            if hmac.compare_digest(digest, known):
                found = tenant
        return found

    def get(self, name: str) -> Tenant | None:
        return next((t for t in self.tenants if t.name == name), None)


def _parse_entry(
    index: int, raw: object, base: Path, servers: Collection[str]
) -> tuple[str | None, Tenant | None, list[bytes], list[str]]:
    """One entry: its name, the tenant (None when it has problems), its token digests and its problems."""
    where = f"tenants[{index}]"
    if not isinstance(raw, dict):
        return None, None, [], [f"{where}: must be an object with name and token_sha256, got {type(raw).__name__}"]
    entry = cast("dict[str, Any]", raw)
    problems: list[str] = []
    name = entry.get("name")
    if not isinstance(name, str) or not TENANT_NAME.match(name):
        problems.append(f"{where}.name: must match {TENANT_NAME.pattern}, got {name!r}")
        name = None
    else:
        where = f"tenants[{index}] ({name})"
    problems += [
        f"{where}: unknown field {key!r} (valid: {', '.join(TENANT_FIELDS)})"
        for key in entry
        if key not in TENANT_FIELDS
    ]
    hashes = entry.get("token_sha256")
    listed = [hashes] if isinstance(hashes, str) else hashes
    digests: list[bytes] = []
    if not isinstance(listed, list) or not listed:
        problems.append(f"{where}.token_sha256: missing (a token's SHA-256 as 64 hex digits, or a list of them)")
    else:
        for i, item in enumerate(cast("list[object]", listed)):
            if not isinstance(item, str) or not _HEX64.match(item):
                shown = f"{len(item)} characters" if isinstance(item, str) else type(item).__name__
                problems.append(
                    f"{where}.token_sha256[{i}]: must be 64 lower-case hex digits (a SHA-256, never the token "
                    f"itself), got {shown}"
                )
            else:
                digests.append(bytes.fromhex(item))
    allowed: frozenset[str] | None = None
    if "servers" in entry:
        given = entry["servers"]
        if not isinstance(given, list) or not all(isinstance(s, str) for s in cast("list[object]", given)):
            problems.append(f"{where}.servers: must be a list of server names")
        else:
            names = cast("list[str]", given)
            unknown = [s for s in names if s not in servers]
            if unknown:
                problems.append(
                    f"{where}.servers: no server {', '.join(map(repr, unknown))} in the servers file "
                    f"(configured: {', '.join(servers) or 'none'})"
                )
            allowed = frozenset(names)
    policy: Path | None = None
    if "policy" in entry:
        given = entry["policy"]
        if not isinstance(given, str) or not given:
            problems.append(f"{where}.policy: must be the path of a policy file")
        else:
            policy = (base / given).resolve()
            try:
                load_policy_file(policy, allowed if allowed is not None else servers)
            except ConfigError as exc:
                problems.append(f"{where}.policy: {exc}")
    if problems or name is None:
        return name, None, digests, problems
    return name, Tenant(name, allowed, policy), digests, []


def parse_tenants(text: str, *, source: str, base: Path, servers: Collection[str]) -> TenantBook:
    """The tokens file's text as a ``TenantBook``; one ``ConfigError`` names every problem (line and column of
    bad JSON, else each field)."""
    data = read_document(text, source)
    if not isinstance(data, dict) or set(cast("dict[str, Any]", data)) != {"tenants"}:
        raise ConfigError(f'{source}: the top level must be {{"tenants": [...]}} and nothing else')
    entries = cast("dict[str, Any]", data)["tenants"]
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: 'tenants' must be a list")
    problems: list[str] = []
    tenants: list[Tenant] = []
    digests: list[tuple[bytes, Tenant]] = []
    owners: dict[bytes, str] = {}
    names: set[str] = set()
    for index, raw in enumerate(cast("list[object]", entries)):
        name, tenant, hashes, errors = _parse_entry(index, raw, base, servers)
        problems += errors
        if name is not None and name in names:
            problems.append(f"tenants[{index}]: the tenant {name!r} is listed twice (give it a list of hashes)")
            continue
        if name is not None:
            names.add(name)
        for digest in hashes:
            if digest in owners:
                problems.append(f"tenants[{index}] ({name}): a token hash is also {owners[digest]!r}'s")
            owners[digest] = name or f"tenants[{index}]"
            if tenant is not None:
                digests.append((digest, tenant))
        if tenant is not None:
            tenants.append(tenant)
    if not tenants and not problems:
        problems.append("no tenants: list at least one (mcp-code-mode tokens add NAME --file ...)")
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems))
    return TenantBook(tuple(tenants), tuple(digests), source)


def load_tenants(path: Path, servers: Collection[str]) -> TenantBook:
    """Read ``CODE_MODE_AUTH_TOKENS``. A file others may write is refused (anyone who can write it can add a
    token); one others may read is served, with a warning (it holds only hashes)."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"CODE_MODE_AUTH_TOKENS: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"CODE_MODE_AUTH_TOKENS: {path}: cannot be read: {exc}") from None
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"CODE_MODE_AUTH_TOKENS: {path} may be written by other users (mode {stat.S_IMODE(mode):o}): anyone who "
            f"can write it can add a token; chmod 600 {path}"
        )
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        logger.warning(
            "CODE_MODE_AUTH_TOKENS: %s may be read by other users (mode %o); it holds only hashes, but chmod 600 it",
            path,
            stat.S_IMODE(mode),
        )
    return parse_tenants(text, source=str(path), base=path.resolve().parent, servers=servers)


def load_policy_file(path: Path, servers: Collection[str]) -> dict[str, ServerPolicy]:
    """A tenant's policy file: ``{"servers": {"<server>": <policy, as a servers file entry's "policy">}}``.
    Each server it names has this policy for the tenant's runs instead of the servers file's; the others keep
    the servers file's. ``ConfigError`` naming the field for anything else."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    data = read_document(text, path)
    if not isinstance(data, dict) or set(cast("dict[str, Any]", data)) != {"servers"}:
        raise ConfigError(f'{path}: the top level must be {{"servers": {{"<server>": <policy>}}}}')
    entries = cast("dict[str, Any]", data)["servers"]
    if not isinstance(entries, dict):
        raise ConfigError(f"{path}: 'servers' must map server names to policies")
    out: dict[str, ServerPolicy] = {}
    problems: list[str] = []
    for name, raw in cast("dict[str, Any]", entries).items():
        if name not in servers:
            problems.append(
                f"servers.{name}: not a server of this tenant (its servers: {', '.join(servers) or 'none'})"
            )
            continue
        try:
            out[name] = ServerPolicy.model_validate(raw)
        except ValidationError as exc:
            problems += [
                f"servers.{name}.{'.'.join(str(p) for p in err['loc']) or '(policy)'}: {err['msg']}"
                for err in exc.errors()
            ]
    if problems:
        raise ConfigError("\n".join(f"{path}: {p}" for p in problems))
    return out


def new_token() -> tuple[str, str]:
    """A fresh random token (32 bytes, URL-safe) and the SHA-256 hex the tokens file keeps of it."""
    token = secrets.token_urlsafe(32)
    return token, token_digest(token).hex()
