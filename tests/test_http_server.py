"""Streamable HTTP: a real server process, real HTTP requests (auth, Host/Origin checks, sessions, stateless mode).

Every Host/Origin technique has its own test in ``test_http_server_peers.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent
from starlette.applications import Starlette

from mcp_code_mode.cli import main
from mcp_code_mode.config import CodeModeConfig, Settings
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import ConfigError
from mcp_code_mode.http_server import HttpOptions, build_http_app, check_bind, describe, is_loopback

from .conftest import (
    ServerProcess,
    alive,
    child_pids,
    fixture_entry,
    http_client,
    http_server,
    make_config,
    server_env,
    write_config,
)

pytestmark = pytest.mark.anyio

TOKEN = "correct-horse-battery-staple"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_config(tmp_path_factory.mktemp("http") / "servers.json", {"fixture": fixture_entry()})


@pytest.fixture(scope="module")
def server(config: Path) -> Iterator[ServerProcess]:
    with http_server(config, config.with_name("server.log"), auth_token=TOKEN) as running:
        yield running


def post(url: str, body: dict[str, Any], **headers: str) -> httpx2.Response:
    return httpx2.post(url, json=body, headers=MCP_HEADERS | headers, timeout=30)


def sse_json(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a one-event SSE response (or a JSON response)."""
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return json.loads(data[-1])


def test_requests_without_a_token_or_with_a_wrong_one_get_401(server: ServerProcess) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ):
        response = post(server.url, INIT, **headers)
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "mcp-session-id" not in response.headers
    assert httpx2.get(server.url, headers={"Accept": "text/event-stream"}, timeout=30).status_code == 401
    assert httpx2.delete(server.url, timeout=30).status_code == 401


def test_the_right_token_initializes_a_session(server: ServerProcess) -> None:
    response = post(server.url, INIT, Authorization=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response.headers["mcp-session-id"]
    result = sse_json(response)["result"]
    assert result["serverInfo"]["name"] == "mcp-code-mode"
    assert "logging" in result["capabilities"] and "tools" in result["capabilities"]


def test_a_foreign_origin_gets_403_and_a_foreign_host_421_even_with_the_token(server: ServerProcess) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert post(server.url, INIT, Origin="http://evil.example", **auth).status_code == 403
    assert post(server.url, INIT, Origin="http://127.0.0.1.evil.example:8000", **auth).status_code == 403
    assert post(server.url, INIT, Host="evil.example", **auth).status_code == 421
    assert post(server.url, INIT, Host="evil.example:80", Origin="http://evil.example", **auth).status_code == 421
    port = server.url.split(":")[2].split("/")[0]
    assert post(server.url, INIT, Origin=f"http://localhost:{port}", **auth).status_code == 200


def test_a_foreign_origin_without_a_token_is_refused_before_auth_and_learns_nothing(server: ServerProcess) -> None:
    response = post(server.url, INIT, Origin="http://evil.example")
    assert response.status_code == 403
    assert "serverInfo" not in response.text and "www-authenticate" not in response.headers


def test_health_answers_without_a_token_and_reveals_nothing(server: ServerProcess) -> None:
    response = httpx2.get(server.url.replace("/mcp", "/healthz"), timeout=30)
    assert response.status_code == 200 and response.text == "ok"


async def test_a_real_client_with_the_token_runs_code(server: ServerProcess) -> None:
    async with http_client(server.url, TOKEN) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"execute_code", "get_tool_stubs"} <= tools
        result = await client.call_tool("execute_code", {"language": "python", "code": "fixture.add(a=2, b=40)"})
        assert result.structured_content is not None
        assert result.structured_content["returnValue"] == {"result": 42}


async def test_a_client_with_a_wrong_token_cannot_connect(server: ServerProcess) -> None:
    before = server.log_text().count('"POST /mcp HTTP/1.1" 401')
    with pytest.raises(ExceptionGroup) as caught:
        async with http_client(server.url, "wrong"):
            pytest.fail("connected with a wrong token")
    assert caught.group_contains(MCPError)
    assert server.log_text().count('"POST /mcp HTTP/1.1" 401') == before + 1


