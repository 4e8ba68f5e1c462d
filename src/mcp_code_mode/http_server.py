"""Streamable HTTP serving: bearer-token auth, DNS-rebinding protection, session limits, start-up checks.

- Host and Origin (``PeerPolicy``, enforced by ``PeerCheck`` before anything else, on every path but
  ``/healthz``): each header is parsed (IPv6 brackets, case, a trailing dot, default ports) and compared
  by scheme, host and port with the allowed list: loopback names on the bound port, the bound address,
  and ``CODE_MODE_HTTP_ALLOWED_HOSTS`` / ``_ORIGINS`` (``host:*`` allows any port). Anything else, or a
  header that does not parse (userinfo, a path, junk after the port, a duplicate), gets 421 (Host) or
  403 (Origin). The SDK's own check matches prefixes (``localhost:*`` lets ``localhost:1@evil`` in),
  so it is turned off.
- Bearer auth: the SDK's middleware with a ``TokenVerifier`` (401 without a valid token): one shared token
  (``CODE_MODE_AUTH_TOKEN``, tenant ``default``) or a tenant's (``CODE_MODE_AUTH_TOKENS``, ``tenants``); the
  verified token's tenant is what every handler acts as (``_clients``).
- Sessions: the SDK's session manager, with at most ``CODE_MODE_HTTP_MAX_SESSIONS`` open (one more
  gets 503 while the open ones keep working) and each closed after ``CODE_MODE_HTTP_SESSION_IDLE_S``
  without a request (its id then answers 404); or stateless, for replicas behind a load balancer.
- Replicas (``CODE_MODE_REPLICA_ID``): session ids carry the replica's name (``ReplicaSessions``), so that a
  balancer sends each session's requests to the replica that holds it and balances the rest.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import sys
from dataclasses import dataclass
from typing import Literal

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._clients import TenantAccessToken
from .config import Settings, tenant_book
from .engine import CodeMode
from .errors import ConfigError
from .observability import CONTENT_TYPE
from .server import CodeModeServer, build_server
from .tenants import DEFAULT_TENANT, TenantBook

logger = logging.getLogger(__name__)

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""Host names (as they appear in Host and Origin headers) that are always accepted."""


@dataclass(frozen=True)
class HttpOptions:
    """Where and how ``mcp-code-mode serve --http`` listens."""

    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/mcp"
    """The MCP endpoint. ``/healthz`` answers ``ok`` without auth, for load balancers."""
    stateless: bool = False
    """No sessions: every request stands alone, so any replica can answer it."""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only accepts connections from this machine."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


class TenantTokenVerifier:
    """The SDK's ``TokenVerifier`` over the tokens' SHA-256 digests (``TenantBook.verify``: every digest compared
    in constant time): a known token becomes a ``TenantAccessToken`` naming its tenant, anything else None (401).
    Its ``client_id`` is the tenant's (``tenant:<name>``; the shared token's keeps ``mcp-code-mode-client``), which
    binds each HTTP session to one tenant."""

    def __init__(self, book: TenantBook) -> None:
        self.book = book

    async def verify_token(self, token: str) -> AccessToken | None:
        tenant = self.book.verify(token)
        if tenant is None:
            return None
        client_id = "mcp-code-mode-client" if tenant == DEFAULT_TENANT else f"tenant:{tenant.name}"
        return TenantAccessToken(token=token, client_id=client_id, scopes=[], tenant=tenant)


def check_bind(options: HttpOptions, settings: Settings) -> None:
    """Refuse (``ConfigError``) to listen beyond loopback without a token."""
    if settings.auth_token is None and settings.auth_tokens is None and not is_loopback(options.host):
        raise ConfigError(
            f"refusing to serve HTTP on {options.host} without a token: anyone who can reach it could run code. "
            "Set CODE_MODE_AUTH_TOKEN or CODE_MODE_AUTH_TOKENS (clients then send 'Authorization: Bearer <token>'), "
            "or listen on 127.0.0.1 only."
        )


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


