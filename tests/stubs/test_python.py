"""Python stubs from JSON Schema: snapshots over the real npm servers' schemas, and the type mapping."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.stubs.index import StubIndex
from mcp_code_mode.stubs.python import render_module, render_tool

from ..conftest import npm_server

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE / "schemas"
SNAPSHOTS = HERE / "snapshots"
NPM_SERVERS = ("filesystem", "memory", "everything")
UPDATE = os.environ.get("UPDATE_SNAPSHOTS") == "1"


def recorded(server: str) -> list[ToolInfo]:
    data = json.loads((SCHEMAS / f"{server}.json").read_text(encoding="utf-8"))
    return [ToolInfo(server=server, **tool) for tool in data]


def index_of(server: str, tools: list[ToolInfo]) -> StubIndex:
    return StubIndex.build([(server, None)], tools)


def run_stubs(source: str) -> tuple[dict[str, Any], list[tuple[str, str, dict[str, Any]]]]:
    calls: list[tuple[str, str, dict[str, Any]]] = []

    def _call(server: str, tool: str, required: dict[str, Any], optional: dict[str, Any]) -> str:
        calls.append((server, tool, {**required, **{k: v for k, v in optional.items() if v is not None}}))
        return "ok"

    namespace: dict[str, Any] = {"_call": _call}
    exec(compile(source, "<stubs>", "exec"), namespace)
    return namespace, calls


@pytest.mark.anyio
@pytest.mark.parametrize("server", NPM_SERVERS)
async def test_recorded_schemas_are_those_of_the_pinned_npm_servers(server: str, tmp_path: Path) -> None:
    args = [str(tmp_path)] if server == "filesystem" else []
    params = StdioServerParameters(
        command=npm_server(server), args=args, env={"MEMORY_FILE_PATH": str(tmp_path / "m.jsonl")}
    )
    async with Client(params, mode="legacy", cache=None) as client:
        tools = (await client.list_tools()).tools
    live = [
        {
            "name": t.name,
            "description": (t.description or "").strip(),
            "input_schema": t.input_schema,
            "output_schema": t.output_schema,
            "title": t.title,
        }
        for t in tools
    ]
    path = SCHEMAS / f"{server}.json"
    if UPDATE:
        SCHEMAS.mkdir(exist_ok=True)
        path.write_text(json.dumps(live, indent=2) + "\n", encoding="utf-8")
    assert json.loads(path.read_text(encoding="utf-8")) == live


@pytest.mark.parametrize("server", NPM_SERVERS)
def test_python_stubs_of_the_npm_servers_match_their_snapshots(server: str) -> None:
    source = render_module(index_of(server, recorded(server)))
    path = SNAPSHOTS / f"{server}.py.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(source, encoding="utf-8")
    assert source == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("server", NPM_SERVERS)
def test_every_npm_server_stub_compiles_and_sends_what_the_schema_names(server: str) -> None:
    tools = recorded(server)
    index = index_of(server, tools)
    namespace, calls = run_stubs(render_module(index))
    cls = namespace[server]
    for spec in index.tools():
        method = getattr(cls, spec.func)
        args = {p.ident: f"v-{p.name}" for p in spec.required}
        assert method(**args) == "ok"
        defaults = {p.name: p.default for p in spec.optional if p.has_scalar_default and p.default is not None}
        assert calls[-1] == (server, spec.name, {**{p.name: f"v-{p.name}" for p in spec.required}, **defaults})
        assert method.__doc__ and spec.info.description.split("\n")[0][:40] in method.__doc__


def tool(name: str, schema: dict[str, Any], output: dict[str, Any] | None = None, description: str = "") -> ToolInfo:
    return ToolInfo(server="srv", name=name, description=description, input_schema=schema, output_schema=output)


def test_required_and_optional_parameters_enums_arrays_and_defaults() -> None:
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
                    },
                    "required": ["query"],
                },
                description="Search things.",
            )
        ],
    ).tools()[0]
    rendered = render_tool(spec)
    assert rendered.signature == (
        "query: str, *, mode: Literal['fast', 'exact'] = 'fast', limit: int | None = None, "
        "tags: list[str] | None = None, ratio: float | None = None"
    )
    assert "query: What to look for" in rendered.method
    namespace, calls = run_stubs(render_module(index_of("srv", [spec.info])))
    namespace["srv"].search("q", limit=3)
    assert calls[-1] == ("srv", "search", {"query": "q", "mode": "fast", "limit": 3})


def test_nested_objects_become_typed_dicts_and_refs_are_followed() -> None:
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
    assert rendered.signature.startswith("points: list[Point], *, meta: PlotMeta | None = None")
    assert "extra: dict[str, float] | None = None" in rendered.signature
    assert rendered.return_type == "PlotResult"
    types = "\n".join(rendered.types)
    assert "class Point(TypedDict):\n    x: float\n    y: float" in types
    assert 'PlotMeta = TypedDict(\'PlotMeta\', {"label": str, "from": NotRequired[int]})' in types
    assert "class PlotResult(TypedDict):\n    count: int" in types


def test_names_are_made_identifiers_and_collisions_resolve_deterministically() -> None:
    infos = [
        tool("get-user", {"type": "object", "properties": {"class": {"type": "string"}}, "required": ["class"]}),
        tool("get_user", {"type": "object", "properties": {}}),
        tool("2fa.check", {"type": "object", "properties": {"user-id": {"type": "string"}}}),
    ]
    index = StubIndex.build([("my-server", None), ("print", None), ("my_server", None)], [])
    assert [s.namespace for s in index.servers] == ["my_server", "print_", "my_server_2"]

    first = {t.name: t.func for t in index_of("srv", infos).tools()}
    second = {t.name: t.func for t in index_of("srv", list(reversed(infos))).tools()}
    assert first == second == {"get-user": "get_user", "get_user": "get_user_2", "2fa.check": "_2fa_check"}

    namespace, calls = run_stubs(render_module(index_of("srv", infos)))
    namespace["srv"].get_user(class_="x")
    namespace["srv"]._2fa_check(user_id="u")
    assert calls == [("srv", "get-user", {"class": "x"}), ("srv", "2fa.check", {"user-id": "u"})]


def test_docstrings_survive_quotes_and_backslashes() -> None:
    info = tool("t", {"type": "object", "properties": {}}, description='Says """hi""" and C:\\path')
    namespace, _ = run_stubs(render_module(index_of("srv", [info])))
    assert namespace["srv"].t.__doc__.startswith('Says """hi""" and C:\\path')


class ToolError(Exception):
    """Stands for the sandbox's ToolError, as the worker defines it."""

    def __init__(self, message: str, server: str | None = None, tool: str | None = None) -> None:
        super().__init__(message)
        self.server, self.tool = server, tool


