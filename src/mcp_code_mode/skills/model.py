"""What a skill is: a saved function with typed parameters, in one language, and how its code is read.

Everything here reads code a model wrote and never runs it: the parameters are inferred from a Python
signature (``ast``) or a TypeScript object type (a small parser of the common ``{ a: string; b?: number }``
form), the tools a skill calls are found by name as ``validate_code``'s policy check finds them, and the
code is rendered into the form a sandbox defines (a Python ``def``; a JavaScript/TypeScript module whose
default export is the function). The sandbox defines it in the calling run, under that run's interpreter.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UnsupportedError

MAX_SKILL_BYTES = 100_000
"""The largest skill source kept."""
MAX_DESCRIPTION_CHARS = 1000
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
FAMILIES = {"python": "python", "javascript": "typescript", "typescript": "typescript"}
"""A skill's language → the stub language of the runs that can call it (JS and TS skills serve both)."""
JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
ENTRY = "_skill_entry"
"""The function a body-form Python skill is rendered into."""


class SkillError(UnsupportedError):
    """A skill that cannot be saved, found or imported (the message says why)."""


@dataclass(frozen=True)
class ToolRef:
    """A tool a skill calls, with the schema hash it had when the version was saved."""

    server: str
    tool: str
    schema_hash: str

    def to_json(self) -> dict[str, str]:
        return {"server": self.server, "tool": self.tool, "schemaHash": self.schema_hash}


@dataclass(frozen=True)
class SkillVersion:
    """One saved version of a skill (the latest is the one runs call)."""

    name: str
    version: int
    language: str
    description: str
    code: str
    parameters: Mapping[str, Any]
    tools: tuple[ToolRef, ...] = ()
    author: str = ""
    created_at: float = 0.0
    source_hash: str | None = None
    """The cached script it was promoted from (``fromHash``), if any."""
    stale: tuple[str, ...] = field(default=(), compare=False)
    """Why it is stale (``filesystem.read_file changed``), filled from the live tools when it is listed."""

    @property
    def family(self) -> str:
        return FAMILIES[self.language]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kind": "skill",
            "language": self.language,
            "description": self.description,
            "version": self.version,
            "parameters": dict(self.parameters),
            "tools": [f"{t.server}.{t.tool}" for t in self.tools],
            "author": self.author,
            "createdAt": self.created_at,
        }
        if self.stale:
            out["stale"] = "; ".join(self.stale)
        return out


RESERVED_NAMES = frozenset({"then", "constructor", "toString", "toJSON", "valueOf", "hasOwnProperty", "inspect"})
"""Names a JavaScript object's members are probed by (``await``, printing, JSON): no skill may take one."""


def check_name(name: object) -> str:
    if (
        not isinstance(name, str)
        or not NAME.match(name)
        or keyword.iskeyword(name)
        or name.startswith("_")
        or name in RESERVED_NAMES
    ):
        raise SkillError(
            f"a skill's name must be an identifier (letters, digits, _; not starting with _ or a digit; at most 64 "
            f"characters; not a keyword, nor {', '.join(sorted(RESERVED_NAMES))}): {name!r} is not"
        )
    return name


def check_language(language: object) -> str:
    lang = str(language or "").strip().lower()
    lang = {"py": "python", "python3": "python", "js": "javascript", "ts": "typescript"}.get(lang, lang)
    if lang not in FAMILIES:
        raise SkillError(f"a skill's language is python, javascript or typescript, not {language!r}")
    return lang


def check_parameters(schema: object, language: str) -> dict[str, Any]:
    """A parameters schema a skill may have: an object schema whose properties are identifiers (every problem
    at once)."""
    if not isinstance(schema, dict):
        raise SkillError('parameters must be a JSON Schema object: {"type": "object", "properties": {...}}')
    problems: list[str] = []
    if schema.get("type", "object") != "object":
        problems.append('its "type" must be "object"')
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        problems.append('"properties" must be an object')
        props = {}
    for key, sub in props.items():
        if not NAME.match(key) or (language == "python" and keyword.iskeyword(key)):
            problems.append(f"parameter {key!r} is not an identifier")
        if not isinstance(sub, dict):
            problems.append(f"parameter {key!r}: its schema must be an object")
            continue
        kind = sub.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
        bad = [k for k in kinds if k not in JSON_TYPES]
        if bad:
            problems.append(f"parameter {key!r}: unknown type {bad[0]!r} (types: {', '.join(JSON_TYPES)})")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append('"required" must be a list of parameter names')
        required = []
    problems += [f"required parameter {r!r} is not among the properties" for r in required if r not in props]
    if problems:
        raise SkillError("parameters: " + "; ".join(problems))
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as exc:
        raise SkillError(f"parameters: not JSON ({exc})") from None
    return {"type": "object", "properties": props, "required": required, **_extra(schema)}