DEFAULT_PORTS = {"http": 80, "https": 443}
Port = int | Literal["*"] | None
"""A port; ``"*"`` any port (allowed lists only); ``None`` none given, i.e. the scheme's default port."""

_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
_OWS = " \t"


def parse_authority(text: str, *, wildcard: bool = False) -> tuple[str, Port]:
    """``host[:port]`` (a Host header, or an origin after ``scheme://``) as ``(host, port)``.

    The host is lowercase without a trailing dot, or a bracketed IPv6 address in its compressed form
    (``[0:0::1]`` is ``[::1]``). Raises ``ValueError`` saying why for anything else: userinfo, a path,
    whitespace inside, an IPv6 address without brackets or with a zone, an empty or out-of-range port,
    ``:*`` unless ``wildcard``.
    """
    if not text:
        raise ValueError("empty")
    if not text.isascii():
        raise ValueError("not ASCII")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("an IPv6 address without its closing ']'")
        literal, rest = text[1:end], text[end + 1 :]
        if "%" in literal:
            raise ValueError("an IPv6 zone id")
        try:
            host = f"[{ipaddress.IPv6Address(literal).compressed}]"
        except ValueError:
            raise ValueError(f"[{literal}] is not an IPv6 address") from None
    else:
        name, colon, port = text.partition(":")
        if ":" in port:
            raise ValueError("more than one ':' (an IPv6 address goes in brackets)")
        name = name.lower()
        name = name.removesuffix(".")  # "localhost." is the same DNS name as "localhost"
        if not _NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a host name or an IPv4 address")
        host, rest = name, colon + port
    if not rest:
        return host, None
    if not rest.startswith(":"):
        raise ValueError(f"{rest!r} after the address")
    port = rest[1:]
    if port == "*" and wildcard:
        return host, "*"
    if not _PORT.fullmatch(port) or int(port) > 65535:
        raise ValueError(f"{port!r} is not a port")
    return host, int(port)


def parse_origin(text: str, *, wildcard: bool = False) -> tuple[str, str, Port]:
    """``scheme://host[:port]`` (an Origin header) as ``(scheme, host, port)``, the port made explicit."""
    scheme, sep, authority = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in DEFAULT_PORTS:
        raise ValueError("not http://host[:port] or https://host[:port]")
    host, port = parse_authority(authority, wildcard=wildcard)
    return scheme, host, DEFAULT_PORTS[scheme] if port is None else port


@dataclass(frozen=True)
class PeerPolicy:
    """The Host and Origin values the HTTP server accepts, each compared by scheme, host and port."""

    hosts: tuple[tuple[str, Port], ...]
    """``(host, port)``; a port of ``None`` is the request scheme's default port."""
    origins: tuple[tuple[str, str, Port], ...]
    """``(scheme, host, port)``."""

    def host_allowed(self, value: str, scheme: str = "http") -> bool:
        """Whether a Host header names an allowed host and port (missing port: ``scheme``'s default)."""
        try:
            host, port = parse_authority(value.strip(_OWS))
        except ValueError:
            return False
        default = DEFAULT_PORTS.get(scheme, 80)
        given = default if port is None else port
        return any(h == host and (p == "*" or (default if p is None else p) == given) for h, p in self.hosts)

    def origin_allowed(self, value: str) -> bool:
        """Whether an Origin header is an allowed scheme, host and port."""
        try:
            scheme, host, port = parse_origin(value.strip(_OWS))
        except ValueError:
            return False
        return any(s == scheme and h == host and p in ("*", port) for s, h, p in self.origins)


