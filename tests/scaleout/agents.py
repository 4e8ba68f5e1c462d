"""Agents for the replica tests and ``bench/replicas.py``: MCP clients over streamable HTTP through the balancer,
each doing a mix of what a model does, every operation recorded (what, how long, acknowledged or the error).

An operation is acknowledged when the client got its result. Each ``tool_run`` is a script of its own (its
``nonce`` in the code): acknowledged once, it must be in the store exactly once (``stored_runs``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, LiteralString

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

SKILL = (
    "def plus_one(n: int) -> int:\n"
    '    """n + 1, by the fixture\'s add."""\n'
    "    return fixture.add(a=n, b=1)['result']\n"
)
SHARED = "print(fixture.add(a=2, b=3))"
"""The script every agent sends: after its first run anywhere, a cache hit on every replica."""
GONE = ("went away", "SSE stream ended", "Server returned an error response", "Session terminated", "belongs to")
"""What a client is told when the replica that had its request is gone (nginx's error page, the SDK's words for a
cut stream or a 5xx, a replica's 404 for another replica's session)."""


@dataclass
class Op:
    agent: int
    kind: str
    started: float
    ms: float
    ok: bool
    error: str | None = None
    nonce: str | None = None
    hash: str | None = None
    session: str | None = None


@dataclass
class Agents:
    url: str
    mix: Sequence[str] = ("tool_run", "cache_hit", "tool_run", "search", "skill")
    tool_prefix: str = ""
    """Code before each ``tool_run``'s own (a sleep keeps runs in flight)."""
    ops: list[Op] = field(default_factory=list[Op])
    reconnects: int = 0
    stop: anyio.Event = field(default_factory=anyio.Event)
    sessions: dict[int, tuple[str, int]] = field(default_factory=dict[int, tuple[str, int]])
    """Agent → its code-mode session (``session`` operations: opened, then ``n += 1`` in it) and its ``n``."""
    sessions_opened: int = 0
    sessions_lost: int = 0
    """Sessions whose client's replica went away (they were open, and the agent had to start another)."""

    def acknowledged(self, kind: str = "tool_run") -> list[Op]:
        return [op for op in self.ops if op.kind == kind and op.ok]

    def failed(self) -> list[Op]:
        return [op for op in self.ops if not op.ok]

    async def one(self, client: Client, agent: int, kind: str, step: int) -> Op:
        started = time.monotonic()
        nonce: str | None = None
        try:
            if kind in ("tool_run", "cache_hit", "skill"):
                if kind == "tool_run":
                    nonce = f"agent{agent}-step{step}-{time.time_ns()}"
                    code = f"{self.tool_prefix}r = fixture.add(a={step}, b={agent})\nprint({nonce!r}, r['result'])"
                elif kind == "skill":
                    code = f"print(skills.plus_one(n={step}))"
                else:
                    code = SHARED
                result = await client.call_tool("execute_code", {"language": "python", "code": code})
            elif kind == "session":
                return await self.session_step(client, agent, started)
            elif kind == "search":
                result = await client.call_tool("search_cached_scripts", {"query": "add two numbers"})
                if not result.is_error:
                    result = await client.call_tool("search_tools", {"query": "add numbers"})
            else:
                raise ValueError(kind)
        except Exception as exc:  # whatever the client raises is what the test reads
            return Op(agent, kind, started, (time.monotonic() - started) * 1000, False, f"{type(exc).__name__}: {exc}")
        ms = (time.monotonic() - started) * 1000
        content = result.structured_content or {}
        if result.is_error or (kind != "search" and not content.get("success")):
            text = " ".join(getattr(c, "text", "") for c in result.content)
            return Op(agent, kind, started, ms, False, f"tool error: {content.get('error') or text}"[:500], nonce)
        return Op(agent, kind, started, ms, True, None, nonce, content.get("hash"))

    async def session_step(self, client: Client, agent: int, started: float) -> Op:
        """Open the agent's code-mode session, or count on in it (its state must have kept)."""
        held = self.sessions.get(agent)
        arguments = {"language": "python", "session": held[0] if held else "new"}
        arguments["code"] = "n += 1\nprint(n)" if held else "n = 0\nprint(n)"
        result = await client.call_tool("execute_code", arguments)
        ms = (time.monotonic() - started) * 1000
        content = result.structured_content or {}
        expected = f"{held[1] + 1 if held else 0}\n"
        if result.is_error or not content.get("success") or content.get("output") != expected:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            error = content.get("error") or text or f"session output {content.get('output')!r}, not {expected!r}"
            return Op(agent, "session", started, ms, False, f"tool error: {error}"[:500])
        session = held[0] if held else str(content["sessionId"])
        self.sessions_opened += held is None
        self.sessions[agent] = (session, int(expected))
        return Op(agent, "session", started, ms, True, session=session)

    async def run_agent(self, agent: int, *, steps: int | None = None, until: Callable[[], bool] | None = None) -> None:
        """Operations one after another (as an agent does), from ``mix`` at place ``agent``; a client whose replica
        went away opens a new one (reconnects) and goes on. Stops after ``steps``, or once ``until()`` holds."""
        step = 0
        while not self.stop.is_set():
            try:
                async with connect(self.url) as client:
                    while not self.stop.is_set():
                        if (steps is not None and step >= steps) or (until is not None and until()):
                            return
                        kind = self.mix[(agent + step) % len(self.mix)]
                        op = await self.one(client, agent, kind, step)
                        self.ops.append(op)
                        step += 1
                        if not op.ok and op.error is not None and any(g in op.error for g in GONE):
                            break  # this client's session (or stream) is gone: a new client
            except Exception:  # the client's exit against a dead replica: then a new client
                pass
            self.reconnects += 1
            if self.sessions.pop(agent, None) is not None:
                self.sessions_lost += 1  # its replica went away with it


