"""Privacy over streamable HTTP: every byte two sessions receive (results, log notifications, progress) is read
raw off the wire and scanned for the CRM's planted values; each session has its own tokens, and a token one
session saw restores for that session only."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.http_server import HttpOptions, build_http_app

from ..conftest import make_config
from ..fixtures.pii_crm_server import crm_entry

pytestmark = pytest.mark.anyio

VERSION = "2025-11-25"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
LIST = "for c in crm.list_customers()['customers']:\n    print(c['email'], c['phone'], c['card'])"


class Session:
    """One MCP session over raw HTTP; ``wire`` keeps every byte it received."""

    def __init__(self, http: httpx2.AsyncClient) -> None:
        self.http = http
        self.id = ""
        self.wire: list[str] = []
        self.calls = 1

    async def open(self) -> Session:
        response = await self.http.post("/mcp", json=INIT, headers=HEADERS)
        self.wire.append(response.text)
        self.id = response.headers["mcp-session-id"]
        await self.http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.h())
        return self

    def h(self) -> dict[str, str]:
        return HEADERS | {"mcp-session-id": self.id, "mcp-protocol-version": VERSION}

    async def run(self, code: str) -> dict[str, Any]:
        self.calls += 1
        params = {
            "name": "execute_code",
            "arguments": {"language": "python", "code": code, "cache": "off"},
            "_meta": {"progressToken": f"p{self.calls}"},
        }
        body = {"jsonrpc": "2.0", "id": self.calls, "method": "tools/call", "params": params}
        response = await self.http.post("/mcp", json=body, headers=self.h(), timeout=120)
        assert response.status_code == 200, response.text
        self.wire.append(response.text)
        events = [
            json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()
        ]
        return events[-1]["result"]["structuredContent"]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[httpx2.AsyncClient, Path]]:
    record = tmp_path / "crm.jsonl"
    engine = CodeMode(
        make_config(
            {"crm": {**crm_entry(record), "pii": "tokenize"}},
            cache_dir=tmp_path / "cache",
            pool_size=1,
            cpython_pool_size=0,
            stream_output_after_ms=0,
        )
    )
    app = build_http_app(engine, HttpOptions())
    transport = httpx2.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http,
    ):
        yield http, record


def planted() -> list[str]:
    """Every e-mail, phone and card the CRM serves, as written and (cards) as bare digits."""
    from ..fixtures.pii_crm_server import dataset

    values: list[str] = []
    for customer in dataset():
        values += [customer["email"], customer["phone"], customer["card"]]
        values.append(re.sub(r"\D", "", customer["card"]))
    return values


async def test_two_http_sessions_see_only_their_own_tokens(world: tuple[httpx2.AsyncClient, Path]) -> None:
    http, record = world
    a, b = await Session(http).open(), await Session(http).open()
    first = await a.run(LIST)
    assert first["success"], first["error"]
    tokens = first["output"].split()
    assert tokens[:3] == ["[EMAIL_1]", "[PHONE_1]", "[CARD_1]"]
    reversed_b = await b.run(LIST.replace("['customers']", "['customers'][::-1]"))
    assert reversed_b["output"].split()[0] == "[EMAIL_1]"  # b's own numbering: another customer
    # a's token restores for a: the CRM receives the real address and answers with a's tokens again.
    again = await a.run("print(crm.get_customer(email='[EMAIL_1]')['phone'])")
    assert again["success"], again["error"]
    assert again["output"].strip() == "[PHONE_1]"
    # b's [EMAIL_1] is b's first customer, not a's.
    theirs = await b.run("print(crm.get_customer(email='[EMAIL_1]')['phone'])")
    assert theirs["success"] and theirs["output"].strip() == "[PHONE_1]"
    received = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    asked = [r["arguments"]["email"] for r in received if r["tool"] == "get_customer"]
    assert len(asked) == 2 and asked[0] != asked[1] and all("@" in e for e in asked)
    wire = "\n".join(a.wire + b.wire)
    assert "notifications/message" in wire  # the log notifications were read and scanned too
    leaked = [v for v in planted() if v.lower() in wire.lower()]
    assert leaked == []
