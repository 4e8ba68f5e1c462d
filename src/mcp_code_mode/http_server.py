"""Streamable HTTP serving: bearer-token auth, DNS-rebinding protection, and the start-up checks.

Everything here configures the SDK's own mechanisms: a ``TokenVerifier`` for its bearer-auth
middleware (401 without a valid ``Authorization: Bearer`` header), ``TransportSecuritySettings`` for
its Host/Origin checks (421 for a foreign Host, 403 for a foreign Origin), and its session manager
(stateful, or stateless for replicas behind a load balancer).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import sys
from dataclasses import dataclass

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from .config import Settings
from .engine import CodeMode
from .errors import ConfigError
from .server import CodeModeServer, build_server

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


class StaticTokenVerifier:
    """The SDK's ``TokenVerifier`` for one shared secret, compared in constant time."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the token must not be empty")
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token=token, client_id="mcp-code-mode-client", scopes=[])
        return None


def auth_token(settings: Settings) -> str | None:
    return settings.auth_token.get_secret_value() if settings.auth_token else None


def check_bind(options: HttpOptions, settings: Settings) -> None:
    """Refuse (``ConfigError``) to listen beyond loopback without a token."""
    if auth_token(settings) is None and not is_loopback(options.host):
        raise ConfigError(
            f"refusing to serve HTTP on {options.host} without a token: anyone who can reach it could run code. "
            "Set CODE_MODE_AUTH_TOKEN (clients then send 'Authorization: Bearer <token>'), "
            "or listen on 127.0.0.1 only."
        )


def _split(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def transport_security(options: HttpOptions, settings: Settings) -> TransportSecuritySettings:
    """Host and Origin allow-lists: loopback, the bound address, and the configured extras."""
    names: list[str] = list(LOOPBACK_NAMES)
    bound = options.host.strip("[]")
    if bound not in ("0.0.0.0", "::") and not is_loopback(bound):
        names.append(f"[{bound}]" if ":" in bound else bound)
    hosts = [*names, *(f"{name}:*" for name in names), *_split(settings.http_allowed_hosts)]
    origins = [
        *(f"{scheme}://{name}" for scheme in ("http", "https") for name in names),
        *(f"{scheme}://{name}:*" for scheme in ("http", "https") for name in names),
        *_split(settings.http_allowed_origins),
    ]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


def build_http_server(engine: CodeMode, options: HttpOptions) -> CodeModeServer:
    """The MCP server with bearer auth when a token is set, plus ``/healthz``."""
    token = auth_token(engine.config.settings)
    if token is None:
        server = build_server(engine)
    else:
        # The SDK's auth settings describe an OAuth resource server; with a static token only the
        # verifier matters (no metadata routes are added: resource_server_url is None).
        server = build_server(
            engine,
            token_verifier=StaticTokenVerifier(token),
            auth=AuthSettings(issuer_url=AnyHttpUrl(options.url.removesuffix(options.path)), resource_server_url=None),
        )

    @server.custom_route("/healthz", methods=["GET"])
    async def healthz(_: Request) -> Response:  # pyright: ignore[reportUnusedFunction]
        return PlainTextResponse("ok")

    return server


def build_http_app(engine: CodeMode, options: HttpOptions) -> Starlette:
    """The ASGI app (its lifespan starts and stops the engine)."""
    check_bind(options, engine.config.settings)
    server = build_http_server(engine, options)
    return server.streamable_http_app(
        streamable_http_path=options.path,
        stateless_http=options.stateless,
        transport_security=transport_security(options, engine.config.settings),
        host=options.host,
    )


async def serve_http(engine: CodeMode, options: HttpOptions) -> None:
    """Listen until interrupted."""
    import uvicorn

    app = build_http_app(engine, options)
    settings = engine.config.settings
    print(
        f"mcp-code-mode: serving MCP over streamable HTTP at {options.url} "
        f"({'bearer token required' if auth_token(settings) else 'no token: loopback only'}"
        f"{', stateless' if options.stateless else ''})",
        file=sys.stderr,
        flush=True,
    )
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
