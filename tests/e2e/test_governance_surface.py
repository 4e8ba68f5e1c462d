"""What the model is told about the policy: get_execution_limits, search_tools, get_tool_stubs, validate_code,
execute_code's description, and get_audit_log (only when the operator offers it); and that a policy error in
the servers file stops start-up naming the entry."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcp_code_mode.config import CodeModeConfig
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import ConfigError
from mcp_code_mode.server import build_server

from ..conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio

POLICY = {"default": "allow", "tools": {"echo": "ask", "fail": "deny", "add": {"decision": "allow", "maxPerRun": 3}}}


def config(**settings: Any) -> CodeModeConfig:
    return make_config({"fixture": {**fixture_entry(), "policy": POLICY}}, pyodide_pool_size=0, **settings)


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[Client]:
    async with Client(build_server(CodeMode(config(audit_tool=True))), mode="legacy") as c:
        yield c


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, arguments)
    if result.structured_content is not None:
        return result.structured_content.get("result", result.structured_content)
    text = result.content[0].text  # pyright: ignore[reportAttributeAccessIssue]
    try:
        return json.loads(text)
    except ValueError:
        return text


async def test_the_limits_show_the_policy_and_how_approvals_work(client: Client) -> None:
    limits = await call(client, "get_execution_limits", {})
    policy = limits["policy"]
    tools = {e["tool"]: e for e in policy["servers"]["fixture"]["tools"]}
    assert tools["echo"]["decision"] == "ask" and tools["fail"]["decision"] == "deny"
    assert tools["add"]["maxPerRun"] == 3
    assert "elicitation" in policy["approvals"]["how"] and policy["approvals"]["timeoutS"] == 120


async def test_search_and_stubs_say_which_tools_ask_or_are_denied(client: Client) -> None:
    found = await call(client, "search_tools", {"query": "echo text back", "server": "fixture", "limit": 20})
    by_name = {t["tool"]: t for t in found["tools"]}
    assert by_name["fixture.echo"]["policy"] == "ask"
    added = await call(client, "search_tools", {"query": "add two numbers", "server": "fixture", "limit": 20})
    by_name = {t["tool"]: t for t in added["tools"]}
    assert "fixture.add" in by_name and "policy" not in by_name["fixture.add"]  # allowed: nothing to say
    stubs = await call(client, "get_tool_stubs", {"names": ["fixture.echo", "fixture.fail", "fixture.add"]})
    assert "# policy: fixture.echo asks for approval" in stubs and "# policy: fixture.fail is denied" in stubs
    assert "fixture.add asks" not in stubs
    ts = await call(client, "get_tool_stubs", {"names": ["fixture.fail"], "language": "typescript"})
    assert ts.startswith("// policy: fixture.fail is denied")


async def test_validate_code_reports_a_call_to_a_denied_tool_however_it_is_named(client: Client) -> None:
    for language, code in [
        ("python", "x = 1\nfixture.fail(message='x')\n"),
        ("python", "x = 1\ncall_tool('fixture', 'fail', {})\n"),
        ("javascript", "const x = 1;\nawait callTool('fixture', 'fail', {});\n"),
    ]:
        checked = await call(client, "validate_code", {"language": language, "code": code})
        policy = [f for f in checked["findings"] if f["kind"] == "policy"]
        assert checked["valid"] is False and len(policy) == 1, (language, checked)
        assert policy[0]["line"] == 2 and policy[0]["message"].startswith("denied: fixture.fail")
    fine = await call(client, "validate_code", {"language": "python", "code": "fixture.echo(text='hi')"})
    assert not [f for f in fine["findings"] if f["kind"] == "policy"]


async def test_the_description_names_gated_tools_and_plan_mode(client: Client) -> None:
    tools = (await client.list_tools()).tools
    description = next(t for t in tools if t.name == "execute_code").description or ""
    assert "[asks: echo; denies: fail]" in description
    assert 'mode="plan"' in description and "approvePlan" in description
    schema = next(t for t in tools if t.name == "execute_code").input_schema["properties"]
    assert schema["mode"]["enum"] == ["run", "plan"] and "approvePlan" in schema


async def test_the_audit_log_tool_lists_calls_with_their_decisions(client: Client) -> None:
    code = "for i in range(4):\n    try:\n        fixture.add(a=i, b=1)\n    except ToolError as e:\n        print(e)"
    result = await client.call_tool("execute_code", {"language": "python", "code": code, "cache": "off"})
    data = result.structured_content
    assert data is not None and [c["decision"] for c in data["calls"]] == ["allowed"] * 3 + ["over_cap"]
    assert "over cap: fixture.add: the run made 3 calls" in data["output"]
    log = await call(client, "get_audit_log", {"run": data["hash"]})
    decisions = [e["decision"] for e in log["entries"]]
    assert decisions == ["over_cap", "allowed", "allowed", "allowed"]  # newest first
    assert log["entries"][0]["preview"] == '{"a":3,"b":1}'


async def test_without_the_setting_there_is_no_audit_log_tool() -> None:
    async with Client(build_server(CodeMode(config())), mode="legacy") as c:
        names = {t.name for t in (await c.list_tools()).tools}
    assert "get_audit_log" not in names and "execute_code" in names


def test_a_policy_error_in_the_servers_file_stops_start_up_naming_the_entry(tmp_path: Path) -> None:
    bad = {**fixture_entry(), "policy": {"tools": {"echo": "maybe"}}}
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"servers": {"fixture": bad}}), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"server 'fixture'.*policy\.tools\.echo"):
        CodeModeConfig.load(path, env={})


@pytest.mark.parametrize(
    ("runner", "language", "code", "line"),
    [
        ("local", "python", "x = 1\ny = fixture.echo(text='a')\n", 2),
        ("cpython", "python", "def f():\n    return fixture.echo(text='a')\n\n\nf()\n", 2),
        ("pyodide", "python", "x = 1\n\nfixture.echo(text='a')\n", 3),
        ("deno", "javascript", "const x = 1;\nawait fixture.echo({ text: 'a' });\n", 2),
    ],
)
async def test_a_plan_lists_each_gated_call_with_the_line_that_made_it(
    client: Client, runner: str, language: str, code: str, line: int
) -> None:
    result = await client.call_tool(
        "execute_code", {"language": language, "code": code, "runner": runner, "mode": "plan", "timeout": 60_000}
    )
    data = result.structured_content
    assert data is not None and data["success"], data
    (planned,) = data["plan"]["calls"]
    assert (planned["tool"], planned["arguments"], planned["line"]) == ("echo", {"text": "a"}, line)
