"""Who asks: the tenant of a request (from the verified token only) and the client within it.

``tenant_of`` reads the SDK's authenticated user on the request context: the bearer middleware put there what
the token verifier (``http_server.TenantTokenVerifier``) returned, a ``TenantAccessToken`` naming the tenant.
Nothing a client sends otherwise (a header, an argument, a session id) and nothing a script says decides it.
A request without one (stdio, in-process, HTTP on loopback without a token) is ``DEFAULT_TENANT``.

``scoped`` puts the tenant into a client's identity (``client_of``: whose run slots, sessions, plans, PII tokens,
artifacts and tasks these are), so two tenants never share one, whatever session id or connection they name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, cast

from mcp.server.auth.provider import AccessToken
from mcp.server.context import CallNext, ServerRequestContext

from .tenants import DEFAULT_TENANT, Tenant, acting_as


class TenantAccessToken(AccessToken):
    """The SDK's access token with the tenant its token names (``AccessToken.client_id`` is ``tenant:<name>``,
    so the SDK binds each HTTP session to one tenant: another tenant's request with its id gets 404)."""

    tenant: Tenant


def tenant_of(ctx: ServerRequestContext[Any, Any] | None) -> Tenant:
    """The tenant of a request: the one its verified bearer token names, else ``DEFAULT_TENANT``."""
    request = getattr(ctx, "request", None) if ctx is not None else None
    scope = cast("Mapping[str, Any] | None", getattr(request, "scope", None))
    user = scope.get("user") if scope is not None else None
    token = getattr(user, "access_token", None)
    return token.tenant if isinstance(token, TenantAccessToken) else DEFAULT_TENANT


def scoped(tenant: Tenant, client: str) -> str:
    """A client's identity within its tenant: unchanged for ``default`` (so that stdio and a shared token keep
    their identities), ``tenant:<name>/<client>`` for any other (a name has no ``:`` or ``/``)."""
    return client if tenant == DEFAULT_TENANT else f"tenant:{tenant.name}/{client}"


def http_client(ctx: ServerRequestContext[Any, Any], otherwise: str | None = None) -> str | None:
    """An HTTP request's client within its tenant, unscoped: its session (``Mcp-Session-Id``), else its bearer
    token (a hash of it), else ``otherwise``; None for a request without HTTP headers (stdio, in-process)."""
    headers = cast("Mapping[str, str] | None", getattr(ctx.request, "headers", None))
    if headers is None:
        return None
    session_id = headers.get("mcp-session-id")
    if session_id:
        return f"http-session:{session_id}"
    authorization = headers.get("authorization")
    if authorization:
        return "http-token:" + hashlib.sha256(authorization.encode()).hexdigest()[:16]
    return otherwise


class TenantMiddleware:
    """Lowlevel server middleware (outermost): every request and notification is handled ``acting_as`` its
    tenant, so everything below it (tools, resources, prompts, tasks, progress) reads ``current_tenant()``."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        with acting_as(tenant_of(ctx)):
            return await call_next(ctx)


__all__ = ["TenantAccessToken", "TenantMiddleware", "http_client", "scoped", "tenant_of"]
