"""``SkillBook``: the engine's view of the skills: staleness against the live tools, what a run gets, what
``get_tool_stubs``, ``search_tools`` and ``validate_code`` show.

A skill's code is untrusted (a model wrote it). The host never runs it: it sends it with each run of its
language, and the run's own sandbox defines it under the run's interpreter (``cm_runtime.Skills`` for the
Python runners, ``deno_worker.ts`` for JavaScript/TypeScript). The host decides what a run may call: a stale
skill under ``CODE_MODE_STALE_SKILLS=refuse`` is sent as a refusal, not as code.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..runners import StubBundle
from ..tenants import current_tenant
from .model import SkillError, SkillVersion, render_python, render_typescript
from .store import SkillStore

SchemaHash = Callable[[str, str], "str | None"]
"""``(server, tool)`` → the tool's current schema hash, None when it is gone, "" when that is not known now."""

_CALL = re.compile(r"(?<![\w.])skills\s*\.\s*([A-Za-z_]\w*)")


class SkillBook:
    def __init__(self, store: SkillStore, schema_hash: SchemaHash, *, refuse_stale: bool = False) -> None:
        self.store = store
        self.schema_hash = schema_hash
        self.refuse_stale = refuse_stale
        self._cached: dict[str, tuple[tuple[int, int], list[SkillVersion]]] = {}
        self._extended: dict[tuple[str, str], tuple[tuple[int, int, int], StubBundle]] = {}

    def _latest(self) -> list[SkillVersion]:
        """The current tenant's skills (``tenants.current_tenant``: the book is the engine's view; the store is
        told the tenant explicitly)."""
        tenant = current_tenant().name
        mark = (self.store.generation, self.store.data_version())
        cached = self._cached.get(tenant)
        if cached is None or cached[0] != mark:
            cached = self._cached[tenant] = (mark, self.store.latest(tenant=tenant))
        return cached[1]

    def exists(self) -> bool:
        """Whether any skill is saved (cheap: the store's generation and data version, then the cached list)."""
        return bool(self._latest())

    def stale_reasons(self, skill: SkillVersion) -> tuple[str, ...]:
        reasons: list[str] = []
        for ref in skill.tools:
            now = self.schema_hash(ref.server, ref.tool)
            if now == "":  # its server is not up: not known now
                continue
            if now is None:
                reasons.append(f"{ref.server}.{ref.tool} is gone")
            elif ref.schema_hash and now != ref.schema_hash:
                reasons.append(f"{ref.server}.{ref.tool} changed")
        return tuple(reasons)

    def with_staleness(self, skill: SkillVersion) -> SkillVersion:
        return replace(skill, stale=self.stale_reasons(skill))

    def current(self, family: str | None = None) -> list[SkillVersion]:
        """The latest version of every skill (of one stub language's family), staleness filled in."""
        return [self.with_staleness(s) for s in self._latest() if family is None or s.family == family]

    def find(self, name: str) -> SkillVersion | None:
        return next((s for s in self.current() if s.name == name), None)

    def servers_called(self, code: str) -> set[str]:
        """The servers whose tools the skills ``code`` calls use (a run waits for those still starting)."""
        named = {m.group(1) for m in _CALL.finditer(code)}
        if not named:
            return set()
        return {ref.server for s in self._latest() if s.name in named for ref in s.tools}

    # ----- what a run gets --------------------------------------------------------------------------

    def run_specs(self, family: str) -> tuple[Mapping[str, Any], ...]:
        """The skills a run of this stub language can call, as its run message carries them."""
        specs: list[dict[str, Any]] = []
        for skill in self.current(family):
            spec: dict[str, Any] = {"name": skill.name, "version": skill.version, "schema": dict(skill.parameters)}
            if skill.stale and self.refuse_stale:
                spec["refused"] = (
                    f"skills.{skill.name} is stale ({'; '.join(skill.stale)}) and CODE_MODE_STALE_SKILLS=refuse: "
                    "check it against the tools' new stubs and save it again"
                )
            elif family == "python":
                try:
                    spec["source"], spec["entry"] = render_python(skill.code, skill.parameters)
                except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:  # an imported skill, say
                    spec["refused"] = f"skills.{skill.name} cannot be defined: its code does not parse ({exc})"
            else:
                spec["source"] = render_typescript(skill.code, skill.language, skill.parameters)
                spec["language"] = skill.language
            specs.append(spec)
        return tuple(specs)

    def extend(self, bundle: StubBundle, family: str) -> StubBundle:
        """``bundle`` with the skills a run of its stub language may call; the TypeScript declarations gain the
        ``skills`` namespace (``deno check`` sees it). The Python source is left alone: a zygote compiles it,
        and a skill's code never runs there."""
        mark = (bundle.version, self.store.generation, self.store.data_version())
        key = (current_tenant().name, family)
        kept = self._extended.get(key)
        if kept is None or kept[0] != mark:
            specs = self.run_specs(family)
            source = bundle.source if family == "python" else bundle.source + self.declarations(family)
            kept = (mark, replace(bundle, source=source, skills=specs) if specs else bundle)
            self._extended[key] = kept
        return kept[1]

    # ----- what the model sees ----------------------------------------------------------------------

    def declarations(self, family: str, names: list[str] | None = None) -> str:
        """The ``skills`` namespace as stubs: Python (shown by ``get_tool_stubs``) or TypeScript declarations
        (shown, and given to ``deno check``); all skills of the family, or the ``names`` (``SkillError`` for
        one that does not exist)."""
        skills = self.current(family)
        if names is not None:
            missing = sorted(set(names) - {s.name for s in skills})
            if missing:
                known = ", ".join(s.name for s in skills) or "none"
                raise SkillError(f"no skill {', '.join(missing)} for {family} (skills: {known})")
            skills = [s for s in skills if s.name in names]
        if not skills:
            return ""
        if family == "python":
            lines = ["", "", "class skills:", '    """Saved skills: skills.name(...) runs the skill in this run."""']
            for s in skills:
                lines += ["", "    @staticmethod", f"    def {s.name}({_py_params(s.parameters)}) -> Any:"]
                lines.append(f"        {_py_doc(_doc(s))}")
                lines.append("        ...")
            return "\n".join(lines) + "\n"
        lines = [
            "",
            "/** Saved skills: `await skills.name({...})` runs the skill in this run. */",
            "declare const skills: {",
        ]
        for s in skills:
            lines.append(f"  /** {_doc(s).replace('*/', '* /')} */")
            optional = "" if s.parameters.get("required") else "?"
            lines.append(f"  {s.name}(args{optional}: {_ts_object(s.parameters)}): Promise<any>;")
        lines.append("};")
        return "\n".join(lines) + "\n"

    def search(self, query: str, limit: int) -> list[dict[str, Any]]:
        """Skills whose name or description has a word of ``query`` (all of them for an empty query)."""
        words = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 1]
        scored: list[tuple[int, SkillVersion]] = []
        for s in self.current():
            text = f"{s.name.replace('_', ' ')} {s.name} {s.description}".lower()
            score = sum(1 for w in words if w in text)
            if score or not words:
                scored.append((score, s))
        scored.sort(key=lambda pair: (-pair[0], pair[1].name))
        return [_hit(s) for _, s in scored[:limit]]

    def findings(self, code: str, family: str) -> list[dict[str, Any]]:
        """``validate_code`` findings: a call to a skill that does not exist (in this language) or is stale."""
        known = {s.name: s for s in self.current(family)}
        findings: list[dict[str, Any]] = []
        for number, line in enumerate(code.splitlines(), 1):
            for match in _CALL.finditer(line):
                name = match.group(1)
                skill = known.get(name)
                column = match.start() + 1
                if skill is None:
                    names = ", ".join(known) or "none"
                    message = f"no skill {name!r} for this language (skills: {names})"
                    findings.append({"line": number, "column": column, "kind": "unknown-skill", "message": message})
                elif skill.stale:
                    verb = "is refused" if self.refuse_stale else "still runs"
                    message = f"skills.{name} is stale: {'; '.join(skill.stale)} since it was saved ({verb})"
                    findings.append({"line": number, "column": column, "kind": "stale-skill", "message": message})
        if family == "python" and any(m.group(1) in known for m in _CALL.finditer(code)):
            findings += _python_arguments(code, known)
        return findings