def peer_policy(options: HttpOptions, settings: Settings) -> PeerPolicy:
    """Loopback names and the bound address on the bound port (any port when it is 0), plus the configured
    extras. Raises one ``ConfigError`` naming every extra that does not parse."""
    port: Port = "*" if options.port == 0 else options.port
    names: list[str] = list(LOOPBACK_NAMES)
    bound = options.host.strip("[]")
    if bound not in ("0.0.0.0", "::"):
        try:
            name, _ = parse_authority(f"[{bound}]" if ":" in bound else bound)
        except ValueError:
            name = None  # uvicorn will refuse to bind it anyway
        if name is not None and name not in names:
            names.append(name)
    hosts: list[tuple[str, Port]] = [(name, port) for name in names]
    origins: list[tuple[str, str, Port]] = [("http", name, port) for name in names]
    problems: list[str] = []
    for entry in _split(settings.http_allowed_hosts):
        try:
            hosts.append(parse_authority(entry, wildcard=True))
        except ValueError as exc:
            problems.append(f"CODE_MODE_HTTP_ALLOWED_HOSTS: {entry!r}: {exc} (expected host, host:port or host:*)")
    for entry in _split(settings.http_allowed_origins):
        try:
            origins.append(parse_origin(entry, wildcard=True))
        except ValueError as exc:
            problems.append(
                f"CODE_MODE_HTTP_ALLOWED_ORIGINS: {entry!r}: {exc} "
                "(expected scheme://host, scheme://host:port or scheme://host:*)"
            )
    if problems:
        raise ConfigError("\n".join(problems))
    return PeerPolicy(tuple(dict.fromkeys(hosts)), tuple(dict.fromkeys(origins)))


class PeerCheck:
    """ASGI middleware: 421 unless there is exactly one allowed Host header, 403 for an Origin header
    (present, even empty) that is not allowed or comes twice; ``exempt`` paths are not checked."""

    def __init__(self, app: ASGIApp, policy: PeerPolicy, exempt: tuple[str, ...] = ()) -> None:
        self.app = app
        self.policy = policy
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        hosts = [value.decode("latin-1") for key, value in headers if key == b"host"]
        origins = [value.decode("latin-1") for key, value in headers if key == b"origin"]
        if len(hosts) != 1 or not self.policy.host_allowed(hosts[0], scope["scheme"]):
            logger.warning(
                "refused a request with Host %.200r (allowed: loopback, CODE_MODE_HTTP_ALLOWED_HOSTS)", hosts
            )
            response = PlainTextResponse("Invalid Host header (see CODE_MODE_HTTP_ALLOWED_HOSTS)", status_code=421)
        elif len(origins) > 1 or (origins and not self.policy.origin_allowed(origins[0])):
            logger.warning("refused a request with Origin %.200r (see CODE_MODE_HTTP_ALLOWED_ORIGINS)", origins)
            response = PlainTextResponse("Invalid Origin header (see CODE_MODE_HTTP_ALLOWED_ORIGINS)", status_code=403)
        else:
            await self.app(scope, receive, send)
            return
        await response(scope, receive, send)


SESSION_HEADER = b"mcp-session-id"


class ReplicaSessions:
    """ASGI middleware of a replica (``CODE_MODE_REPLICA_ID``): the SDK's session ids go out as ``<replica>.<id>``
    and come back without the prefix, so that a balancer routes a session by its id alone (``deploy/nginx``).

    A request with a session id of another replica (that replica is gone, or the balancer's map is wrong) gets
    404, which tells an MCP client its session is over, with a JSON-RPC error naming both replicas."""

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self.replica = replica
        self.prefix = f"{replica}.".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        given = next((value for key, value in headers if key == SESSION_HEADER), None)
        if given is not None:
            if not given.startswith(self.prefix):
                owner, dot, _ = given.decode("latin-1").partition(".")
                whose = f"replica {owner[:64]!r}" if dot else "no replica"
                message = (
                    f"this MCP session belongs to {whose}, and this is replica {self.replica!r}: "
                    "that replica is gone (its sessions with it) or the balancer routed the request elsewhere; "
                    "open a new session"
                )
                body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": message}}
                await JSONResponse(body, status_code=404)(scope, receive, send)
                return
            stripped = [(k, v[len(self.prefix) :] if k == SESSION_HEADER else v) for k, v in headers]
            scope = {**scope, "headers": stripped}

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                out: list[tuple[bytes, bytes]] = list(message.get("headers", []))
                message = {
                    **message,
                    "headers": [(k, self.prefix + v if k.lower() == SESSION_HEADER else v) for k, v in out],
                }
            await send(message)

        await self.app(scope, receive, tagged)


