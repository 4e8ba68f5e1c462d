"""A server that could not start: a script that uses it learns that it is down and why (local runner)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mcp_code_mode.engine import CodeMode

from ..conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio

MISSING = "/nonexistent/mcp-code-mode-ghost-server"
REASON = f"cannot start '{MISSING}': command not found"


@pytest.fixture(scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:
    runs: Path = tmp_path_factory.mktemp("runs")
    config = make_config(
        {"ghost": {"command": MISSING}, "fixture": fixture_entry(), "old": {"command": "never", "disabled": True}},
        workspace_dir=runs,
        pool_size=1,
    )
    async with CodeMode(config) as cm:
        yield cm


async def test_a_tool_of_a_server_that_failed_to_start_raises_tool_error_naming_the_reason(engine: CodeMode) -> None:
    result = await engine.execute("ghost.anything()", "python", runner="local", cache="off")
    assert not result.success and result.error is not None
    assert result.error.type == "ToolError"
    assert result.error.message == f"server 'ghost' is not available: {REASON}"


async def test_except_tool_error_catches_a_down_server_and_the_others_still_serve(engine: CodeMode) -> None:
    code = (
        "try:\n"
        "    ghost.read_file(path='x')\n"
        "except ToolError as exc:\n"
        "    print('caught:', exc)\n"
        "try:\n"
        "    old.anything()\n"
        "except ToolError as exc:\n"
        "    print('caught:', exc)\n"
        "fixture.echo(text='still here')\n"
    )
    result = await engine.execute(code, "python", runner="local", cache="off")
    assert result.success, result.error
    assert result.output.splitlines() == [
        f"caught: server 'ghost' is not available: {REASON}",
        "caught: server 'old' is not available: it is disabled in the servers file",
    ]
    assert result.return_value == {"result": "still here"}


async def test_call_tool_to_a_down_server_says_it_is_not_available_and_why(engine: CodeMode) -> None:
    result = await engine.execute("call_tool('ghost', 'x', {})", "python", runner="local", cache="off")
    assert result.error is not None
    assert (result.error.type, result.error.message) == ("ToolError", f"server 'ghost' is not available: {REASON}")
