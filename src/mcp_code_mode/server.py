"""The MCP tools. Each one is a few lines that call the engine."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import mcp_types as types
from mcp.server import MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent
from pydantic import Field

from . import __version__
from .engine import CodeMode, ErrorDetail, RunResult
from .errors import CodeModeError

INSTRUCTIONS = """\
Code mode: instead of calling tools one by one, write one Python script and run it with execute_code.
Inside the script every tool of every connected MCP server is a plain function,
e.g. filesystem.read_text_file(path="notes.txt"). Print what you need to see; intermediate data stays
in the sandbox. get_tool_stubs shows the exact signatures."""

EXECUTE_CODE_HEAD = """\
Run a script in a sandbox where every tool of the connected MCP servers is an ordinary function.

Call tools as `server.tool(arg=value)`; results are the tool's structured content (a dict) or its
text (parsed when JSON); a failing tool raises ToolError (catch it with `except ToolError as e`).
`call_tool(server, tool, {...})` calls a tool by name. Print what you need to see, or end with an
expression (or `final_answer(x)`) to return it as returnValue. `open()` works in the run's own
workspace directory, which is deleted after the run. Use get_tool_stubs for exact signatures.

Python runs in smolagents' restricted interpreter by default (no os, sys or subprocess; safe stdlib
modules such as json, re, math, datetime, collections, csv are importable). runner="pyodide" runs
full CPython in WebAssembly under Deno instead (the whole language and standard library, `packages`
from an allow-list; in async code, await the tool functions)."""


def describe_servers(engine: CodeMode) -> str:
    lines: list[str] = []
    for spec in engine.index.servers:
        status = engine.pool.servers[spec.name]
        head = f"- {spec.namespace}"
        if spec.description:
            head += f": {spec.description}"
        if status.state != "ready":
            lines.append(f"{head} (not available: {status.error or status.state})")
            continue
        names = ", ".join(t.func for t in spec.tools)
        lines.append(f"{head} ({len(spec.tools)} tools: {names})")
    return "Connected servers (namespace in scripts):\n" + ("\n".join(lines) if lines else "- none")


def result_text(result: RunResult) -> str:
    """The short text for clients that read only text content."""
    parts: list[str] = []
    if result.output:
        parts.append(result.output.rstrip("\n"))
        if result.truncated:
            parts.append("[output truncated]")
    if result.return_value is not None:
        parts.append("Return value: " + json.dumps(result.return_value, ensure_ascii=False, default=repr)[:4000])
    if result.error is not None:
        where = f" (line {result.error.line})" if result.error.line else ""
        parts.append(f"Error: {result.error.type}{where}: {result.error.message}")
    status = "succeeded" if result.success else "failed"
    parts.append(
        f"[{status} in {result.execution_time} ms, {result.tool_calls} tool calls"
        + (", cached" if result.cached else "")
        + "]"
    )
    return "\n".join(parts)


def _images(value: Any) -> list[ImageContent]:
    """Images a script returned (as a tool's image value, alone or in a list) become image content."""
    items = value if isinstance(value, list) else [value]
    return [
        ImageContent(type="image", data=item["data"], mime_type=item["mimeType"])
        for item in items
        if isinstance(item, dict)
        and item.get("type") == "image"
        and isinstance(item.get("data"), str)
        and isinstance(item.get("mimeType"), str)
    ]


def to_call_result(result: RunResult) -> CallToolResult:
    content: list[types.ContentBlock] = [TextContent(type="text", text=result_text(result))]
    content.extend(_images(result.return_value))
    return CallToolResult(
        content=content,
        structured_content=result.model_dump(mode="json", by_alias=True),
        is_error=not result.success,
    )


def refused(error: CodeModeError, language: str) -> CallToolResult:
    detail = ErrorDetail(type=type(error).__name__, message=str(error))
    result = RunResult(success=False, error=detail, language=language)
    return to_call_result(result)


class CodeModeServer(MCPServer[Any]):
    """MCPServer whose ``execute_code`` description names the servers connected right now."""

    def __init__(self, engine: CodeMode, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.engine = engine

    async def list_tools(self) -> list[types.Tool]:
        tools = await super().list_tools()
        description = EXECUTE_CODE_HEAD + "\n\n" + describe_servers(self.engine)
        return [t.model_copy(update={"description": description}) if t.name == "execute_code" else t for t in tools]


def build_server(engine: CodeMode) -> CodeModeServer:
    """The MCP server around an engine; the engine is started and stopped with the server's lifespan."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncGenerator[dict[str, Any]]:
        async with engine:
            yield {}

    server = CodeModeServer(
        engine,
        name="mcp-code-mode",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level=engine.config.settings.log_level,
    )

    @server.tool(name="execute_code", description=EXECUTE_CODE_HEAD)
    async def execute_code(
        language: Annotated[str, Field(description="Language of the code: python.")],
        code: Annotated[str, Field(description="The script to run.")],
        packages: Annotated[
            list[str] | None,
            Field(description="Packages to install first (runner pyodide only: allowed pure-Python packages)."),
        ] = None,
        timeout: Annotated[int, Field(description="Timeout in milliseconds (max 300000).")] = 30000,
        allowNetworking: Annotated[bool, Field(description="Allow network access from the script.")] = True,
        description: Annotated[str | None, Field(description="What the script does, in a few words.")] = None,
        runner: Annotated[
            str | None, Field(description="Runner: local (default) or pyodide (CPython in WebAssembly under Deno).")
        ] = None,
    ) -> Annotated[CallToolResult, RunResult]:
        try:
            result = await engine.execute(
                code,
                language,
                packages=packages,
                timeout_ms=timeout,
                allow_networking=allowNetworking,
                description=description,
                runner=runner,
            )
        except CodeModeError as exc:
            return refused(exc, language)
        return to_call_result(result)

    @server.tool(name="get_tool_stubs")
    def get_tool_stubs(
        server: Annotated[str | None, Field(description="Only this server's tools (all servers when empty).")] = None,
        language: Annotated[str, Field(description="Stub language: python.")] = "python",
    ) -> str:
        """Return the stubs of the downstream tools exactly as they are defined in the sandbox."""
        return engine.stubs(language.lower(), [server] if server else None)

    return server
