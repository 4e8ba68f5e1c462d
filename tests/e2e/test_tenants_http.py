"""Tenants over real HTTP: one ``mcp-code-mode serve --http`` process (a minimal environment, a tokens file of
three tenants), and for every tool one tenant trying to reach another's data, refused as it should be.

acme and beta see every server; gamma sees only ``fixture`` and has a policy file of its own. Each test reads
the refusal itself, not only that nothing leaked.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from ..conftest import FIXTURE_SERVER, ServerProcess, http_client, http_server_in

pytestmark = pytest.mark.anyio

TOKENS = {"acme": "acme-token-0123456789abcdef", "beta": "beta-token-0123456789abcdef", "gamma": "gamma-token-01234567"}
MINIMAL_ENV = ("HOME", "PATH", "USER", "SHELL", "TERM")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("tenants")
    fixture = {"command": sys.executable, "args": [str(FIXTURE_SERVER)]}
    servers = {
        "fixture": {**fixture, "pii": "tokenize", "policy": {"tools": {"echo_json": "ask"}}},
        "extra": {**fixture, "description": "A second server, outside gamma's set."},
    }
    (base / "servers.json").write_text(json.dumps({"servers": servers}), encoding="utf-8")
    (base / "gamma-policy.json").write_text(
        json.dumps({"servers": {"fixture": {"tools": {"add": "deny"}}}}), encoding="utf-8"
    )

    def entry(name: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "token_sha256": hashlib.sha256(TOKENS[name].encode()).hexdigest(), **extra}

    tokens = base / "tokens.json"
    tenants = [entry("acme"), entry("beta"), entry("gamma", servers=["fixture"], policy="gamma-policy.json")]
    tokens.write_text(json.dumps({"tenants": tenants}), encoding="utf-8")
    tokens.chmod(0o600)
    settings = {
        "AUTH_TOKENS": str(tokens),
        "CACHE_DIR": str(base / "cache"),
        "CACHE_EMBEDDER": "hashing",
        "AUDIT_TOOL": "true",
        "PYODIDE_POOL_SIZE": "0",
        "EAGER_RUNNERS": "local,cpython,deno",  # warmed while the first tests run
    }
    env = {k: os.environ[k] for k in MINIMAL_ENV if k in os.environ}
    env |= {f"CODE_MODE_{k}": v for k, v in settings.items()}
    with http_server_in(env, base / "servers.json", base / "server.log", cwd=base) as running:

        async def settled() -> None:  # every server up: the stubs (and so the cache keys) stay as they are
            async with http_client(running.url, TOKENS["acme"]) as client:
                await client.call_tool("get_tool_stubs", {})

        anyio.run(settled)
        yield running


def text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, text(result)
    return result.structured_content


async def run(server: ServerProcess, tenant: str, code: str, **arguments: Any) -> dict[str, Any]:
    async with http_client(server.url, TOKENS[tenant]) as client:
        return structured(await client.call_tool("execute_code", {"language": "python", "code": code, **arguments}))


async def call(server: ServerProcess, tenant: str, tool: str, **arguments: Any) -> CallToolResult:
    async with http_client(server.url, TOKENS[tenant]) as client:
        return await client.call_tool(tool, arguments)


# ----- the token decides the tenant, and nothing else does ----------------------------------------------------


async def test_every_tenant_token_connects_and_another_token_or_none_gets_401(server: ServerProcess) -> None:
    for tenant in TOKENS:
        result = await run(server, tenant, "print('hello')", cache="off")
        assert result["success"] and result["output"] == "hello\n", result
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    for auth in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Bearer " + hashlib.sha256(b"x").hexdigest()},
    ):
        assert httpx2.post(server.url, json=init, headers=headers | auth, timeout=30).status_code == 401


def test_one_tenants_http_session_id_with_another_tenants_token_is_not_found(server: ServerProcess) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    opened = httpx2.post(server.url, json=init, headers=headers | {"Authorization": f"Bearer {TOKENS['acme']}"})
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    theirs = headers | {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    stolen = httpx2.post(server.url, json=listing, headers=theirs | {"Authorization": f"Bearer {TOKENS['beta']}"})
    assert stolen.status_code == 404 and "Session not found" in stolen.text


def test_metrics_answer_any_tenants_token_and_nothing_else(server: ServerProcess) -> None:
    metrics = server.url.replace("/mcp", "/metrics")
    assert httpx2.get(metrics, timeout=30).status_code == 401
    for token in TOKENS.values():
        assert httpx2.get(metrics, headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code == 200


# ----- stored things (the store's tenant column: see the report of issue 24, point 2) -------------------------


async def test_another_tenants_cached_run_is_never_replayed(server: ServerProcess) -> None:
    code = "print('replay-me', 6 * 7)"
    first = await run(server, "acme", code, cache="auto")
    assert first["success"] and not first["cached"]
    again = await run(server, "acme", code, cache="reuse")
    assert again["cached"], "acme's own run replays"
    theirs = await run(server, "beta", code, cache="reuse")
    assert theirs["success"] and not theirs["cached"], "beta got acme's stored run"


async def test_get_cache_stats_counts_a_tenants_own_hits_and_savings_only(server: ServerProcess) -> None:
    before = {t: structured(await call(server, t, "get_cache_stats")) for t in ("acme", "beta")}
    ran = await run(server, "acme", "for i in range(3):\n    fixture.echo(text=str(i))", cache="off")
    assert ran["success"] and ran["toolCalls"] == 3, ran
    after = {t: structured(await call(server, t, "get_cache_stats")) for t in ("acme", "beta")}
    assert after["acme"]["savings"]["roundTrips"] == before["acme"]["savings"]["roundTrips"] + 3
    assert after["beta"]["savings"] == before["beta"]["savings"], "beta is shown acme's savings"
    assert after["beta"]["hits"] == before["beta"]["hits"] and after["beta"]["scripts"] == before["beta"]["scripts"]


async def test_search_list_and_get_cached_script_show_a_tenant_only_its_own_scripts(server: ServerProcess) -> None:
    mine = await run(server, "acme", "print('zebracorn acme only')", cache="auto", description="zebracorn counter")
    assert mine["success"]
    found = structured(await call(server, "beta", "search_cached_scripts", query="zebracorn"))
    assert mine["hash"] not in [h["hash"] for h in found["scripts"]], "beta found acme's script"
    assert "zebracorn" not in json.dumps(found["scripts"])
    listed = structured(await call(server, "beta", "list_cached_scripts", limit=200))
    assert mine["hash"] not in json.dumps(listed)
    got = await call(server, "beta", "get_cached_script", hash=mine["hash"])
    assert got.is_error and f"no cached script with hash {mine['hash']!r}" in text(got)
    assert not (await call(server, "acme", "get_cached_script", hash=mine["hash"])).is_error


async def test_another_tenants_skill_cannot_be_listed_read_deleted_or_called(server: ServerProcess) -> None:
    saved = await call(
        server,
        "acme",
        "save_skill",
        name="acme_secret",
        description="acme's own skill",
        code="def acme_secret():\n    return 7",
    )
    assert not saved.is_error, text(saved)
    async with http_client(server.url, TOKENS["beta"]) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "list_skills" not in names and "get_skill" not in names, "acme's skill lists beta's skill tools"
        listed = structured(await client.call_tool("list_skills", {}))
        assert "acme_secret" not in json.dumps(listed)
        got = await client.call_tool("get_skill", {"name": "acme_secret"})
        assert got.is_error and "no skill 'acme_secret'" in text(got)
        deleted = await client.call_tool("delete_skill", {"name": "acme_secret"})
        assert deleted.is_error and "no skill 'acme_secret'" in text(deleted)
        called = structured(
            await client.call_tool(
                "execute_code", {"language": "python", "code": "skills.acme_secret()", "cache": "off"}
            )
        )
        assert not called["success"]
        assert called["error"]["type"] == "NameError", called["error"]  # beta has no skill by that name (or none)
    still = await run(server, "acme", "skills.acme_secret()", cache="off")
    assert still["success"] and still["returnValue"] == 7, "beta deleted or changed acme's skill"


async def test_the_audit_log_shows_a_tenant_only_its_own_calls(server: ServerProcess) -> None:
    mine = await run(server, "acme", "fixture.add(a=40, b=2)", cache="off", description="audited")
    assert mine["success"]
    theirs = structured(await call(server, "beta", "get_audit_log", run=mine["hash"]))
    assert theirs["entries"] == [], "beta read acme's audit entries"
    everything = structured(await call(server, "beta", "get_audit_log", limit=500))
    assert all("tenant:acme/" not in json.dumps(e) for e in everything["entries"])
    own = structured(await call(server, "acme", "get_audit_log", run=mine["hash"]))
    assert [e["tool"] for e in own["entries"]] == ["add"]


# ----- in-memory things, owned by a client within its tenant ----------------------------------------------------


async def test_another_tenants_artifact_uri_is_an_unknown_resource(server: ServerProcess) -> None:
    made = await run(server, "acme", "open('report.txt', 'w').write('acme private')", cache="off")
    uri = made["files"][0]["uri"]
    assert uri.startswith("code-mode://runs/")
    async with http_client(server.url, TOKENS["beta"]) as client:
        with pytest.raises(MCPError, match="Unknown resource"):
            await client.read_resource(uri)
        listed = await client.list_resources()
        assert uri not in [str(r.uri) for r in listed.resources]


async def test_another_tenants_plan_cannot_be_approved(server: ServerProcess) -> None:
    code = "fixture.echo_json(value='[1, 2]')"
    arguments = {"language": "python", "code": code}
    async with http_client(server.url, TOKENS["acme"]) as acme:
        planned = structured(await acme.call_tool("execute_code", {**arguments, "mode": "plan", "cache": "off"}))
        plan = planned["plan"]["planId"]
        assert plan.startswith("plan-")
        async with http_client(server.url, TOKENS["beta"]) as beta:
            refused = await beta.call_tool("execute_code", {**arguments, "approvePlan": plan})
        assert refused.is_error and f"unknown or expired plan {plan!r}" in structured(refused)["error"]["message"]
        approved = structured(await acme.call_tool("execute_code", {**arguments, "approvePlan": plan}))
        assert approved["success"], "beta's attempt used acme's plan up"


async def test_another_tenants_session_cannot_be_listed_closed_or_run_in(server: ServerProcess) -> None:
    async with http_client(server.url, TOKENS["acme"]) as acme:
        opened = structured(
            await acme.call_tool("execute_code", {"language": "python", "code": "x = 41", "session": "new"})
        )
        session = opened["sessionId"]
        async with http_client(server.url, TOKENS["beta"]) as beta:
            names = {t.name for t in (await beta.list_tools()).tools}
            assert "list_sessions" not in names and "close_session" not in names
            assert structured(await beta.call_tool("list_sessions", {})) == {"result": []}
            closed = await beta.call_tool("close_session", {"sessionId": session})
            assert closed.is_error and f"unknown session {session!r}" in text(closed)
            used = await beta.call_tool("execute_code", {"language": "python", "code": "x + 1", "session": session})
            assert used.is_error and f"unknown session {session!r}" in structured(used)["error"]["message"]
        kept = structured(
            await acme.call_tool("execute_code", {"language": "python", "code": "x + 1", "session": session})
        )
        assert kept["success"] and kept["returnValue"] == 42
        await acme.call_tool("close_session", {"sessionId": session})


async def test_another_tenants_pii_token_is_not_restored(server: ServerProcess) -> None:
    async with http_client(server.url, TOKENS["acme"]) as acme:

        async def acme_run(code: str) -> dict[str, Any]:
            return structured(
                await acme.call_tool("execute_code", {"language": "python", "code": code, "cache": "off"})
            )

        shown = await acme_run("print(fixture.echo(text='alice@example.com')['result'])")
        assert shown["output"].strip() == "[EMAIL_1]"
        restored = await acme_run("print('@' in fixture.echo(text='[EMAIL_1]')['result'])")
        assert restored["output"].strip() == "True", "acme's own token restores for acme"
        theirs = await run(server, "beta", "print('@' in fixture.echo(text='[EMAIL_1]')['result'])", cache="off")
        assert theirs["success"] and theirs["output"].strip() == "False", "beta's call received acme's value"


# ----- a tenant's servers and policy ------------------------------------------------------------------------------


async def test_a_tenant_with_servers_sees_only_those_in_the_listing_search_stubs_and_limits(
    server: ServerProcess,
) -> None:
    async with http_client(server.url, TOKENS["gamma"]) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        description = tools["execute_code"].description or ""
        assert "- fixture" in description and "extra" not in description
        found = structured(await client.call_tool("search_tools", {"query": "add two numbers", "limit": 50}))
        assert found["tools"] and {t["server"] for t in found["tools"]} == {"fixture"}
        other = await client.call_tool("search_tools", {"query": "add", "server": "extra"})
        assert other.is_error and "unknown server 'extra'" in text(other) and "gamma's servers: fixture" in text(other)
        stubs = await client.call_tool("get_tool_stubs", {})
        assert "class fixture" in text(stubs) and "extra" not in text(stubs)
        refused = await client.call_tool("get_tool_stubs", {"server": "extra"})
        assert refused.is_error and "unknown server 'extra' (tenant gamma's servers: fixture)" in text(refused)
        limits = structured(await client.call_tool("get_execution_limits", {}))
        assert [s["name"] for s in limits["servers"]] == ["fixture"]
        assert set(limits["policy"]["servers"]) <= {"fixture"}
    async with http_client(server.url, TOKENS["acme"]) as client:
        description = {t.name: t for t in (await client.list_tools()).tools}["execute_code"].description or ""
        assert "- extra" in description


async def test_a_tenants_run_cannot_reach_another_server_by_stub_by_name_or_through_a_skill(
    server: ServerProcess,
) -> None:
    by_stub = await run(server, "gamma", "extra.echo(text='hi')", cache="off")
    assert not by_stub["success"] and by_stub["error"]["type"] == "NameError" and "extra" in by_stub["error"]["message"]
    by_name = await run(server, "gamma", "call_tool('extra', 'echo', {'text': 'hi'})", cache="off")
    assert not by_name["success"]
    assert "unknown server 'extra' (tenant gamma's servers: fixture)" in by_name["error"]["message"]
    assert by_name["calls"][0]["decision"] == "refused" and by_name["toolCalls"] == 0
    saved = await call(
        server,
        "gamma",
        "save_skill",
        name="reach_out",
        description="tries a server that is not gamma's",
        code="def reach_out():\n    return call_tool('ext' + 'ra', 'echo', {'text': 'hi'})",
    )
    assert not saved.is_error, text(saved)
    through_skill = await run(server, "gamma", "skills.reach_out()", cache="off")
    assert not through_skill["success"]
    assert "unknown server 'extra' (tenant gamma's servers: fixture)" in through_skill["error"]["message"]
    mine = await run(server, "gamma", "fixture.echo(text='hi')", cache="off")
    assert mine["success"] and mine["returnValue"] == {"result": "hi"}
    checked = structured(await call(server, "gamma", "validate_code", language="python", code="extra.echo(text='hi')"))
    assert not checked["valid"] and "extra" in json.dumps(checked["findings"])


async def test_a_tenants_cpython_run_holds_no_stub_of_another_server_anywhere_in_its_process(
    server: ServerProcess,
) -> None:
    code = "print(sorted({'extra', 'fixture'} & set(fixture.echo.__globals__)))"  # the stub module's globals
    await run(server, "acme", "extra.echo(text='warm the zygote with every stub')", runner="cpython", cache="off")
    theirs = await run(server, "gamma", code, runner="cpython", cache="off")
    assert theirs["success"] and theirs["output"].strip() == "['fixture']", theirs
    again = await run(server, "acme", code, runner="cpython", cache="off")
    assert again["success"] and again["output"].strip() == "['extra', 'fixture']", again


async def test_a_tenants_policy_file_decides_its_runs_instead_of_the_servers_file(server: ServerProcess) -> None:
    denied = await run(server, "gamma", "fixture.add(a=1, b=2)", cache="off")
    assert not denied["success"] and re.search(r"denied: fixture\.add", denied["error"]["message"]), denied["error"]
    allowed = await run(server, "acme", "fixture.add(a=1, b=2)", cache="off")
    assert allowed["success"] and allowed["returnValue"] == {"result": 3}
    # The servers file asks about echo_json; gamma's file names fixture, so its entry replaces that one.
    unasked = await run(server, "gamma", "fixture.echo_json(value='[1]')", cache="off")
    assert unasked["success"], unasked["error"]


async def test_a_tenants_task_runs_as_that_tenant_and_no_other_tenant_can_see_or_cancel_it(
    server: ServerProcess,
) -> None:
    async def request(client: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        with anyio.fail_after(60):
            return await client.session._dispatcher.send_raw_request(method, params, {})

    code = "call_tool('extra', 'echo', {'text': 'hi'})"
    async with http_client(server.url, TOKENS["gamma"]) as gamma:
        created = await request(
            gamma,
            "tools/call",
            {"name": "execute_code", "arguments": {"language": "python", "code": code, "cache": "off"}, "task": {}},
        )
        task = created["task"]["taskId"]
        async with http_client(server.url, TOKENS["acme"]) as acme:
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                with pytest.raises(MCPError, match=f"no task {task!r}"):
                    await request(acme, method, {"taskId": task})
            assert task not in json.dumps(await request(acme, "tasks/list", {}))
        result = await request(gamma, "tasks/result", {"taskId": task})
    message = result["structuredContent"]["error"]["message"]
    assert "unknown server 'extra' (tenant gamma's servers: fixture)" in message, "the task ran as another tenant"


async def test_a_tenants_javascript_run_cannot_reach_another_server_either(server: ServerProcess) -> None:
    async def js(code: str) -> dict[str, Any]:
        return await run(server, "gamma", code, language="javascript", cache="off")

    by_stub = await js("export default await extra.echo({ text: 'hi' });")
    assert not by_stub["success"] and "extra" in by_stub["error"]["message"], by_stub["error"]
    by_name = await js("export default await callTool('extra', 'echo', { text: 'hi' });")
    assert not by_name["success"]
    assert "unknown server 'extra' (tenant gamma's servers: fixture)" in by_name["error"]["message"]
    mine = await js("export default await fixture.echo({ text: 'hi' });")
    assert mine["success"] and mine["returnValue"] == {"result": "hi"}, mine["error"]
