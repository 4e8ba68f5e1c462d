"""Discovery over MCP: a small tools/list whatever sits behind it, search_tools, stubs, cache tools."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server
from mcp_code_mode.tokens import count_json_tokens

from ..conftest import filesystem_entry, fixture_entry, make_config, memory_entry

pytestmark = pytest.mark.anyio

SYNTHETIC = 200


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    base = tmp_path_factory.mktemp("discovery")
    (base / "files").mkdir()
    config = make_config(
        {
            "filesystem": {**filesystem_entry(base / "files"), "description": "Project files"},
            "memory": memory_entry(base / "memory.jsonl"),
            "fixture": {**fixture_entry(FIXTURE_SYNTHETIC_TOOLS=str(SYNTHETIC)), "startupTimeout": 60},
        },
        workspace_dir=base / "runs",
        cache_dir=base / "cache",
        cache_embedder="wordllama",
    )
    async with Client(build_server(CodeMode(config)), mode="legacy") as c:
        yield c


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    if result.structured_content is not None:
        if set(result.structured_content) == {"result"}:  # a plain str result
            return result.structured_content["result"]
        return result.structured_content
    return "\n".join(getattr(b, "text", "") for b in result.content)


async def test_tools_list_stays_under_2000_tokens_with_200_synthetic_tools(client: Client) -> None:
    tools = (await client.list_tools()).tools
    payload = {"tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]}
    for encoding in ("o200k_base", "cl100k_base"):
        assert count_json_tokens(payload, encoding) < 2000
    description = next(t for t in tools if t.name == "execute_code").description or ""
    assert f"fixture ({SYNTHETIC + 16} tools: " in description
    assert "filesystem: Project files (14 tools: " in description
    assert "search_tools" in description
    assert "synthetic_199" not in description
    assert {"search_tools", "get_tool_stubs", "validate_code", "search_cached_scripts", "get_cache_stats"} <= {
        t.name for t in tools
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("read the contents of a text file", "filesystem.read_text_file"),
        ("remember facts about a person in the knowledge graph", "memory.create_entities"),
        ("archive a customer record", "_archive_customer"),
        ("move or rename a file", "filesystem.move_file"),
    ],
)
async def test_search_tools_finds_the_tool_for_a_task(client: Client, query: str, expected: str) -> None:
    found = await call(client, "search_tools", query=query, limit=3)
    assert any(t["tool"].endswith(expected) for t in found["tools"]), found


async def test_search_tools_filters_by_server_and_gives_three_levels_of_detail(client: Client) -> None:
    names = await call(client, "search_tools", query="delete", server="memory", detail="name", limit=5)
    assert names["tools"] and all(
        t["server"] == "memory" and set(t) == {"tool", "server", "score"} for t in names["tools"]
    )
    summary = await call(client, "search_tools", query="read text file", detail="summary", limit=1)
    [top] = summary["tools"]
    assert top["signature"].startswith("filesystem.read_text_file(path: str")
    assert top["summary"].endswith(".") and "\n" not in top["summary"]
    full = await call(client, "search_tools", query="read text file", detail="full", limit=1)
    stub = full["tools"][0]["stub"]
    assert "def read_text_file(" in stub and '"""' in stub
    stubs = await call(client, "get_tool_stubs", names=["filesystem.read_text_file"])
    assert stub.split("class filesystem:")[1].split('"""', 2)[2] in stubs


async def test_get_tool_stubs_by_names_is_what_the_sandbox_runs(client: Client) -> None:
    stubs = await call(client, "get_tool_stubs", names=["filesystem.read_text_file", "create_entities"])
    assert "def read_text_file(" in stubs and "def create_entities(" in stubs and "def write_file(" not in stubs
    compile(stubs, "<stubs>", "exec")
    everything = await call(client, "get_tool_stubs")
    assert "def read_text_file(" in everything and "def synthetic_0_get_invoice(" in everything
    bad = await client.call_tool("get_tool_stubs", {"names": ["filesystem.read_txt_file"]})
    assert bad.is_error and "did you mean" in json.dumps(bad.model_dump(mode="json"))


