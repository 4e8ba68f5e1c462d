"""The skill tools (``CODE_MODE_TOOLS=full``): ``save_skill``, ``list_skills``, ``get_skill``, ``delete_skill``."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from .skills import SkillBook
from .skills.model import SkillVersion
from .skills.saving import save_skill as save
from .tenants import current_tenant

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from .engine import CodeMode
    from .server import CodeModeServer


def _book(engine: CodeMode) -> SkillBook:
    if engine.skills is None:
        raise ToolError("skills cannot be kept here: the cache database cannot be used")
    return engine.skills


def seen(skill: SkillVersion) -> dict[str, Any]:
    """A skill's summary as the tenant acting now sees it: the tools of its own servers only (a tenant whose
    servers were narrowed after it saved the skill is shown no other server's name; a call to one is refused)."""
    allowed = current_tenant().servers
    if allowed is not None:
        skill = replace(skill, tools=tuple(t for t in skill.tools if t.server in allowed))
    return skill.summary()


def skill_detail(book: SkillBook, name: str) -> dict[str, Any]:
    """``get_skill``: the latest version with its code, and every version's number, time and author."""
    versions = book.store.versions(name, tenant=current_tenant().name)
    if not versions:
        known = ", ".join(s.name for s in book.current()) or "none"
        raise ToolError(f"no skill {name!r} (skills: {known})")
    latest = book.with_staleness(versions[0])
    call = _call(latest.family, name)
    return {
        **seen(latest),
        "code": latest.code,
        "call": call,
        "fromHash": latest.source_hash,
        "versions": [{"version": v.version, "createdAt": v.created_at, "author": v.author} for v in versions],
    }


def register_skill_tools(
    server: CodeModeServer,
    engine: CodeMode,
    client_of: Callable[[Context | None], str],
    tool_errors: Callable[[], AbstractContextManager[None]],
) -> None:
    """``client_of`` names who asks; ``tool_errors`` makes a refusal the tool's error text (``server``'s own).
    ``list_skills``, ``get_skill`` and ``delete_skill`` are listed once a skill exists (``show_when``); skills are
    also found with ``search_tools`` and shown by ``get_tool_stubs``."""

    def any_skill(_client: str) -> bool:
        return engine.skills is not None and engine.skills.exists()

    for name in ("list_skills", "get_skill", "delete_skill"):
        server.show_when(name, any_skill)

    @server.tool(name="save_skill")
    async def save_skill(
        name: str,
        description: str,
        code: str | None = None,
        fromHash: str | None = None,
        parameters: dict[str, Any] | None = None,
        language: str | None = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        """Save code or a cached script as a typed skill."""
        with tool_errors():
            await engine.settled()  # the tools it calls are known, with their schema hashes
            saved = await save(
                engine,
                name=name,
                description=description,
                code=code,
                from_hash=fromHash,
                parameters=parameters,
                language=language,
                client=client_of(ctx),
            )
        await server.refresh_surface()  # the first skill lists the other skill tools
        return {**seen(_book(engine).with_staleness(saved)), "call": _call(saved.family, name)}

    @server.tool(name="list_skills")
    async def list_skills() -> dict[str, Any]:
        """Saved skills: parameters, tools, staleness."""
        book = _book(engine)
        await engine.settled()  # staleness is told against every server's tools
        skills = await anyio.to_thread.run_sync(book.current)
        return {"skills": [seen(s) for s in skills]}

    @server.tool(name="get_skill")
    async def get_skill(name: str) -> dict[str, Any]:
        """A skill's code, parameters and versions."""
        book = _book(engine)
        await engine.settled()
        return await anyio.to_thread.run_sync(skill_detail, book, name)

    @server.tool(name="delete_skill")
    async def delete_skill(name: str) -> dict[str, Any]:
        """Delete a skill (every version)."""
        book = _book(engine)
        removed = await anyio.to_thread.run_sync(partial(book.store.delete, name, tenant=current_tenant().name))
        if not removed:
            raise ToolError(f"no skill {name!r}")
        await server.refresh_surface()
        return {"deleted": name, "versions": removed}


def _call(family: str, name: str) -> str:
    return f"skills.{name}(...)" if family == "python" else f"await skills.{name}({{...}})"