async def test_stateless_mode_answers_each_request_without_a_session(config: Path) -> None:
    # output streams from the first line (no hold), so this short run sends its log message too
    engine = CodeMode(CodeModeConfig.load(config, env=server_env(stream_output_after_ms="0")))
    app = build_http_app(engine, HttpOptions(stateless=True))
    transport = httpx2.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx2.AsyncClient(transport=transport) as http:
        url = "http://127.0.0.1:8000/mcp"
        first = await http.post(url, json=INIT, headers=MCP_HEADERS)
        assert first.status_code == 200 and "mcp-session-id" not in first.headers
        # Any replica can answer any request: no initialize, no session id, and the call still runs.
        arguments = {"language": "python", "code": "print(6 * 7)"}
        params = {"name": "execute_code", "arguments": arguments, "_meta": {"progressToken": "p1"}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        response = await http.post(url, json=call, headers=MCP_HEADERS | {"mcp-protocol-version": "2025-11-25"})
        assert response.status_code == 200, response.text
        result = sse_json(response)["result"]
        assert result["structuredContent"]["output"] == "42\n"
        content = [TextContent.model_validate(c) for c in result["content"]]
        assert "42" in content[0].text
        # Log messages and progress ride the request's own stream, before the result.
        events = [
            json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()
        ]
        methods = [event.get("method") for event in events]
        assert "notifications/message" in methods and "notifications/progress" in methods
        assert methods.index("notifications/message") < len(methods) - 1
        log = next(e for e in events if e.get("method") == "notifications/message")
        assert log["params"]["data"] == "42\n"
        progress = next(e for e in events if e.get("method") == "notifications/progress")
        assert progress["params"]["progressToken"] == "p1"


async def test_a_replicas_session_ids_carry_its_name_and_another_replicas_id_gets_404(config: Path) -> None:
    engine = CodeMode(CodeModeConfig.load(config, env=server_env(replica_id="r7")))
    app = build_http_app(engine, HttpOptions())
    transport = httpx2.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx2.AsyncClient(transport=transport) as http:
        url = "http://127.0.0.1:8000/mcp"
        first = await http.post(url, json=INIT, headers=MCP_HEADERS)
        session = first.headers["mcp-session-id"]
        assert first.status_code == 200 and session.startswith("r7.") and len(session) > 10
        headers = MCP_HEADERS | {"mcp-protocol-version": "2025-11-25"}
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        same = await http.post(url, json=listing, headers=headers | {"mcp-session-id": session})
        assert same.status_code == 200 and "execute_code" in same.text
        for other, whose in ((f"r8.{session[3:]}", "replica 'r8'"), (session[3:], "no replica")):
            moved = await http.post(url, json=listing, headers=headers | {"mcp-session-id": other})
            assert moved.status_code == 404, moved.text
            message = moved.json()["error"]["message"]
            assert f"belongs to {whose}" in message and "this is replica 'r7'" in message and "new session" in message


def test_a_non_loopback_bind_without_a_token_is_refused_at_start_up(
    config: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODE_MODE_AUTH_TOKEN", raising=False)
    assert main(["serve", "--http", "--host", "0.0.0.0", "--port", "1", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "refusing to serve HTTP on 0.0.0.0 without a token" in err and "CODE_MODE_AUTH_TOKEN" in err
    assert "Traceback" not in err


def test_http_options_without_http_are_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", "9000"])
    assert exited.value.code == 2
    assert "--port only apply with --http" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.5.5.5", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.internal", False),
    ],
)
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    options = HttpOptions(host=host)
    if loopback:
        check_bind(options, Settings())
    else:
        with pytest.raises(ConfigError):
            check_bind(options, Settings())
    check_bind(options, Settings.model_validate({"auth_token": TOKEN}))


def test_the_start_up_line_reports_the_session_limits_or_stateless() -> None:
    settings = Settings(http_max_sessions=3, http_session_idle_s=90)
    line = describe(HttpOptions(), settings)
    assert "http://127.0.0.1:8000/mcp" in line and "at most 3 sessions, each closed after 90 s idle" in line
    stateless = describe(HttpOptions(stateless=True), settings)
    assert "stateless" in stateless and "sessions" not in stateless


# ----- sessions: the SDK's session manager, with the cap and idle timeout from the settings ---------


def session_app(**settings: Any) -> Starlette:
    engine = CodeMode(make_config({}, pool_size=0, cpython_pool_size=0, warmup_timeout=0, **settings))
    return build_http_app(engine, HttpOptions())


@asynccontextmanager
async def serving(app: Starlette) -> AsyncGenerator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
    ):
        yield http


