"""Building stored scripts for cache tests without running anything."""

from __future__ import annotations

from collections.abc import Sequence

from mcp_code_mode.cache import KeyContext, NewScript, ToolUse, code_key, derive_description, full_key


def key_context(
    *,
    language: str = "python",
    runner: str = "local",
    runner_identity: str = "local-test",
    network: bool = False,
    packages: Sequence[str] = (),
    stubs: str = "no-stubs",
) -> KeyContext:
    """A key context with test defaults; each argument changes one field."""
    return KeyContext(language, runner, runner_identity, network, tuple(packages), stubs)


def new_script(
    code: str,
    *,
    tools: Sequence[str] = (),
    description: str | None = None,
    language: str = "python",
    schema_hash: str = "h1",
    output: str = "",
    files: Sequence[str] = (),
    network: bool = False,
) -> NewScript:
    uses = [ToolUse(name.split(".", 1)[0], name.split(".", 1)[1], schema_hash) for name in tools]
    key = code_key(code, key_context(language=language, network=network))
    return NewScript(
        hash=full_key(key, uses),
        code_key=key,
        language=language,
        runner="local",
        code=code,
        packages=[],
        description=description or derive_description(code, tools),
        description_given=description is not None,
        output=output,
        return_value={"ok": True},
        truncated=False,
        files=[{"path": f, "size": 1} for f in files],
        tools=uses,
        tool_calls=len(uses),
        network=network,
        execution_ms=12.5,
    )