@asynccontextmanager
async def connect(url: str) -> AsyncGenerator[Client]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            yield client


async def save_skill(url: str) -> None:
    async with connect(url) as client:
        saved = await client.call_tool(
            "save_skill", {"name": "plus_one", "description": "n plus one, by the fixture.", "code": SKILL}
        )
        assert not saved.is_error, saved


def script_rows(store: Path | str) -> list[tuple[str, int, str]]:
    """Every stored script as ``(hash, run_count, code)``: from the shared SQLite file, or a PostgreSQL URL (psycopg,
    which the PostgreSQL store brings)."""
    if isinstance(store, str):
        import psycopg  # pyright: ignore[reportMissingImports]

        with psycopg.connect(store) as conn:  # pyright: ignore[reportUnknownVariableType]
            return [tuple(row) for row in conn.execute("SELECT hash, run_count, code FROM scripts").fetchall()]
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT hash, run_count, code FROM scripts").fetchall()
    finally:
        conn.close()


def stored_runs(store: Path | str, nonces: Sequence[str]) -> dict[str, list[tuple[str, int]]]:
    """Nonce → its rows in the shared store, as ``(hash, run_count)``."""
    rows = script_rows(store)
    found: dict[str, list[tuple[str, int]]] = {n: [] for n in nonces}
    for hash_, run_count, code in rows:
        for nonce in nonces:
            if repr(nonce) in code:
                found[nonce].append((hash_, run_count))
    return found


def store_integrity(db: Path | str) -> dict[str, Any]:
    """Whether the store is whole (SQLite: ``PRAGMA integrity_check``; PostgreSQL: no vector without its script)
    and every script has its full-text entry (none half-stored)."""
    if isinstance(db, str):
        import psycopg  # pyright: ignore[reportMissingImports]

        with psycopg.connect(db) as pg:  # pyright: ignore[reportUnknownVariableType]

            def one(sql: LiteralString) -> int:
                row = pg.execute(sql).fetchone()  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
                assert row is not None
                return int(row[0])  # pyright: ignore[reportUnknownArgumentType]

            orphans = one("SELECT count(*) FROM vectors WHERE script_id NOT IN (SELECT id FROM scripts)")
            return {
                "integrity": "ok" if orphans == 0 else f"{orphans} vectors without their script",
                "scripts": one("SELECT count(*) FROM scripts"),
                "indexed": one("SELECT count(*) FROM scripts WHERE search IS NOT NULL AND search <> ''::tsvector"),
                "audit_without_run": one("SELECT count(*) FROM audit WHERE run_hash IS NULL"),
            }
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
        scripts = conn.execute("SELECT count(*) FROM scripts").fetchone()[0]
        indexed = conn.execute("SELECT count(*) FROM scripts_fts WHERE rowid IN (SELECT id FROM scripts)").fetchone()[0]
        unhashed_audit = conn.execute("SELECT count(*) FROM audit WHERE run_hash IS NULL").fetchone()[0]
    finally:
        conn.close()
    return {"integrity": check, "scripts": scripts, "indexed": indexed, "audit_without_run": unhashed_audit}
