"""``execute_code`` as an MCP task (protocol 2025-11-25): start, poll, result, cancel, and whose a task is.

A real ``mcp-code-mode serve --http`` process and real MCP clients (two sessions). The SDK's client has no
tasks API, so the task requests go through its dispatcher as raw JSON-RPC; everything else is the client's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from ..conftest import ServerProcess, fixture_entry, http_client, http_server, write_config
from .test_streaming_and_cancel import run_children

pytestmark = pytest.mark.anyio

TOKEN = "tasks-token"
WAIT = 60


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("tasks")
    config = write_config(folder / "servers.json", {"fixture": fixture_entry()})
    with http_server(config, folder / "server.log", auth_token=TOKEN, pool_size="1") as server:
        yield server


@pytest.fixture
async def client(served: ServerProcess) -> AsyncGenerator[Client]:
    async with http_client(served.url, TOKEN) as connected:
        yield connected


async def request(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    with anyio.fail_after(WAIT):
        return await client.session._dispatcher.send_raw_request(method, params, {})  # pyright: ignore[reportPrivateUsage]


async def start(client: Client, code: str, **task: Any) -> str:
    arguments = {"language": "python", "code": code, "cache": "off"}
    created = await request(client, "tools/call", {"name": "execute_code", "arguments": arguments, "task": task})
    assert created["task"]["status"] == "working", created
    return created["task"]["taskId"]


async def test_the_server_declares_tasks_and_execute_code_may_run_as_one(client: Client) -> None:
    assert client.server_capabilities.tasks is not None
    assert client.server_capabilities.tasks.requests is not None
    tools = {t.name: t for t in (await client.list_tools()).tools}
    execution = tools["execute_code"].execution
    assert execution is not None and execution.task_support == "optional"


async def test_a_task_answers_at_once_runs_on_and_gives_the_calls_result(client: Client) -> None:
    task_id = await start(client, "import time\ntime.sleep(1)\nprint('done')\nfixture.add(a=40, b=2)\n", ttl=60_000)
    status = await request(client, "tasks/get", {"taskId": task_id})
    assert status["status"] == "working" and status["ttl"] == 60_000
    assert task_id in [t["taskId"] for t in (await request(client, "tasks/list", {}))["tasks"]]
    with anyio.fail_after(WAIT):
        while status["status"] == "working":
            await anyio.sleep(status.get("pollInterval", 1000) / 1000 / 4)
            status = await request(client, "tasks/get", {"taskId": task_id})
    assert status["status"] == "completed", status
    result = await request(client, "tasks/result", {"taskId": task_id})
    assert result["structuredContent"]["success"] and result["structuredContent"]["output"] == "done\n"
    assert result["structuredContent"]["returnValue"] == {"result": 42}
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}


async def test_a_cancelled_task_kills_its_worker(client: Client, served: ServerProcess) -> None:
    task_id = await start(client, "import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    with anyio.fail_after(WAIT):
        while not run_children(served.process.pid):
            await anyio.sleep(0.05)  # the run's process appears once its worker has the run
    running = run_children(served.process.pid)
    cancelled = await request(client, "tasks/cancel", {"taskId": task_id})
    assert cancelled["status"] == "cancelled"
    with anyio.fail_after(10):
        while running & run_children(served.process.pid):
            await anyio.sleep(0.05)
    assert (await request(client, "tasks/get", {"taskId": task_id}))["status"] == "cancelled"
    with pytest.raises(MCPError, match="cancelled"):
        await request(client, "tasks/result", {"taskId": task_id})


async def test_another_client_cannot_see_get_or_cancel_a_task(client: Client, served: ServerProcess) -> None:
    task_id = await start(client, "21 * 2\n")
    async with http_client(served.url, TOKEN) as other:
        assert task_id not in [t["taskId"] for t in (await request(other, "tasks/list", {}))["tasks"]]
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(MCPError, match="no task"):
                await request(other, method, {"taskId": task_id})
    result = await request(client, "tasks/result", {"taskId": task_id})
    assert result["structuredContent"]["returnValue"] == 42


async def test_a_call_without_a_task_is_answered_as_before(client: Client) -> None:
    with anyio.fail_after(WAIT):
        result = await client.call_tool("execute_code", {"language": "python", "code": "1 + 1", "cache": "off"})
    assert result.structured_content is not None and result.structured_content["returnValue"] == 2


def _answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST (a JSON body, or the last ``data:`` line of an event stream)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


async def test_a_client_that_drops_its_connection_gets_the_result_in_the_same_session(served: ServerProcess) -> None:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "comes-back", "version": "1"},
    }
    code = "import time\ntime.sleep(0.5)\n6 * 7\n"
    call = {"name": "execute_code", "arguments": {"language": "python", "code": code, "cache": "off"}, "task": {}}
    with anyio.fail_after(WAIT):
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            first = await http.post(
                served.url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
            )
            session = first.headers["mcp-session-id"]
            headers["Mcp-Session-Id"] = session
            headers["Mcp-Protocol-Version"] = "2025-11-25"
            await http.post(served.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            created = await http.post(
                served.url, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
            )
            task_id = _answer(created)["result"]["task"]["taskId"]
        # That connection is gone; a new one in the same session asks for the result.
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            fetched = await http.post(
                served.url, json={"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id}}
            )
    result = _answer(fetched)["result"]
    assert result["structuredContent"]["returnValue"] == 42, result