async def open_session(http: httpx2.AsyncClient) -> httpx2.Response:
    return await http.post("/mcp", json=INIT, headers=MCP_HEADERS)


async def list_tools(http: httpx2.AsyncClient, session_id: str) -> httpx2.Response:
    headers = MCP_HEADERS | {"mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
    await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return await http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)


async def test_the_session_cap_refuses_one_more_with_503_while_the_open_sessions_keep_working() -> None:
    with anyio.fail_after(60):
        async with serving(session_app(http_max_sessions=2, http_session_idle_s=600)) as http:
            ids: list[str] = []
            for _ in range(2):
                opened = await open_session(http)
                assert opened.status_code == 200, opened.text
                ids.append(opened.headers["mcp-session-id"])
            refused = await open_session(http)
            assert refused.status_code == 503 and "Too many open sessions" in refused.text
            assert "mcp-session-id" not in refused.headers
            for session_id in ids:
                listed = await list_tools(http, session_id)
                assert listed.status_code == 200 and "execute_code" in listed.text
            # a client that ends its session (DELETE) makes room for a new one
            ended = await http.delete("/mcp", headers={"mcp-session-id": ids[0], "mcp-protocol-version": "2025-11-25"})
            assert ended.status_code == 200
            assert (await open_session(http)).status_code == 200


async def test_an_idle_session_is_closed_its_place_freed_and_its_id_then_gets_404() -> None:
    with anyio.fail_after(60):
        async with serving(session_app(http_max_sessions=1, http_session_idle_s=0.3)) as http:
            first = await open_session(http)
            assert first.status_code == 200
            session_id = first.headers["mcp-session-id"]
            # The cap refuses a second session while the first is open; once it is reaped, one opens.
            # (Asking the first session itself would keep it alive.)
            deadline = anyio.current_time() + 30
            while (second := await open_session(http)).status_code == 503:
                assert anyio.current_time() < deadline, "the idle session was not reaped"
                await anyio.sleep(0.05)  # polling for the idle reap: there is no event to wait on
            assert second.status_code == 200
            gone = await list_tools(http, session_id)
            assert gone.status_code == 404 and "Session not found" in gone.text


async def test_the_token_reaches_neither_scripts_nor_downstream_servers_nor_the_log(server: ServerProcess) -> None:
    async with http_client(server.url, TOKEN) as client:
        downstream = await client.call_tool(
            "execute_code", {"language": "python", "code": "fixture.show_env(name='CODE_MODE_AUTH_TOKEN')"}
        )
        script = await client.call_tool(
            "execute_code", {"language": "python", "code": "import os\nos.environ.get('CODE_MODE_AUTH_TOKEN')"}
        )
    assert downstream.structured_content is not None and script.structured_content is not None
    assert downstream.structured_content["returnValue"] == {"result": "<unset>"}, "a downstream server got the token"
    assert script.structured_content["success"] is False  # the local runner refuses `import os`
    for result in (downstream, script):
        assert TOKEN not in json.dumps(result.structured_content)
    assert TOKEN not in server.log_text()