def test_a_name_that_is_no_tool_of_a_live_server_raises_tool_error_listing_its_tools() -> None:
    infos = [
        ToolInfo(server="my-server", name=name, description="", input_schema={"type": "object"}, output_schema=None)
        for name in ("get-user", "b")
    ]
    index = StubIndex.build([("my-server", None)], infos)
    selected = [t for t in index.tools() if t.name == "b"]
    source = render_module(index, {"my-server": selected})  # a selection: the error names every tool
    assert '@_namespace("my-server", "get-user", "b")\nclass my_server:' in source
    namespace, calls = run_stubs(source)
    namespace["ToolError"] = ToolError
    srv = namespace["my_server"]
    with pytest.raises(ToolError) as caught:
        srv.nope(x=1)
    assert str(caught.value) == "server 'my-server' has no tool 'nope' (its tools: get-user, b)"
    assert (caught.value.server, caught.value.tool) == ("my-server", "nope")
    assert srv.b() == "ok" and calls == [("my-server", "b", {})]
    assert not hasattr(srv, "_private") and not hasattr(srv, "__wrapped__")  # private names stay AttributeError
    assert srv.__name__ == "my_server" and srv.__doc__ and "2 tools" in srv.__doc__


def test_a_server_without_tools_says_none() -> None:
    namespace, _ = run_stubs(render_module(StubIndex.build([("empty", None)], [])))
    namespace["ToolError"] = ToolError
    with pytest.raises(ToolError, match=r"^server 'empty' has no tool 'x' \(its tools: none\)$"):
        namespace["empty"].x()
