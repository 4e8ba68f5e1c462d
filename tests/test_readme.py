"""The README's client snippets parse, and the stdio ones start the server with their exact command."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from .conftest import ROOT, server_env

pytestmark = pytest.mark.anyio

PLACEHOLDER = "/path/to/mcp-code-mode"
SNIPPET = re.compile(r"<!-- client: ([a-z-]+) -->\n```json\n(.*?)\n```", re.DOTALL)


def snippets() -> dict[str, dict[str, Any]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return {name: json.loads(text) for name, text in SNIPPET.findall(readme)}


def entry_of(client: str, snippet: dict[str, Any]) -> dict[str, Any]:
    key = "servers" if client.startswith("vscode") else "mcpServers"
    return snippet[key]["code-mode"]


def test_there_is_a_snippet_for_claude_desktop_vs_code_and_cursor() -> None:
    assert set(snippets()) == {"claude-desktop", "vscode", "vscode-http", "cursor", "cursor-http"}


def test_the_http_snippets_send_the_token_to_the_default_endpoint() -> None:
    found = snippets()
    for client in ("vscode-http", "cursor-http"):
        entry = entry_of(client, found[client])
        assert entry["url"] == "http://127.0.0.1:8000/mcp"
        assert re.fullmatch(r"Bearer \$\{(input|env):[A-Za-z_-]+\}", entry["headers"]["Authorization"])
    assert entry_of("vscode-http", found["vscode-http"])["type"] == "http"
    assert found["vscode-http"]["inputs"][0]["id"] == "code-mode-token"


async def test_the_stdio_snippets_start_the_server_with_their_exact_command() -> None:
    found = snippets()
    commands = {
        (entry["command"], tuple(entry["args"]))
        for client, snippet in found.items()
        if "command" in (entry := entry_of(client, snippet))
    }
    assert len(commands) == 1, "the desktop clients should all be given the same command"
    command, args = commands.pop()
    params = StdioServerParameters(
        command=command.replace(PLACEHOLDER, str(ROOT)),
        args=[arg.replace(PLACEHOLDER, str(ROOT)) for arg in args],
        env=server_env(),
        cwd="/",  # a desktop client starts it from anywhere
    )
    with anyio.fail_after(120):
        async with Client(params, mode="legacy") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert "execute_code" in tools
    description = tools["execute_code"].description or ""
    assert "- filesystem:" in description and "- memory:" in description
    assert "not available" not in description, description