def test_a_stateless_server_process_serves_and_stops_on_sigterm_leaving_no_child_behind(config: Path) -> None:
    with http_server(config, config.with_name("stateless.log"), "--stateless") as running:
        response = post(running.url, INIT)
        assert response.status_code == 200 and "mcp-session-id" not in response.headers
        children = child_pids(running.process.pid)
        assert children, "the server should have started its downstream server and warm workers"
        running.stop()  # SIGTERM, as a process manager would
        # uvicorn shuts down cleanly, then re-raises the signal it caught: -15 is the clean exit here.
        assert running.process.returncode in (0, -15), running.log_text()
        assert "Application shutdown complete." in running.log_text()
    survivors = still_alive(children, within=CHILDREN_EXIT_S)
    assert not survivors, f"left behind {CHILDREN_EXIT_S:g} s after the server exited: {survivors}"


CHILDREN_EXIT_S = 10.0
"""How long a child may take to go after the server exited: the sandboxed ones die of their parent-death
signal once the kernel delivers it, which can lag on a loaded machine; one still alive after this is a leak."""


def still_alive(pids: set[int], *, within: float) -> list[int]:
    """The processes of ``pids`` still alive after waiting up to ``within`` seconds for each to go."""
    deadline = time.monotonic() + within
    survivors = [pid for pid in pids if alive(pid)]
    while survivors and time.monotonic() < deadline:
        time.sleep(0.05)  # polling: a process that is not our child gives no event to wait on
        survivors = [pid for pid in survivors if alive(pid)]
    return sorted(survivors)


SPAN = "import time\nstart = time.time()\ntime.sleep({seconds})\n[start, time.time()]"


async def test_each_http_session_gets_its_own_share_of_the_run_slots(config: Path) -> None:
    """Two real clients over HTTP, each its own MCP session: a greedy one's runs queue behind its share
    (one slot), a polite one's run starts at once, and its third run finds no room (ServerBusy)."""
    settings = {
        "max_concurrent_runs": "2",
        "max_runs_per_client": "1",
        "max_queued_runs": "2",
        "cpython_pool_size": "2",
    }
    with http_server(config, config.with_name("fair.log"), auth_token=TOKEN, **settings) as running:
        spans: dict[str, list[list[float]]] = {"greedy": [], "polite": []}
        errors: list[str] = []

        async def run(client: Client, name: str, seconds: float) -> None:
            arguments = {
                "language": "python",
                "runner": "cpython",
                "cache": "off",
                "code": SPAN.format(seconds=seconds),
            }
            answer = (await client.call_tool("execute_code", arguments)).structured_content or {}
            if answer.get("success"):
                spans[name].append(answer["returnValue"])
            else:
                errors.append(str(answer.get("error")))

        async with http_client(running.url, TOKEN) as greedy, http_client(running.url, TOKEN) as polite:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for _ in range(3):
                        tg.start_soon(run, greedy, "greedy", 1.0)
                        await anyio.sleep(0.05)
                    await anyio.sleep(0.3)
                    tg.start_soon(run, polite, "polite", 0.1)
        greedy_spans = sorted(spans["greedy"])
        assert len(greedy_spans) == 2 and greedy_spans[1][0] >= greedy_spans[0][1] - 0.05  # one at a time
        assert len(spans["polite"]) == 1 and spans["polite"][0][0] < greedy_spans[1][0]  # it did not wait
        assert len(errors) == 1 and "ServerBusy" in errors[0], errors


def test_over_http_each_client_gets_half_the_slots_unless_configured() -> None:
    engine = CodeMode(make_config({}, pool_size=0, cpython_pool_size=0, max_concurrent_runs=6))
    assert engine.admission.per_client == 6  # one client (stdio): every slot
    build_http_app(engine, HttpOptions())
    assert engine.admission.per_client == 3 and engine.admission.queue_share == 12
    configured = CodeMode(make_config({}, pool_size=0, max_concurrent_runs=6, max_runs_per_client=5))
    build_http_app(configured, HttpOptions())
    assert configured.admission.per_client == 5


def test_waiting_for_children_to_go_still_reports_one_that_outlives_the_wait() -> None:
    import subprocess

    lingering = subprocess.Popen(["sleep", "30"])
    try:
        assert still_alive({lingering.pid}, within=0.2) == [lingering.pid]
    finally:
        lingering.kill()
        lingering.wait(timeout=10)
    assert still_alive({lingering.pid}, within=0.2) == []
