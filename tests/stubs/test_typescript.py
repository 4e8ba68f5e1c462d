"""TypeScript declarations from JSON Schema: snapshots over the npm servers' schemas, validity, the type mapping."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.config import Settings
from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.packages import Whitelist
from mcp_code_mode.runners._typecheck import check_typescript
from mcp_code_mode.runners.deno import deno_binary
from mcp_code_mode.sandbox import detect_sandbox
from mcp_code_mode.stubs import RENDERERS
from mcp_code_mode.stubs.index import StubIndex
from mcp_code_mode.stubs.typescript import render_module, render_tool

from .test_python import NPM_SERVERS, SNAPSHOTS, index_of, recorded

UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"


def tool(
    name: str,
    schema: dict[str, Any],
    output: dict[str, Any] | None = None,
    description: str = "",
    server: str = "srv",
) -> ToolInfo:
    return ToolInfo(server=server, name=name, description=description, input_schema=schema, output_schema=output)


def test_the_typescript_renderer_is_registered() -> None:
    assert RENDERERS["typescript"] is render_module


@pytest.mark.parametrize("server", NPM_SERVERS)
def test_typescript_declarations_of_the_npm_servers_match_their_snapshots(server: str) -> None:
    source = render_module(index_of(server, recorded(server)))
    path = SNAPSHOTS / f"{server}.d.ts.txt"
    if UPDATE:
        path.write_text(source, encoding="utf-8")
    assert source == path.read_text(encoding="utf-8")


@pytest.mark.anyio
async def test_declarations_of_every_npm_server_type_check_and_type_a_script(tmp_path: Path) -> None:
    servers = [(name, f"The {name} server") for name in NPM_SERVERS]
    index = StubIndex.build(servers, [t for name in NPM_SERVERS for t in recorded(name)])
    declarations = render_module(index)
    script = (
        "const text: string = (await filesystem.read_text_file({ path: 'a.txt', head: 3 })).content;\n"
        "const graph = await memory.read_graph();\n"
        "const names: string[] = graph.entities.map((e) => e.name);\n"
        "const echoed = await everything.echo({ message: text + names.join() });\n"
        "try { await callTool('memory', 'read_graph'); }\n"
        "catch (e) { if (e instanceof ToolError) console.log(e.server); }\n"
        "await memory.create_entities({ entities: [{ name: 'x' }] });\n"
        "export default echoed;\n"
    )
    # One deno check (they are slow): the declarations themselves must check, and only line 7 is wrong.
    findings = await check_typescript(
        script,
        declarations,
        deno=deno_binary(),
        deno_dir=tmp_path / "deno",
        whitelist=Whitelist.load(),
        sandbox=detect_sandbox(Settings()),
    )
    assert [(f.line, f.message.split(":")[0]) for f in findings] == [(7, "TS2739")]
    assert "entityType" in findings[0].message


def test_required_and_optional_members_enums_arrays_and_defaults() -> None:
    spec = index_of(
        "srv",
        [
            tool(
                "search",
                {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What to look for"},
                        "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
                        "limit": {"type": "integer"},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "ratio": {"type": ["number", "null"]},
                        "mixed": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}]}},
                        "user-id": {"const": 7},
                    },
                    "required": ["query"],
                },
                description="Search things.",
            )
        ],
    ).tools()[0]
    rendered = render_tool(spec)
    assert rendered.signature == "args: SearchArgs"
    assert rendered.return_type == "Promise<any>"
    assert rendered.summary == "srv.search(args: SearchArgs): Promise<any>"
    assert rendered.types == (
        "interface SearchArgs {\n"
        "  /** What to look for */\n"
        "  query: string;\n"
        '  /** @default "fast" */\n'
        '  mode?: "fast" | "exact";\n'
        "  limit?: number;\n"
        "  tags?: string[];\n"
        "  ratio?: number | null;\n"
        "  mixed?: (string | number)[];\n"
        '  "user-id"?: 7;\n'
        "}",
    )
    assert rendered.member == "  /** Search things. */\n  search(args: SearchArgs): Promise<any>;"


def test_tools_without_required_arguments_take_optional_args() -> None:
    index = index_of(
        "srv",
        [
            tool("ping", {"type": "object", "properties": {}}),
            tool("list", {"type": "object", "properties": {"page": {"type": "integer"}}}),
        ],
    )
    ping, listing = (render_tool(t) for t in index.tools())
    assert ping.signature == "args?: Record<string, never>" and ping.types == ()
    assert listing.signature == "args?: ListArgs"


def test_nested_objects_become_interfaces_refs_are_followed_and_results_are_typed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
            "meta": {
                "type": "object",
                "properties": {"label": {"type": "string"}, "from": {"type": "integer"}},
                "required": ["label"],
            },
            "extra": {"type": "object", "additionalProperties": {"type": "number"}},
            "both": {"allOf": [{"$ref": "#/$defs/Point"}, {"type": "object", "properties": {"z": {"type": "number"}}}]},
        },
        "required": ["points"],
        "$defs": {
            "Point": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
            }
        },
    }
    output = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
    rendered = render_tool(index_of("srv", [tool("plot", schema, output)]).tools()[0])
    assert rendered.return_type == "Promise<PlotResult>"
    types = "\n".join(rendered.types)
    assert "interface Point {\n  x: number;\n  y: number;\n}" in types
    assert "interface PlotMeta {\n  label: string;\n  from?: number;\n}" in types
    assert "interface PlotArgs {\n  points: Point[];\n  meta?: PlotMeta;\n  extra?: Record<string, number>;\n" in types
    assert "  both?: Point & PlotBoth;\n}" in types
    assert "interface PlotResult {\n  count: number;\n}" in types


def test_type_names_never_collide_across_servers_or_with_the_header() -> None:
    same = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    index = StubIndex.build(
        [("a", None), ("b", None)],
        [
            tool("read", same, server="a"),
            tool("read", same, server="b"),
            tool(
                "fail",
                {
                    "type": "object",
                    "properties": {"error": {"$ref": "#/$defs/ToolError"}},
                    "$defs": {"ToolError": {"type": "object", "properties": {"code": {"type": "string"}}}},
                },
                server="b",
            ),
        ],
    )
    source = render_module(index)
    assert "interface ReadArgs {" in source and "interface ReadArgs2 {" in source
    assert "  read(args: ReadArgs): Promise<any>;" in source and "  read(args: ReadArgs2): Promise<any>;" in source
    assert source.count("declare class ToolError") == 1
    assert "interface ToolError2 {\n  code?: string;\n}" in source and "  error?: ToolError2;" in source


def test_descriptions_become_jsdoc_that_cannot_end_early() -> None:
    info = tool(
        "t",
        {"type": "object", "properties": {"p": {"type": "string", "description": "ends */ here"}}},
        description="Says */ hi\n\nand " + "long words " * 20,
    )
    rendered = render_tool(index_of("srv", [info]).tools()[0])
    assert "ends *\\/ here" in rendered.types[0]
    assert rendered.member.startswith("  /**\n   * Says *\\/ hi\n   *\n   * and long words")
    assert all(len(line) <= 110 for line in rendered.member.splitlines())


def test_a_selection_renders_only_the_named_servers() -> None:
    index = StubIndex.build(
        [("fs", "Files"), ("mem", None)],
        [
            tool("read", {"type": "object"}, description="Read.", server="fs"),
            tool("get", {"type": "object"}, description="Get.", server="mem"),
        ],
    )
    fs = index.server("fs")
    assert fs is not None
    source = render_module(index, {"fs": fs.tools})
    declared = "declare const fs: ServerExtras & {\n  /** Read. */\n  read(args?: Record<string, never>)"
    assert "/** Files (1 tools) */\n" + declared in source
    assert "declare const mem" not in source


def test_servers_named_like_javascript_globals_get_a_namespace_that_does_not_shadow_them() -> None:
    index = StubIndex.build([("fetch", None), ("crypto", None), ("notes", None)], [])
    assert [s.namespace for s in index.servers] == ["fetch_", "crypto_", "notes"]
