"""Defects of the run path a new user hit, each through a real MCP client and real runners."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio

MAX_OUTPUT = 2000


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    runs = tmp_path_factory.mktemp("runs")
    config = make_config(
        {"fixture": fixture_entry()},
        workspace_dir=runs,
        default_timeout_ms=700,
        max_output_chars=MAX_OUTPUT,
        max_warm_environments=1,
    )
    async with Client(build_server(CodeMode(config)), mode="legacy") as c:
        yield c


async def call(client: Client, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any], str]:
    result = await client.call_tool(tool, arguments)
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    return bool(result.is_error), result.structured_content or {}, text


async def test_the_default_timeout_setting_holds_over_mcp(client: Client) -> None:
    failed, result, _ = await call(client, "execute_code", language="python", runner="cpython", code="while True: pass")
    assert failed and result["error"]["type"] == "TimeoutError"
    assert "700 ms" in result["error"]["message"]
    assert result["executionTime"] < 5000
    _, limits, _ = await call(client, "get_execution_limits")
    assert limits["timeoutMs"]["default"] == 700


async def test_an_explicit_timeout_still_wins(client: Client) -> None:
    failed, result, _ = await call(
        client,
        "execute_code",
        language="python",
        runner="cpython",
        code="import time\ntime.sleep(1.2)\n'ok'",
        timeout=5000,
    )
    assert not failed and result["returnValue"] == "ok"


@pytest.mark.parametrize(
    ("arguments", "runner"),
    [
        ({"language": "python", "runner": "deno", "code": "1"}, "deno"),
        ({"language": "python", "runner": "cpython", "code": "1", "timeout": 10**9}, "cpython"),
        ({"language": "javascript", "code": "1", "timeout": 0}, "deno"),
        ({"language": "python", "runner": "pyodide", "code": "1", "packages": ["no-such-package-anywhere"]}, "pyodide"),
    ],
)
async def test_a_refused_request_reports_the_runner_it_asked_for(
    client: Client, arguments: dict[str, Any], runner: str
) -> None:
    failed, result, _ = await call(client, "execute_code", **arguments)
    assert failed and result["success"] is False
    assert result["runner"] == runner, result


async def test_unknown_arguments_to_our_tools_are_refused_with_the_valid_names(client: Client) -> None:
    failed, _, text = await call(client, "get_tool_stubs", tools=["fixture.echo"])
    assert failed
    assert "'tools'" in text and "names" in text and "server" in text and "language" in text
    failed, _, text = await call(client, "execute_code", language="python", code="1", timout=5)
    assert failed and "'timout'" in text and "timeout" in text


async def test_a_return_value_over_the_cap_is_cut_on_every_runner(client: Client) -> None:
    scripts = {
        "cpython": ("python", "'x' * 5_000_000"),
        "local": ("python", "'x' * 5_000_000"),
        "deno": ("javascript", 'export default "x".repeat(5_000_000);'),
    }
    for runner, (language, code) in scripts.items():
        failed, result, _ = await call(
            client, "execute_code", language=language, runner=runner, code=code, timeout=20000
        )
        assert not failed, (runner, result.get("error"))
        assert len(result["returnValue"]) <= MAX_OUTPUT, runner
        assert result["truncated"] is True, runner


async def test_a_failed_install_reports_the_time_it_took(client: Client) -> None:
    failed, result, _ = await call(
        client, "execute_code", language="python", runner="cpython", code="1", packages=["six==0.0.1"], timeout=20000
    )
    assert failed and result["error"]["type"] == "PackageInstallError", result
    assert result["installTime"] > 0


async def test_warm_package_environments_are_capped(client: Client, tmp_path: Path) -> None:
    for package, module in (("six", "six"), ("toolz", "toolz")):
        failed, result, _ = await call(
            client,
            "execute_code",
            language="python",
            runner="cpython",
            code=f"import {module}\n'{module}'",
            packages=[package],
            timeout=60000,
        )
        assert not failed, result.get("error")
    _, limits, _ = await call(client, "get_execution_limits")
    cpython = limits["runners"]["cpython"]
    assert cpython["maxWarmEnvironments"] == 1
    assert cpython["warmEnvironments"] <= 1