def _extra(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k in ("additionalProperties", "description")}


# ----- Python ----------------------------------------------------------------------------------------------

_PY_TYPES: dict[str, str] = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "tuple": "array",
    "dict": "object",
    "None": "null",
}


def _py_schema(node: ast.expr | None) -> dict[str, Any]:
    """A parameter's annotation as a schema (``str``, ``int | None``, ``list[str]``, ``Optional[int]``)."""
    if node is None:
        return {}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return {}
    if isinstance(node, ast.Constant) and node.value is None:
        return {"type": "null"}
    if isinstance(node, ast.Name) and node.id in _PY_TYPES:
        return {"type": _PY_TYPES[node.id]}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        parts = [_py_schema(node.left), _py_schema(node.right)]
        types = [p["type"] for p in parts if isinstance(p.get("type"), str)]
        return {"type": types} if len(types) == len(parts) else {}
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name | ast.Attribute):
        head = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
        if head in ("list", "List", "Sequence"):
            item = _py_schema(node.slice)
            return {"type": "array", **({"items": item} if item else {})}
        if head in ("dict", "Dict", "Mapping"):
            return {"type": "object"}
        if head == "Optional":
            inner = _py_schema(node.slice)
            return {"type": [inner["type"], "null"]} if isinstance(inner.get("type"), str) else {}
    return {}


