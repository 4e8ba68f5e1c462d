"""``GET /metrics`` on a real ``serve --http`` process: behind the token, Host-checked, and the figures of real
runs (runs, tool calls by server and decision, savings, gauges) read back from a scrape."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from .conftest import ServerProcess, fixture_entry, http_client, http_server, write_config

pytestmark = pytest.mark.anyio

TOKEN = "metrics-token-for-tests"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = write_config(tmp_path_factory.mktemp("metrics") / "servers.json", {"fixture": fixture_entry()})
    with http_server(config, config.with_name("server.log"), auth_token=TOKEN, python_runner="local") as running:
        yield running


def scrape(server: ServerProcess, **headers: str) -> httpx2.Response:
    return httpx2.get(server.url.replace("/mcp", "/metrics"), headers=headers, timeout=30)


def value(text: str, series: str) -> float:
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{series} not in:\n{text}"
    return float(found.group(1))


def test_metrics_need_the_token_and_an_allowed_host(server: ServerProcess) -> None:
    assert scrape(server).status_code == 401
    assert scrape(server, Authorization="Bearer wrong").status_code == 401
    assert scrape(server, Authorization=f"Bearer {TOKEN}", Host="evil.example").status_code == 421
    answer = scrape(server, Authorization=f"Bearer {TOKEN}")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")


async def test_a_scrape_after_runs_reads_back_their_figures(server: ServerProcess) -> None:
    code = "for i in range(3):\n    fixture.echo(text='metrics ' + str(i))\ncall_tool('fixture', 'nope', {})\n"
    async with http_client(server.url, TOKEN) as client:
        first = await client.call_tool("execute_code", {"language": "python", "code": code, "cache": "off"})
        assert first.structured_content is not None
        assert first.structured_content["savings"]["roundTrips"] == 3
        tokens = first.structured_content["savings"]["tokens"]
        assert tokens > 0
        await client.call_tool("execute_code", {"language": "python", "code": "1/0", "cache": "off"})
        stats = await client.call_tool("get_cache_stats", {})
        assert stats.structured_content is not None
        assert stats.structured_content["savings"]["roundTrips"] == 3
    text = scrape(server, Authorization=f"Bearer {TOKEN}").text
    assert value(text, 'codemode_runs_total{runner="local",success="false",cached="false"}') == 2
    assert value(text, 'codemode_tool_calls_total{server="fixture",decision="allowed",ok="true"}') == 3
    assert value(text, 'codemode_tool_calls_total{server="fixture",decision="refused",ok="false"}') == 1
    assert value(text, 'codemode_run_errors_total{type="ZeroDivisionError",stage="run"}') == 1
    assert value(text, 'codemode_run_duration_seconds_count{runner="local"}') == 2
    assert value(text, "codemode_savings_round_trips_total") == 3
    assert value(text, "codemode_savings_tokens_total") == tokens
    assert value(text, 'codemode_admission{figure="running"}') == 0
    assert value(text, "codemode_sessions_open") == 0
    assert value(text, 'codemode_servers{state="ready"}') == 1
    assert value(text, 'codemode_runner_pool{runner="local",figure="poolSize"}') >= 1


def test_metrics_can_be_opened_to_scrapers_without_the_token(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    with http_server(config, tmp_path / "server.log", auth_token=TOKEN, metrics_public="true") as running:
        assert scrape(running).status_code == 200
        assert httpx2.post(running.url, json={}, timeout=30).status_code == 401  # the MCP endpoint keeps its token