def _python_arguments(code: str, known: Mapping[str, SkillVersion]) -> list[dict[str, Any]]:
    """``arguments`` findings for Python calls of known skills: an unknown keyword, a required one missing."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # the runner's check reports it
    findings: list[dict[str, Any]] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "skills"
            and node.func.attr in known
        ):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue
        schema = known[node.func.attr].parameters
        props = list(schema.get("properties") or {})
        given = set(props[: len(node.args)]) | {k.arg for k in node.keywords if k.arg}
        where = {"line": node.lineno, "column": node.col_offset + 1, "kind": "arguments"}
        if schema.get("additionalProperties") is not True:
            for k in node.keywords:
                if k.arg and k.arg not in props:
                    listed = ", ".join(props) or "none"
                    message = f"skills.{node.func.attr} has no parameter {k.arg!r} (parameters: {listed})"
                    findings.append({**where, "message": message})
        missing = [name for name in schema.get("required") or [] if name not in given]
        findings += [{**where, "message": f"skills.{node.func.attr} needs the parameter {n!r}"} for n in missing]
    return findings


def _hit(s: SkillVersion) -> dict[str, Any]:
    call = f"skills.{s.name}(...)" if s.family == "python" else f"await skills.{s.name}({{...}})"
    hit: dict[str, Any] = {"tool": f"skills.{s.name}", "kind": "skill", "language": s.language, "call": call}
    hit["description"] = s.description
    if s.stale:
        hit["stale"] = "; ".join(s.stale)
    return hit


def _doc(s: SkillVersion) -> str:
    text = s.description or s.name
    if s.stale:
        text += f" (stale: {'; '.join(s.stale)})"
    return text


def _py_doc(text: str) -> str:
    return repr(text) if '"""' in text or "\\" in text else f'"""{text}"""'


_PY = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict"}
_TS = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}


def _type(schema: object, table: Mapping[str, str], fallback: str) -> str:
    kind = schema.get("type") if isinstance(schema, dict) else None
    kinds: list[Any] = kind if isinstance(kind, list) else [kind]
    if table is _TS:
        names = [
            table.get(k, "unknown[]" if k == "array" else "Record<string, unknown>" if k == "object" else "")
            for k in kinds
            if isinstance(k, str)
        ]
    else:
        names = ["None" if k == "null" else table.get(k, "") for k in kinds if isinstance(k, str)]
    names = [n for n in names if n]
    return " | ".join(names) if names and len(names) == len(kinds) else fallback


def _py_params(schema: Mapping[str, Any]) -> str:
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    parts = [f"{n}: {_type(props[n], _PY, 'Any')}" for n in props if n in required]
    for n in props:
        if n not in required:
            default = props[n].get("default") if isinstance(props[n], dict) else None
            parts.append(f"{n}: {_type(props[n], _PY, 'Any')} = {default!r}")
    return ", ".join(parts)


def _ts_object(schema: Mapping[str, Any]) -> str:
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    members = [f"{n}{'' if n in required else '?'}: {_type(props[n], _TS, 'unknown')}" for n in props]
    return "{ " + "; ".join(members) + (" }" if members else "}")