def python_function(code: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function a Python skill is: its module's only top-level ``def``, or else its last one; None for a
    script body (no ``def`` at the top level, or top-level statements that run something)."""
    tree = ast.parse(code)
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not defs:
        return None
    others = [
        n
        for n in tree.body
        if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Import | ast.ImportFrom | ast.Assign)
        and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
    ]
    return None if others else defs[-1]


def infer_python(code: str) -> dict[str, Any] | None:
    """The parameters schema of a Python function skill's signature (None for a script body)."""
    func = python_function(code)
    if func is None:
        return None
    args = func.args
    if args.vararg or args.kwarg:
        raise SkillError(f"{func.name}(): a skill's parameters are named; *args and **kwargs cannot be typed")
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    props: dict[str, Any] = {}
    required: list[str] = []
    for arg, default in [*zip(positional, defaults, strict=True), *zip(args.kwonlyargs, args.kw_defaults, strict=True)]:
        schema = _py_schema(arg.annotation)
        if default is None:
            required.append(arg.arg)
        else:
            try:
                schema["default"] = ast.literal_eval(default)
            except ValueError:
                pass
        props[arg.arg] = schema
    doc = ast.get_docstring(func)
    return {
        "type": "object",
        "properties": props,
        "required": required,
        **({"description": doc.strip().splitlines()[0]} if doc else {}),
    }


def render_python(code: str, parameters: Mapping[str, Any]) -> tuple[str, str]:
    """``(source, entry)``: the module a sandbox defines and the name of the function in it. A function skill is
    its own source; a script body becomes ``def _skill_entry(<parameters>)`` whose last expression is returned."""
    func = python_function(code)
    if func is not None:
        return code, func.name
    tree = ast.parse(code)
    body: list[ast.stmt] = list(tree.body) or [ast.Pass()]
    if isinstance(body[-1], ast.Expr):
        body[-1] = ast.Return(value=body[-1].value)
    props: Mapping[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    names = [*[p for p in props if p in required], *[p for p in props if p not in required]]
    defaults: list[ast.expr] = []
    for name in names:
        if name not in required:
            value = props[name].get("default") if isinstance(props[name], dict) else None
            defaults.append(ast.Constant(value if isinstance(value, str | int | float | bool) else None))
    has_await = any(isinstance(n, ast.Await) for n in ast.walk(tree))
    maker = ast.AsyncFunctionDef if has_await else ast.FunctionDef
    func_def = maker(
        name=ENTRY,
        args=ast.arguments(
            posonlyargs=[], args=[ast.arg(arg=n) for n in names], kwonlyargs=[], kw_defaults=[], defaults=defaults
        ),
        body=body,
        decorator_list=[],
        returns=None,
    )
    if "type_params" in maker._fields:  # Python 3.12+
        vars(func_def)["type_params"] = []
    module = ast.Module(body=[func_def], type_ignores=[])
    return ast.unparse(ast.fix_missing_locations(module)) + "\n", ENTRY


# ----- JavaScript / TypeScript -----------------------------------------------------------------------------

_TS_FUNCTION = re.compile(
    r"(?P<export>export\s+default\s+)?(?:async\s+)?function\s*(?P<name>[A-Za-z_$][\w$]*)?\s*\(", re.MULTILINE
)
_TS_MEMBER = re.compile(r"^\s*(?:readonly\s+)?([A-Za-z_$][\w$]*)\s*(\??)\s*:\s*(.+?)\s*$", re.DOTALL)
_TS_TYPES = {"string": "string", "number": "number", "boolean": "boolean", "null": "null", "object": "object"}


def _ts_schema(text: str) -> dict[str, Any]:
    text = text.strip()
    parts = [p.strip() for p in _split(text, "|")]
    if len(parts) > 1:
        types = [_ts_schema(p).get("type") for p in parts]
        if all(isinstance(t, str) for t in types):
            return {"type": types}
        return {}
    if text.endswith("[]"):
        item = _ts_schema(text[:-2])
        return {"type": "array", **({"items": item} if item else {})}
    match = re.fullmatch(r"(?:Array|ReadonlyArray)<(.+)>", text)
    if match:
        item = _ts_schema(match.group(1))
        return {"type": "array", **({"items": item} if item else {})}
    if text in _TS_TYPES:
        return {"type": _TS_TYPES[text]}
    if text.startswith("{") or text.startswith("Record<"):
        return {"type": "object"}
    return {}


def _split(text: str, separators: str) -> list[str]:
    """``text`` split at top-level separators (not inside brackets)."""
    out: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char in "{[(<":
            depth += 1
        elif char in "}])>":
            depth -= 1
        if char in separators and depth == 0:
            out.append("".join(current))
            current = []
        else:
            current.append(char)
    out.append("".join(current))
    return [p for p in out if p.strip()]


def _balanced(text: str, start: int, open_: str, close: str) -> int | None:
    """The index just past the bracket that closes the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def ts_function(code: str) -> re.Match[str] | None:
    """The function a JS/TS skill is: its ``export default`` function, else its first top-level function."""
    matches = list(_TS_FUNCTION.finditer(code))
    exported = [m for m in matches if m.group("export")]
    if exported:
        return exported[0]
    return next((m for m in matches if m.start() == 0 or code[m.start() - 1] == "\n"), None)


def infer_typescript(code: str) -> dict[str, Any] | None:
    """The parameters schema of a JS/TS function skill's first parameter, when its type is an object literal
    type (``({ path, limit }: { path: string; limit?: number })``); ``{}`` for a function that takes no
    parameter; None when it cannot be read (an explicit ``parameters`` schema is then needed)."""
    match = ts_function(code)
    if match is None:
        return None
    end = _balanced(code, match.end() - 1, "(", ")")
    if end is None:
        return None
    inside = code[match.end() : end - 1].strip()
    if not inside:
        return {"type": "object", "properties": {}, "required": []}
    colon = _top_level_colon(inside)
    if colon is None:
        return None
    type_text = inside[colon + 1 :].strip()
    type_text = type_text.split("=")[0].strip() if not type_text.startswith("{") else type_text
    if not type_text.startswith("{"):
        return None
    close = _balanced(type_text, 0, "{", "}")
    if close is None:
        return None
    props: dict[str, Any] = {}
    required: list[str] = []
    for member in _split(type_text[1 : close - 1], ";,\n"):
        parsed = _TS_MEMBER.match(member)
        if parsed is None:
            return None
        name, optional, kind = parsed.groups()
        props[name] = _ts_schema(kind)
        if not optional:
            required.append(name)
    return {"type": "object", "properties": props, "required": required}


def _top_level_colon(text: str) -> int | None:
    depth = 0
    for i, char in enumerate(text):
        if char in "{[(<":
            depth += 1
        elif char in "}])>":
            depth -= 1
        elif char == ":" and depth == 0:
            return i
    return None


def render_typescript(code: str, language: str, parameters: Mapping[str, Any]) -> str:
    """The module a Deno run imports for a JS/TS skill: its default export is the function, called with the
    arguments object. A script body becomes an async function of that object (its ``return`` is the value)."""
    match = ts_function(code)
    if match is not None:
        if match.group("export"):
            return code
        if match.group("name"):
            return f"{code}\nexport default {match.group('name')};\n"
    names = ", ".join(parameters.get("properties") or {})
    typed = ": any" if language == "typescript" else ""
    imports = [line for line in code.splitlines() if _IMPORT.match(line)]
    body = "\n".join(line for line in code.splitlines() if not _IMPORT.match(line))
    body = _EXPORT_DEFAULT.sub("return ", body)  # a script's value (its default export) is the skill's
    head = "".join(f"{line}\n" for line in imports)
    return f"{head}export default async function ({{ {names} }}{typed} = {{}}) {{\n{body}\n}}\n"


_IMPORT = re.compile(r"^import\s+(?:[\w*{}\s,]+\s+from\s+)?[\"'][^\"']+[\"'];?\s*$")
_EXPORT_DEFAULT = re.compile(r"^export\s+default\s+", re.MULTILINE)


def infer(language: str, code: str) -> dict[str, Any] | None:
    return infer_python(code) if language == "python" else infer_typescript(code)


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
