"""Host and Origin: one test per header technique, through the real ASGI app, each asserting its status.

The allowed list here is the default one for ``serve --http`` on 127.0.0.1:8000 (loopback names on
port 8000), plus the configured extras where a test says so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
import pytest

from mcp_code_mode.config import Settings
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import ConfigError
from mcp_code_mode.http_server import HttpOptions, build_http_app, parse_authority, peer_policy

from .conftest import make_config

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
GOOD_HOST = "127.0.0.1:8000"


@pytest.fixture(scope="module")
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    engine = CodeMode(make_config({}, pool_size=0, cpython_pool_size=0, warmup_timeout=0))
    app = build_http_app(engine, HttpOptions())
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as client,
    ):
        yield client


async def status(http: httpx2.AsyncClient, headers: list[tuple[str, str]]) -> int:
    response = await http.post("/mcp", json=INIT, headers=[*MCP_HEADERS.items(), *headers])
    if response.status_code in (421, 403):
        assert "serverInfo" not in response.text and "mcp-session-id" not in response.headers
    return response.status_code


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        pytest.param("127.0.0.1:8000", 200, id="ipv4-loopback"),
        pytest.param("localhost:8000", 200, id="localhost"),
        pytest.param("[::1]:8000", 200, id="ipv6-loopback"),
        pytest.param("LOCALHOST:8000", 200, id="uppercase-is-the-same-name"),
        pytest.param("localhost.:8000", 200, id="one-trailing-dot-is-the-same-name"),
        pytest.param("[0:0:0:0:0:0:0:1]:8000", 200, id="ipv6-long-form-is-the-same-address"),
        pytest.param(" localhost:8000\t", 200, id="surrounding-whitespace-is-not-part-of-the-value"),
        pytest.param("127.0.0.1.evil.com:8000", 421, id="prefix-trick"),
        pytest.param("127.0.0.1.evil.com", 421, id="prefix-trick-without-port"),
        pytest.param("localhost:8000.evil.com", 421, id="port-prefix-trick"),
        pytest.param("localhost:8000@evil.com", 421, id="userinfo-after"),
        pytest.param("evil.com@localhost:8000", 421, id="userinfo-before"),
        pytest.param("localhost:8001", 421, id="wrong-port"),
        pytest.param("localhost", 421, id="missing-port-is-80-not-8000"),
        pytest.param("localhost:80", 421, id="explicit-default-port"),
        pytest.param("localhost:", 421, id="empty-port"),
        pytest.param("localhost:08000", 421, id="leading-zero-port"),
        pytest.param("localhost:99999", 421, id="port-out-of-range"),
        pytest.param("localhost:8000:8000", 421, id="two-ports"),
        pytest.param("localhost:*", 421, id="wildcard-in-a-request"),
        pytest.param("[::1]", 421, id="ipv6-missing-port"),
        pytest.param("::1:8000", 421, id="ipv6-without-brackets"),
        pytest.param("[::1:8000]", 421, id="port-inside-the-brackets"),
        pytest.param("[::1]8000", 421, id="junk-after-the-brackets"),
        pytest.param("[::1:8000", 421, id="unclosed-bracket"),
        pytest.param("[fe80::1%25eth0]:8000", 421, id="ipv6-zone-id"),
        pytest.param("[::ffff:127.0.0.1]:8000", 421, id="ipv4-mapped-ipv6"),
        pytest.param("localhost..:8000", 421, id="two-trailing-dots"),
        pytest.param("local host:8000", 421, id="whitespace-inside"),
        pytest.param("localhost :8000", 421, id="whitespace-before-the-port"),
        pytest.param("localhost:8000, evil.com", 421, id="comma-joined-list"),
        pytest.param("localhost:8000/evil", 421, id="path"),
        pytest.param("2130706433:8000", 421, id="decimal-ipv4"),
        pytest.param("evil.com:8000", 421, id="foreign-name"),
        pytest.param("", 421, id="empty"),
    ],
)
async def test_a_host_header_is_accepted_only_when_it_names_an_allowed_host_and_port(
    http: httpx2.AsyncClient, host: str, expected: int
) -> None:
    assert await status(http, [("Host", host)]) == expected


async def test_two_host_headers_get_421_even_when_both_are_allowed(http: httpx2.AsyncClient) -> None:
    assert await status(http, [("Host", GOOD_HOST), ("Host", "evil.com")]) == 421
    assert await status(http, [("Host", GOOD_HOST), ("Host", GOOD_HOST)]) == 421


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        pytest.param("http://localhost:8000", 200, id="localhost"),
        pytest.param("http://127.0.0.1:8000", 200, id="ipv4-loopback"),
        pytest.param("http://[::1]:8000", 200, id="ipv6-loopback"),
        pytest.param("HTTP://LOCALHOST:8000", 200, id="uppercase"),
        pytest.param("http://localhost.:8000", 200, id="trailing-dot"),
        pytest.param("http://127.0.0.1.evil.com:8000", 403, id="prefix-trick"),
        pytest.param("http://localhost:8000.evil.com", 403, id="port-prefix-trick"),
        pytest.param("http://localhost:8000@evil.com", 403, id="userinfo-after"),
        pytest.param("http://evil.com@localhost:8000", 403, id="userinfo-before"),
        pytest.param("http://localhost:8001", 403, id="wrong-port"),
        pytest.param("http://localhost", 403, id="missing-port-is-80"),
        pytest.param("https://localhost:8000", 403, id="wrong-scheme"),
        pytest.param("http://localhost:8000/", 403, id="trailing-slash"),
        pytest.param("http://[::1]", 403, id="ipv6-missing-port"),
        pytest.param("http://::1:8000", 403, id="ipv6-without-brackets"),
        pytest.param("http://localhost:*", 403, id="wildcard-in-a-request"),
        pytest.param("localhost:8000", 403, id="no-scheme"),
        pytest.param("file://", 403, id="file-scheme"),
        pytest.param("null", 403, id="null-origin-of-a-sandboxed-page"),
        pytest.param("http://evil.com", 403, id="foreign"),
        pytest.param("", 403, id="empty-but-present"),
    ],
)
async def test_an_origin_header_is_accepted_only_when_it_is_an_allowed_scheme_host_and_port(
    http: httpx2.AsyncClient, origin: str, expected: int
) -> None:
    assert await status(http, [("Host", GOOD_HOST), ("Origin", origin)]) == expected


async def test_no_origin_header_is_accepted_and_two_get_403(http: httpx2.AsyncClient) -> None:
    assert await status(http, [("Host", GOOD_HOST)]) == 200
    two = [("Host", GOOD_HOST), ("Origin", "http://localhost:8000"), ("Origin", "http://localhost:8000")]
    assert await status(http, two) == 403


async def test_a_foreign_host_is_refused_before_the_origin_is_looked_at(http: httpx2.AsyncClient) -> None:
    assert await status(http, [("Host", "evil.com"), ("Origin", "http://evil.com")]) == 421


async def test_health_is_not_subject_to_the_host_check(http: httpx2.AsyncClient) -> None:
    response = await http.get("/healthz", headers={"Host": "10.0.0.5:8000"})
    assert response.status_code == 200 and response.text == "ok"


def test_configured_hosts_compare_host_and_port_and_host_star_allows_any_port() -> None:
    settings = Settings(http_allowed_hosts="mcp.example.com, api.example.com:*, 10.0.0.5:9000, [fd00::5]:*")
    policy = peer_policy(HttpOptions(), settings)
    accepted = ["mcp.example.com", "mcp.example.com:80", "MCP.example.com.", "api.example.com", "api.example.com:1"]
    accepted += ["10.0.0.5:9000", "[fd00::5]:443", "[FD00:0::5]:1"]
    refused = ["mcp.example.com:8443", "mcp.example.com.evil.com", "10.0.0.5", "10.0.0.5:90000", "api.example.co"]
    refused += ["[fd00::6]:443", "fd00::5"]
    assert [h for h in accepted if not policy.host_allowed(h)] == []
    assert [h for h in refused if policy.host_allowed(h)] == []
    assert policy.host_allowed("mcp.example.com:443", "https") and not policy.host_allowed("mcp.example.com:443")


def test_configured_origins_compare_scheme_host_and_port() -> None:
    policy = peer_policy(HttpOptions(), Settings(http_allowed_origins="https://app.example, http://dev.example:*"))
    accepted = ["https://app.example", "https://app.example:443", "http://dev.example:3000", "http://dev.example"]
    refused = ["http://app.example", "https://app.example:8443", "https://dev.example:3000", "https://app.example.evil"]
    assert [o for o in accepted if not policy.origin_allowed(o)] == []
    assert [o for o in refused if policy.origin_allowed(o)] == []


def test_the_bound_address_is_allowed_on_the_bound_port_and_port_0_allows_any_port() -> None:
    policy = peer_policy(HttpOptions(host="10.1.2.3", port=9000), Settings())
    assert policy.host_allowed("10.1.2.3:9000") and not policy.host_allowed("10.1.2.3:9001")
    assert policy.host_allowed("localhost:9000") and not policy.host_allowed("localhost:8000")
    assert policy.origin_allowed("http://10.1.2.3:9000") and not policy.origin_allowed("http://10.1.2.3:9001")
    wildcard = peer_policy(HttpOptions(host="0.0.0.0"), Settings())
    assert not wildcard.host_allowed("0.0.0.0:8000")
    ephemeral = peer_policy(HttpOptions(port=0), Settings())
    assert ephemeral.host_allowed("127.0.0.1:43210") and ephemeral.origin_allowed("http://[::1]:43210")


def test_malformed_configured_entries_are_one_config_error_naming_each() -> None:
    settings = Settings(
        http_allowed_hosts="ok.example, evil com, https://x.example, a@b.example",
        http_allowed_origins="https://app.example/, app.example",
    )
    with pytest.raises(ConfigError) as caught:
        peer_policy(HttpOptions(), settings)
    lines = str(caught.value).splitlines()
    assert len(lines) == 5, lines
    assert lines[0].startswith("CODE_MODE_HTTP_ALLOWED_HOSTS: 'evil com'")
    assert any("'https://app.example/'" in line and "CODE_MODE_HTTP_ALLOWED_ORIGINS" in line for line in lines)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("LocalHost.", ("localhost", None)),
        ("[0::1]:80", ("[::1]", 80)),
        ("example.com:*", ("example.com", "*")),
        ("127.0.0.1:65535", ("127.0.0.1", 65535)),
    ],
)
def test_authorities_are_normalized(text: str, parsed: tuple[str, object]) -> None:
    assert parse_authority(text, wildcard=True) == parsed
