"""A server that is down: its namespace in the Python stubs raises ToolError saying why, on every tool."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.stubs.index import StubIndex
from mcp_code_mode.stubs.python import render_module

GHOST_REASON = "cannot start '/nope/ghost': command not found"


class ToolError(Exception):
    """Stands for the sandbox's ToolError, as the worker defines it."""

    def __init__(self, message: str, server: str | None = None, tool: str | None = None) -> None:
        super().__init__(message)
        self.server, self.tool = server, tool


def _index(unavailable: dict[str, str]) -> StubIndex:
    echo = ToolInfo(server="live", name="echo", description="", input_schema={"type": "object"}, output_schema=None)
    return StubIndex.build([("live", None), ("ghost-server", None)], [echo], unavailable=unavailable)


def _compile(source: str, **extra: Any) -> dict[str, Any]:
    call = eval("lambda *args: 'ok'", {})  # a _call whose module has no ToolError
    namespace: dict[str, Any] = {"__name__": "mcp_code_mode_stubs", "_call": call, **extra}
    exec(compile(source, "<tool stubs>", "exec"), namespace)
    return namespace


def test_the_index_maps_a_down_servers_namespace_to_its_reason() -> None:
    index = _index({"ghost-server": GHOST_REASON})
    assert index.unavailable == {"ghost_server": GHOST_REASON}
    spec = index.server("ghost-server")
    assert spec is not None and index.unavailable_reason(spec) == GHOST_REASON


def test_an_index_without_down_servers_renders_no_helper() -> None:
    source = render_module(_index({}))
    assert "_Unavailable" not in source
    assert "class ghost_server:" in source


def test_any_tool_of_a_down_server_raises_the_sandboxs_tool_error_with_the_reason() -> None:
    stubs = _compile(render_module(_index({"ghost-server": GHOST_REASON})), ToolError=ToolError)
    with pytest.raises(ToolError) as caught:
        stubs["ghost_server"].anything()
    assert str(caught.value) == f"server 'ghost-server' is not available: {GHOST_REASON}"
    assert (caught.value.server, caught.value.tool) == ("ghost-server", "anything")
    assert stubs["live"].echo() == "ok"  # the servers that are up are untouched


def test_without_a_tool_error_in_scope_a_down_server_raises_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("cm_runtime", "cm_protocol"):  # another test may have imported the sandbox's modules
        monkeypatch.delitem(sys.modules, module, raising=False)
    stubs = _compile(render_module(_index({"ghost-server": "down"})))
    with pytest.raises(RuntimeError, match="server 'ghost-server' is not available: down"):
        getattr(stubs["ghost_server"], "list_things")  # noqa: B009 (reading the attribute is what raises)
    assert not hasattr(stubs["ghost_server"], "__wrapped__")  # private names stay AttributeError (hasattr works)


def test_a_hostile_reason_is_a_string_in_the_stubs_not_code() -> None:
    reason = 'x"""\nimport os; os.system("boom")\n\'\'\' \\ \x00 \u2028' + "y" * 2000
    source = render_module(_index({"ghost-server": reason}))
    stubs = _compile(source, ToolError=ToolError)
    with pytest.raises(ToolError) as caught:
        stubs["ghost_server"].anything()
    message = str(caught.value)
    assert message.startswith("server 'ghost-server' is not available: " + reason[:100])
    assert len(message) < 600  # the reason is cut


def test_a_selection_of_a_down_server_renders_its_namespace() -> None:
    index = _index({"ghost-server": GHOST_REASON})
    source = render_module(index, {"ghost-server": ()})
    assert "class ghost_server(metaclass=_Unavailable):" in source
    assert "class live" not in source
