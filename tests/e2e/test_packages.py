"""Packages in execute_code: the seed's examples 4 and 5, and only what was asked for."""

from __future__ import annotations

import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from mcp import Client

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import make_config

pytestmark = pytest.mark.anyio

SEED_EXAMPLE_4 = """import numpy as np

# Create array and perform calculations
data = np.array([1, 2, 3, 4, 5])
print(f"Mean: {np.mean(data)}")
print(f"Std Dev: {np.std(data)}")
print(f"Sum: {np.sum(data)}")
"""

SEED_EXAMPLE_5 = """from bs4 import BeautifulSoup
import requests

response = requests.get('https://example.com')
soup = BeautifulSoup(response.text, 'html.parser')
title = soup.find('title').text
print(f"Page title: {title}")
"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><head><title>Example Domain</title></head><body><h1>hi</h1></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def website() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    # The page on loopback stands for example.com: opened to the egress proxy.
    config = make_config({}, cache_dir=tmp_path_factory.mktemp("cache"), network_allow_private="127.0.0.1")
    async with Client(build_server(CodeMode(config)), mode="legacy") as c:
        yield c


async def run(client: Client, code: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool("execute_code", {"language": "python", "code": code, **arguments})
    assert result.structured_content is not None
    return result.structured_content


@pytest.mark.parametrize("runner", ["local", "cpython"])
async def test_seed_example_4_numpy_runs_as_written(client: Client, runner: str) -> None:
    data = await run(client, SEED_EXAMPLE_4, packages=["numpy"], runner=runner)
    assert data["success"], data["error"]
    assert data["output"] == "Mean: 3.0\nStd Dev: 1.4142135623730951\nSum: 15\n"
    again = await run(client, SEED_EXAMPLE_4, packages=["numpy"], runner=runner)
    assert again["success"] and again["installTime"] == 0


@pytest.mark.parametrize("runner", ["local", "cpython"])
async def test_seed_example_5_beautifulsoup_and_requests_run_as_written(
    client: Client, website: str, runner: str
) -> None:
    code = SEED_EXAMPLE_5.replace("https://example.com", website)
    data = await run(client, code, packages=["beautifulsoup4", "requests"], runner=runner, allowNetworking=True)
    assert data["success"], data["error"]
    assert data["output"] == "Page title: Example Domain\n"


@pytest.mark.parametrize("runner", ["local", "cpython"])
async def test_a_run_gets_only_the_packages_it_asked_for(client: Client, runner: str) -> None:
    await run(client, "import numpy", packages=["numpy"], runner=runner)  # installed and cached
    data = await run(client, "import numpy", packages=["six"], runner=runner)
    assert not data["success"]
    assert data["error"]["type"] in ("InterpreterError", "ModuleNotFoundError")
    plain = await run(client, "import six", runner=runner)
    assert not plain["success"]


async def test_a_bad_requirement_is_refused_before_any_install(client: Client) -> None:
    result = await client.call_tool(
        "execute_code",
        {"language": "python", "code": "print(1)", "packages": ["requests @ https://evil.invalid/r.whl"]},
    )
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["error"]["type"] == "PackageError"
    assert "requests @ https://evil.invalid/r.whl" in result.structured_content["error"]["message"]


async def test_a_failed_install_comes_back_summarised_in_the_result(client: Client) -> None:
    data = await run(client, "print(1)", packages=["six==0.0.0.404"])
    assert not data["success"]
    assert data["error"]["type"] == "PackageInstallError"
    assert "six==0.0.0.404" in data["error"]["message"]


async def test_list_allowed_packages_returns_the_whitelist(client: Client) -> None:
    result = await client.call_tool("list_allowed_packages", {"language": "python"})
    assert result.structured_content is not None
    names = [p["name"] for p in result.structured_content["python"]]
    assert "requests" in names and "numpy" in names
    everything = await client.call_tool("list_allowed_packages", {"language": "all"})
    assert everything.structured_content is not None
    assert {"name": "axios", "default": "axios@1"} in everything.structured_content["javascript"]


async def test_get_cache_stats_counts_the_package_environments(client: Client) -> None:
    await run(client, "import six", packages=["six"], runner="cpython")
    result = await client.call_tool("get_cache_stats", {})
    assert result.structured_content is not None
    environments = result.structured_content["environments"]
    assert environments["count"] >= 1 and environments["bytes"] > 0
