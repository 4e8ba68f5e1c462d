"""The MCP layer: which clients get printed output as log messages, and from when in a run."""

from __future__ import annotations

import warnings

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import LoggingMessageNotificationParams

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from .conftest import executing, fixture_entry, make_config

pytestmark = pytest.mark.anyio


async def test_a_client_that_sets_a_level_above_info_gets_no_output_logs_until_it_lowers_it() -> None:
    logs: list[LoggingMessageNotificationParams] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(params)

    engine = CodeMode(make_config({"fixture": fixture_entry()}, pool_size=1, stream_output_after_ms=0))
    async with Client(build_server(engine), mode="legacy", logging_callback=on_log) as client:
        assert client.server_capabilities.logging is not None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # logging is deprecated from 2026-07-28 on
            await client.set_logging_level("warning")  # pyright: ignore[reportDeprecated]
        quiet = await client.call_tool("execute_code", {"language": "python", "code": "print('hidden')"})
        assert quiet.structured_content is not None and quiet.structured_content["output"] == "hidden\n"
        assert logs == []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level("info")  # pyright: ignore[reportDeprecated]
        await client.call_tool("execute_code", {"language": "python", "code": "print('shown')"})
        assert [p.data for p in logs] == ["shown\n"]


async def test_on_the_2026_protocol_output_logs_go_only_to_requests_that_opt_in() -> None:
    logs: list[object] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    engine = CodeMode(make_config({"fixture": fixture_entry()}, pool_size=1, stream_output_after_ms=0))
    server = build_server(engine)
    async with Client(server, logging_callback=on_log) as client:  # mode "auto": the newest protocol
        await client.call_tool("execute_code", {"language": "python", "code": "print('not asked for')"})
    assert logs == []
    engine = CodeMode(make_config({"fixture": fixture_entry()}, pool_size=1, stream_output_after_ms=0))
    async with Client(build_server(engine), logging_callback=on_log, log_level="info") as client:
        await client.call_tool("execute_code", {"language": "python", "code": "print('asked for')"})
    assert logs == ["asked for\n"]


async def test_a_run_that_ends_before_the_hold_sends_no_log_messages_and_its_result_has_all_the_output() -> None:
    logs: list[object] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    engine = CodeMode(make_config({}, pool_size=1, stream_output_after_ms=5000))
    async with Client(build_server(engine), mode="legacy", logging_callback=on_log) as client:
        result = await client.call_tool(
            "execute_code", {"language": "python", "code": "for i in range(3):\n    print(i)", "cache": "off"}
        )
    assert result.structured_content is not None and result.structured_content["output"] == "0\n1\n2\n"
    assert logs == []


async def test_output_printed_before_the_hold_goes_out_in_one_message_while_the_run_goes_on() -> None:
    logs: list[object] = []
    early = anyio.Event()

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(params.data)
        early.set()

    # The worker sends "a" and "b" in two chunks (its flusher runs every 50 ms); the server holds
    # them until the run has lasted 600 ms, then sends them together; "c" streams as it is printed.
    code = "import time\nprint('a')\ntime.sleep(0.15)\nprint('b')\ntime.sleep(2)\nprint('c')\ntime.sleep(0.3)"
    engine = CodeMode(make_config({}, pool_size=1, stream_output_after_ms=600))
    async with Client(build_server(engine), mode="legacy", logging_callback=on_log) as client:
        async with executing(client, code) as done:
            await early.wait()
            assert not done, "the held output arrived only with the result"
            assert logs == ["a\nb\n"]
    assert done[0]["output"] == "a\nb\nc\n"
    assert logs == ["a\nb\n", "c\n"]
