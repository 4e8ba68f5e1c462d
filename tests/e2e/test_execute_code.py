"""execute_code through a real MCP client, against the real npm filesystem and memory servers and the fixture."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, ImageContent, TextContent

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import filesystem_entry, fixture_entry, make_config, memory_entry

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def client(shared_dirs: dict[str, Path]) -> AsyncIterator[Client]:
    config = make_config(
        {
            "filesystem": {**filesystem_entry(shared_dirs["files"]), "description": "Project files"},
            "memory": memory_entry(shared_dirs["memory"]),
            "fixture": {**fixture_entry(), "timeout": 2, "startupTimeout": 60},
        },
        workspace_dir=shared_dirs["runs"],
    )
    async with Client(build_server(CodeMode(config)), mode="legacy") as c:
        yield c


async def execute(client: Client, code: str, **extra: Any) -> tuple[CallToolResult, dict[str, Any]]:
    result = await client.call_tool("execute_code", {"language": "python", "code": code, **extra})
    assert result.structured_content is not None
    return result, result.structured_content


def text_of(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


async def test_tools_list_has_execute_code_naming_the_servers(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    execute_code = tools["execute_code"]
    assert execute_code.output_schema is None, "tools/list omits output schemas; results carry structured content"
    assert set(execute_code.input_schema["required"]) == {"language", "code"}
    description = execute_code.description or ""
    assert "filesystem: Project files (14 tools" in description
    assert "memory (9 tools" in description
    assert "read_text_file" in description


async def test_one_script_orchestrates_filesystem_and_memory(client: Client, shared_dirs: dict[str, Path]) -> None:
    code = """
import json
filesystem.create_directory(path="orders")
for i in range(5):
    filesystem.write_file(path=f"orders/o{i}.json", content=json.dumps({"id": i, "amount": 10 * i}))
