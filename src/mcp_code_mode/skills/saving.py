"""``save_skill``: a script that succeeded (``fromHash``) or new code (validated first) becomes a skill."""

from __future__ import annotations

import re
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from ..tenants import current_tenant
from ..validate import code_size
from .model import (
    MAX_DESCRIPTION_CHARS,
    MAX_SKILL_BYTES,
    SkillError,
    SkillVersion,
    ToolRef,
    check_language,
    check_name,
    check_parameters,
    infer,
    python_function,
    render_python,
    render_typescript,
)

if TYPE_CHECKING:
    from ..engine import CodeMode

_STUB_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)\s*\(")
_NAMED_CALL = re.compile(r"\b(?:call_tool|callTool)\s*\(\s*[\"']([^\"']+)[\"']\s*,\s*[\"']([^\"']+)[\"']")
OPEN_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "required": [], "additionalProperties": True}
"""The parameters of a JS/TS function whose type cannot be read and that were not given: any object."""


def tools_called(cm: CodeMode, code: str) -> tuple[ToolRef, ...]:
    """The tools ``code`` calls by name (``namespace.tool(``, ``call_tool("server", "tool")``), each with its
    current schema hash."""
    index = cm.index
    found: dict[tuple[str, str], ToolRef] = {}
    named = [(m.group(1), m.group(2)) for m in _STUB_CALL.finditer(code)]
    named += [(m.group(1), m.group(2)) for m in _NAMED_CALL.finditer(code)]
    for server, tool in named:
        spec = index.tool(server, tool)
        if spec is not None:
            found[(spec.server, spec.name)] = ToolRef(spec.server, spec.name, spec.info.schema_hash)
    if cm.skills is not None:  # a skill it calls brings the tools that one calls, as they were recorded
        for name in {m.group(2) for m in _STUB_CALL.finditer(code) if m.group(1) == "skills"}:
            inner = cm.skills.find(name)
            for ref in inner.tools if inner is not None else ():
                found.setdefault((ref.server, ref.tool), ref)
    return tuple(sorted(found.values(), key=lambda t: (t.server, t.tool)))


async def save_skill(
    cm: CodeMode,
    *,
    name: str,
    description: str,
    code: str | None = None,
    from_hash: str | None = None,
    parameters: dict[str, Any] | None = None,
    language: str | None = None,
    client: str = "library",
) -> SkillVersion:
    """Save a new version of skill ``name`` (``SkillError`` saying why it cannot be)."""
    book = cm.skills
    if book is None:
        raise SkillError("skills cannot be kept here: the cache database cannot be used")
    check_name(name)
    if (code is None) == (from_hash is None):
        raise SkillError("save_skill takes code (new code) or fromHash (a cached script that succeeded), one of them")
    tools: tuple[ToolRef, ...] | None = None
    if from_hash is not None:
        script = await anyio.to_thread.run_sync(partial(cm.scripts.get, from_hash, tenant=current_tenant().name))
        if script is None:
            raise SkillError(
                f"no cached script {from_hash!r}: only runs that succeeded are kept (a failed run, or one run with "
                'cache="off", cannot be promoted; see list_cached_scripts)'
            )
        if language is not None and check_language(language) != script.language:
            raise SkillError(f"script {from_hash!r} is {script.language}, not {language}")
        code, language = script.code, script.language
        tools = tuple(ToolRef(t.server, t.tool, t.schema_hash) for t in script.tools)
    assert code is not None
    lang = check_language(language or "python")
    if code_size(code) > MAX_SKILL_BYTES:
        raise SkillError(f"a skill's code is at most {MAX_SKILL_BYTES:,} bytes")
    description = (description or "").strip()
    if not description:
        raise SkillError("a skill needs a description (a sentence: what it does and returns)")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillError(f"a skill's description is at most {MAX_DESCRIPTION_CHARS} characters")
    try:
        inferred = infer(lang, code)  # Python code is parsed here (never run)
    except SyntaxError as exc:
        raise SkillError(f"the code does not parse: line {exc.lineno}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise SkillError(f"the code does not parse: {type(exc).__name__}") from None
    schema = check_parameters(parameters if parameters is not None else inferred or OPEN_SCHEMA, lang)
    if lang == "python" and parameters is not None and (func := python_function(code)) is not None:
        names = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
        if set(schema["properties"]) != names:
            raise SkillError(
                f"parameters name {', '.join(sorted(schema['properties'])) or 'nothing'} but {func.name}() takes "
                f"{', '.join(sorted(names)) or 'nothing'}: leave parameters out to infer them from the signature"
            )
    rendered = render_python(code, schema)[0] if lang == "python" else render_typescript(code, lang, schema)
    if from_hash is None:  # new code is checked first, as validate_code checks a script
        checked = await cm.validate(lang, rendered)
        # Imports and constructs one interpreter lacks are left to the calling run: each runner allows its own,
        # and enforces them when the skill runs (``local`` refuses them there, as in a script).
        left = ("stale-skill", "import", "unsupported")
        findings = [f for f in checked.get("findings", []) if f.get("kind") not in left]
        if findings:
            listed = "; ".join(f"line {f.get('line')}: {f.get('message')}" for f in findings[:10])
            raise SkillError(f"the code does not validate ({checked.get('runner')}): {listed}")
    if tools is None:
        tools = tools_called(cm, code)
    skill = SkillVersion(
        name=name,
        version=0,
        language=lang,
        description=description,
        code=code,
        parameters=schema,
        tools=tools,
        author=client,
        source_hash=from_hash,
    )
    return await anyio.to_thread.run_sync(partial(book.store.save, skill, tenant=current_tenant().name))
