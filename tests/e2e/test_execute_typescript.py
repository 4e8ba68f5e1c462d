"""execute_code in TypeScript and JavaScript through a real MCP client, against the npm servers and the fixture."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import filesystem_entry, fixture_entry, make_config, memory_entry

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def client(shared_dirs: dict[str, Path]) -> AsyncIterator[Client]:
    config = make_config(
        {
            "filesystem": filesystem_entry(shared_dirs["files"]),
            "memory": memory_entry(shared_dirs["memory"]),
            "fixture": fixture_entry(),
        },
        workspace_dir=shared_dirs["runs"],
    )
    async with Client(build_server(CodeMode(config)), mode="legacy") as c:
        yield c


async def execute(client: Client, language: str, code: str, **extra: Any) -> dict[str, Any]:
    result = await client.call_tool("execute_code", {"language": language, "code": code, **extra})
    assert result.structured_content is not None
    return result.structured_content


async def test_a_typescript_script_orchestrates_three_servers_in_one_call(
    client: Client, shared_dirs: dict[str, Path]
) -> None:
    code = """
interface Reading { city: string; celsius: number }
const cities = ["Oslo", "Lima", "Pune"];
await filesystem.create_directory({ path: "weather" });
const readings: Reading[] = [];
for (const [i, city] of cities.entries()) {
  const { result } = await fixture.add({ a: 10 * i, b: 5 });
  readings.push({ city, celsius: result });
  await filesystem.write_file({ path: `weather/${city}.json`, content: JSON.stringify(readings.at(-1)) });
}
const stats = await fixture.stats({ values: readings.map((r) => r.celsius) });
const files = (await filesystem.list_directory({ path: "weather" })).content.split("\\n").length;
await memory.create_entities({
  entities: [{ name: "weather", entityType: "report", observations: [`mean ${stats.mean}`] }],
});
const stored = await memory.open_nodes({ names: ["weather"] });
console.log(`${files} files, mean ${stats.mean}`);
export default { stats, observations: stored.entities[0].observations };
"""
    data = await execute(client, "ts", code, description="weather summary")
    assert data["success"], data["error"]
    assert (data["language"], data["runner"]) == ("typescript", "deno")
    assert data["output"] == "3 files, mean 15\n"
    assert data["returnValue"] == {"stats": {"count": 3, "total": 45.0, "mean": 15.0}, "observations": ["mean 15"]}
    assert data["toolCalls"] == 1 + 3 * 2 + 1 + 1 + 1 + 1
    assert (shared_dirs["files"] / "weather" / "Lima.json").read_text(
        encoding="utf-8"
    ) == '{"city":"Lima","celsius":15}'


async def test_a_javascript_error_comes_back_with_its_type_and_line(client: Client) -> None:
    result = await client.call_tool(
        "execute_code", {"language": "javascript", "code": "console.log('before');\nnull.x;\n"}
    )
    assert result.is_error
    data = result.structured_content
    assert data is not None
    assert (data["error"]["type"], data["error"]["line"]) == ("TypeError", 2)
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    assert "before" in text and "Error: TypeError (line 2)" in text


async def test_get_tool_stubs_in_typescript_returns_declarations(client: Client) -> None:
    result = await client.call_tool("get_tool_stubs", {"server": "memory", "language": "typescript"})
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent))
    assert "declare const memory: ServerExtras & {" in text
    assert "  create_entities(args: CreateEntitiesArgs): Promise<CreateEntitiesResult>;" in text
    assert "interface CreateEntitiesEntity {" in text
    assert "declare const filesystem" not in text


async def test_the_tool_descriptions_name_the_languages_and_runners(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    schema = tools["execute_code"].input_schema["properties"]
    assert "typescript" in schema["language"]["description"] and "deno" in schema["runner"]["description"]
    assert "export default" in (tools["execute_code"].description or "")


async def test_a_package_outside_the_allow_list_is_refused_with_the_list(client: Client) -> None:
    result = await client.call_tool(
        "execute_code", {"language": "js", "code": "const pad = require('left-pad');", "packages": []}
    )
    assert result.is_error
    data = result.structured_content
    assert data is not None
    assert data["error"]["type"] == "PackageError"
    assert "npm package 'left-pad' not allowed (allowed: axios" in data["error"]["message"]