def describe(options: HttpOptions, settings: Settings) -> str:
    """The start-up line: where, auth, and the session limits (or stateless)."""
    sessions = (
        "stateless"
        if options.stateless
        else f"at most {settings.http_max_sessions} sessions, each closed after {settings.http_session_idle_s:g} s idle"
    )
    if settings.auth_tokens is not None:
        auth = f"bearer token of a tenant required ({settings.auth_tokens})"
    else:
        auth = "bearer token required" if settings.auth_token else "no token: loopback only"
    replica = f"; replica {settings.replica_id}" if settings.replica_id else ""
    return f"mcp-code-mode: serving MCP over streamable HTTP at {options.url} ({auth}; {sessions}{replica})"


def build_http_server(engine: CodeMode, options: HttpOptions) -> CodeModeServer:
    """The MCP server with bearer auth when a token is set, plus ``/healthz`` and ``/metrics`` (Prometheus text,
    behind the token too unless ``CODE_MODE_METRICS_PUBLIC``)."""
    book = engine.config.tenants or tenant_book(engine.settings, engine.config.servers)  # a config made by hand
    if book is None:
        server = build_server(engine)
    else:
        # The SDK's auth settings describe an OAuth resource server; with static tokens only the
        # verifier matters (no metadata routes are added: resource_server_url is None).
        server = build_server(
            engine,
            token_verifier=TenantTokenVerifier(book),
            auth=AuthSettings(issuer_url=AnyHttpUrl(options.url.removesuffix(options.path)), resource_server_url=None),
        )

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> Response:  # pyright: ignore[reportUnusedFunction]
        return PlainTextResponse("ok")

    verifier = TenantTokenVerifier(book) if book is not None and not engine.settings.metrics_public else None

    @server.custom_route("/metrics", methods=["GET"])
    async def metrics(request: Request) -> Response:  # pyright: ignore[reportUnusedFunction]
        # Behind any tenant's token (unless CODE_MODE_METRICS_PUBLIC), and PeerCheck's Host checks.
        if verifier is not None:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or await verifier.verify_token(given.strip()) is None:
                return PlainTextResponse(
                    "a bearer token is required", status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
        return PlainTextResponse(engine.metrics.render(), media_type=CONTENT_TYPE)

    return server


def build_http_app(engine: CodeMode, options: HttpOptions) -> Starlette:
    """The ASGI app (its lifespan starts and stops the engine)."""
    settings = engine.settings
    check_bind(options, settings)
    policy = peer_policy(options, settings)
    if settings.max_runs_per_client is None:
        engine.share_slots_among_clients()  # many clients: none takes more than half the slots
    server = build_http_server(engine, options)
    app = server.streamable_http_app(
        streamable_http_path=options.path,
        stateless_http=options.stateless,
        session_idle_timeout=settings.http_session_idle_s,
        max_sessions=settings.http_max_sessions,
        # PeerCheck compares Host and Origin exactly; the SDK's check (prefix matches) stays off.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=options.host,
    )
    if settings.replica_id is not None and not options.stateless:
        app.add_middleware(ReplicaSessions, replica=settings.replica_id)
    app.add_middleware(PeerCheck, policy=policy, exempt=("/healthz",))
    return app


async def serve_http(engine: CodeMode, options: HttpOptions) -> None:
    """Listen until interrupted."""
    import uvicorn

    app = build_http_app(engine, options)
    settings = engine.settings
    print(describe(options, settings), file=sys.stderr, flush=True)
    if options.host.strip("[]") in ("0.0.0.0", "::") and not settings.http_allowed_hosts:
        print(
            "mcp-code-mode: listening on every address, but only loopback Host headers are accepted: "
            "list the names clients use in CODE_MODE_HTTP_ALLOWED_HOSTS (e.g. mcp.example.com,10.0.0.5:*)",
            file=sys.stderr,
            flush=True,
        )
    config = uvicorn.Config(
        app, host=options.host.strip("[]"), port=options.port, log_level=settings.log_level.lower(), lifespan="on"
    )
    await uvicorn.Server(config).serve()