names = [l.split(" ", 1)[1] for l in filesystem.list_directory(path="orders")["content"].splitlines()]
total = sum(json.loads(filesystem.read_text_file(path="orders/" + n)["content"])["amount"] for n in names)
memory.create_entities(entities=[{"name": "orders", "entityType": "summary", "observations": [f"total {total}"]}])
graph = memory.open_nodes(names=["orders"])
print("total", total)
{"files": len(names), "total": total, "observations": graph["entities"][0]["observations"]}
"""
    result, data = await execute(client, code, description="sum order amounts")
    assert data["success"], data["error"]
    assert data["returnValue"] == {"files": 5, "total": 100, "observations": ["total 100"]}
    assert data["output"] == "total 100\n"
    assert data["toolCalls"] == 5 + 1 + 1 + 5 + 1 + 1
    assert not result.is_error
    assert "total 100" in text_of(result)
    assert (shared_dirs["files"] / "orders" / "o3.json").read_text(encoding="utf-8") == '{"id": 3, "amount": 30}'
    stored = [json.loads(line) for line in shared_dirs["memory"].read_text(encoding="utf-8").splitlines()]
    assert any(item.get("name") == "orders" for item in stored)


async def test_results_are_structured_content_or_text_parsed_when_json(client: Client) -> None:
    code = (
        "a = fixture.stats(values=[1, 2, 3])\n"
        "b = fixture.echo_json(value='v')\n"
        "c = call_tool('fixture', 'convert', {'amount': 10})\n"
        "[a, b, c]"
    )
    _, data = await execute(client, code)
    assert data["returnValue"] == [
        {"count": 3, "total": 6.0, "mean": 2.0},
        {"value": "v", "ok": True},
        {"result": "6.214 mi"},
    ]


async def test_a_tool_error_raises_tool_error_with_the_servers_message(client: Client) -> None:
    code = (
        "try:\n"
        "    filesystem.read_text_file(path='/etc/passwd')\n"
        "except ToolError as e:\n"
        "    print('refused:', e.server, e.tool, 'outside' in str(e))\n"
        "fixture.fail(message='the server said no')\n"
    )
    result, data = await execute(client, code)
    assert data["output"] == "refused: filesystem read_text_file True\n"
    assert not data["success"] and result.is_error
    assert data["error"]["type"] == "ToolError"
    assert "the server said no" in data["error"]["message"]
    assert data["error"]["line"] == 5


async def test_a_server_that_crashes_mid_script_fails_that_call_and_is_restarted(client: Client) -> None:
    code = (
        "before = fixture.pid()['result']\n"
        "try:\n"
        "    fixture.crash()\n"
        "except ToolError as e:\n"
        "    message = str(e)\n"
        "after = fixture.pid()['result']\n"
        "{'message': message, 'restarted': before != after, 'fs': filesystem.list_allowed_directories()}"
    )
    _, data = await execute(client, code, timeout=60000)
    assert data["success"], data["error"]
    value = data["returnValue"]
    assert "'fixture'" in value["message"] and "died" in value["message"]
    assert value["restarted"] is True
    assert value["fs"]


async def test_a_slow_tool_times_out_with_a_clear_error(client: Client) -> None:
    _, data = await execute(client, "fixture.slow(seconds=30)")
    assert data["error"]["type"] == "ToolError"
    assert "did not answer within 2 s" in data["error"]["message"]


async def test_images_returned_by_the_script_come_back_as_image_content(client: Client) -> None:
    result, data = await execute(client, "fixture.image()")
    assert data["success"]
    images = [b for b in result.content if isinstance(b, ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/png"


async def test_unknown_servers_and_tools_are_named_in_the_error(client: Client) -> None:
    _, data = await execute(client, "call_tool('nope', 'x', {})")
    assert "unknown server 'nope'" in data["error"]["message"]
    _, data = await execute(client, "call_tool('fixture', 'nope', {})")
    assert "server 'fixture' has no tool 'nope'" in data["error"]["message"]


async def test_tools_added_at_run_time_are_callable_in_the_next_script(client: Client) -> None:
    await execute(client, "fixture.add_tool(name='late_arrival')")
    data: dict[str, Any] = {}
    for _ in range(50):
        _, data = await execute(client, "fixture.late_arrival(text='hi')")
        if data["success"]:
            break
    assert data["returnValue"] == {"result": "late_arrival:hi"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"language": "ruby"}, "language 'ruby' is not supported yet"),
        ({"packages": ["requests @ https://evil.invalid/r.whl"]}, "only a name and a version specifier"),
        ({"runner": "wasmtime"}, "runner 'wasmtime' is not supported yet"),
        ({"timeout": 0}, "timeout must be between 1 and 300000 ms"),
        ({"timeout": 300001}, "timeout must be between 1 and 300000 ms"),
    ],
)
async def test_requests_that_cannot_run_get_a_clear_error(
    client: Client, arguments: dict[str, Any], message: str
) -> None:
    result = await client.call_tool("execute_code", {"language": "python", "code": "print(1)", **arguments})
    assert result.is_error
    assert message in text_of(result)
    assert result.structured_content is not None and message in result.structured_content["error"]["message"]


async def test_get_tool_stubs_returns_the_stubs_the_sandbox_uses(client: Client) -> None:
    result = await client.call_tool("get_tool_stubs", {"server": "memory"})
    text = text_of(result)
    assert "class memory:" in text
    assert "def create_entities(entities: list[CreateEntitiesEntity]) -> CreateEntitiesResult:" in text
    assert "class filesystem" not in text


async def test_get_execution_limits_tells_the_truth_about_this_host(client: Client) -> None:
    result = await client.call_tool("get_execution_limits", {})
    assert result.structured_content is not None
    limits = result.structured_content
    assert limits["timeoutMs"] == {"default": 30000, "max": 300000}
    assert limits["isolation"]["isolation"] == "namespaces"
    assert limits["network"]["offIsEnforced"] is True
    assert {s["name"]: s["state"] for s in limits["servers"]} == {
        "filesystem": "ready",
        "memory": "ready",
        "fixture": "ready",
    }
    assert set(limits["runners"]) >= {"local", "cpython"}


async def test_list_supported_languages_names_runners_and_their_isolation(client: Client) -> None:
    result = await client.call_tool("list_supported_languages", {})
    assert result.structured_content is not None
    languages = {entry["language"]: entry for entry in result.structured_content["result"]}
    python = languages["python"]
    assert "py" in python["aliases"]
    runners = {r["name"]: r for r in python["runners"]}
    assert runners["local"]["default"] is True
    assert runners["cpython"]["isolation"] == "namespaces"