async def test_a_tool_added_downstream_shows_in_the_next_discovery_call(client: Client) -> None:
    before = await call(client, "search_tools", query="teleport_widget", detail="name", limit=3)
    assert "fixture.teleport_widget" not in [t["tool"] for t in before["tools"]]
    added = await call(client, "execute_code", language="python", code="fixture.add_tool(name='teleport_widget')")
    assert added["success"], added
    with anyio.fail_after(20):
        while True:
            found = await call(client, "search_tools", query="teleport widget", detail="name", limit=3)
            if "fixture.teleport_widget" in [t["tool"] for t in found["tools"]]:
                break
            await anyio.sleep(0.05)
    assert "def teleport_widget(" in await call(client, "get_tool_stubs", names=["fixture.teleport_widget"])
    tools = (await client.list_tools()).tools
    description = next(t for t in tools if t.name == "execute_code").description or ""
    assert f"fixture ({SYNTHETIC + 17} tools: " in description


async def test_validate_code_over_mcp_reports_findings(client: Client) -> None:
    answer = await call(client, "validate_code", language="python", code="fixture.add(a=1)\nfixture.ad(a=1, b=2)\n")
    assert answer["valid"] is False
    assert [(f["line"], f["kind"]) for f in answer["findings"]] == [(1, "arguments"), (2, "unknown-tool")]


async def test_validate_code_checks_imports_for_the_runner_and_packages_it_will_use(client: Client) -> None:
    code = "import os\nimport requests\n"
    local = await call(client, "validate_code", language="python", code=code)
    assert [f["line"] for f in local["findings"] if f["kind"] == "import"] == [1, 2]
    with_package = await call(client, "validate_code", language="python", code=code, packages=["requests"])
    assert [f["line"] for f in with_package["findings"] if f["kind"] == "import"] == [1]
    cpython = await call(client, "validate_code", language="python", code=code, runner="cpython")
    assert [f for f in cpython["findings"] if f["kind"] == "import"] == []


async def test_validate_code_type_checks_typescript_and_javascript_against_the_declarations(client: Client) -> None:
    ts = (
        "interface Row { n: number }\n"
        "const r = await fixture.add({ a: 1, b: 'two' });\n"
        "const row: Row = { n: r.result };\n"
        "await fixture.no_such_tool({});\n"
    )
    answer = await call(client, "validate_code", language="typescript", code=ts)
    assert answer["supported"] is True and answer["valid"] is False
    assert [(f["line"], f["message"][:6]) for f in answer["findings"]] == [(2, "TS2322"), (4, "TS2339")]
    js = await call(client, "validate_code", language="js", code="await fixture.add({ a: 1 });\n")
    assert [(f["line"], f["message"][:6]) for f in js["findings"]] == [(1, "TS2345")]
    fine = await call(
        client, "validate_code", language="ts", code="console.log((await fixture.add({ a: 1, b: 2 })).result);"
    )
    assert fine["valid"] is True and fine["findings"] == []


async def test_the_cache_tools_find_list_show_and_count_scripts(client: Client, tmp_path: Path) -> None:
    code = "rows = [line.split(',') for line in 'a,1\\nb,2'.splitlines()]\nsum(int(r[1]) for r in rows)"
    run = await call(client, "execute_code", language="python", code=code, description="parse CSV and sum a column")
    replay = await call(client, "execute_code", language="python", code=code, cache="reuse")
    assert replay["cached"] and replay["returnValue"] == 3 and replay["hash"] == run["hash"]
    found = await call(client, "search_cached_scripts", query="add up numbers in a csv", language="python")
    assert found["scripts"][0]["hash"] == run["hash"]
    assert {"score", "stale", "description"} <= set(found["scripts"][0])
    listed = await call(client, "list_cached_scripts", limit=50)
    assert run["hash"] in [s["hash"] for s in listed["scripts"]]
    shown = await call(client, "get_cached_script", hash=run["hash"][:10])
    assert shown["code"] == code and shown["returnValue"] == 3 and shown["description"] == "parse CSV and sum a column"
    stats = await call(client, "get_cache_stats")
    assert stats["scripts"] >= 1 and stats["hits"] >= 1 and 0 < stats["hitRate"] <= 1
    missing = await client.call_tool("get_cached_script", {"hash": "ffffffffffff"})
    assert missing.is_error
