"""``validate_code``: static checks of a script against this host's runners and the live tool schemas.

Nothing runs and no tool is called. For Python it reports, all at once and each with a line:

- ``syntax``: the syntax error, with line and column (the other checks need a parsed script);
- ``import``: imports the runner would refuse;
- ``unknown-server`` / ``unknown-tool``: a name used like a server namespace that is not one, a tool
  a server does not have (also in ``call_tool("server", "tool", ...)`` with literal names);
- ``arguments``: literal arguments that do not fit the input schema (a missing required one, an
  unknown name, a literal of the wrong type, too many positional arguments);
- ``nesting``: a script nested too deeply to parse or walk (``"(" * 100000`` is a ``syntax`` finding,
  as CPython words it), instead of a ``RecursionError``.

``size`` (any language): a script over ``CODE_MODE_MAX_CODE_BYTES``, refused before it is parsed.

``check_python`` runs the analysis in a worker thread, so the event loop keeps serving other requests
while the checker walks the tree. Parsing itself holds the interpreter lock (CPython's parser does not
release it), which is why the size cap, not the thread, bounds how long a check can stall the others.

``VALIDATORS`` maps a canonical language to its host-side validator. Each runner's ``check`` decides what
``validate_code`` reports for it (the Python runners call ``check_python`` with the imports they allow,
``local`` adds the constructs its interpreter refuses; ``deno`` runs ``deno check``, see
``runners/_typecheck.py``).
"""

from __future__ import annotations

import ast
import builtins
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import anyio

from .stubs.index import StubIndex, ToolSpec, resolve_ref
from .stubs.names import SANDBOX_RESERVED, SERVER_EXTRAS

_UNCHECKED: Any = object()
_MAX_DEPTH = 8


@dataclass(frozen=True)
class Finding:
    line: int
    column: int
    kind: str
    """``syntax``, ``import``, ``unknown-server``, ``unknown-tool``, ``arguments``, ``nesting`` or ``size``."""
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Validator = Callable[[str, StubIndex, Sequence[str] | None], list[Finding]]
"""``(code, stub index, allowed imports or None for any)`` → findings."""


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNCHECKED


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
}


def schema_problems(
    value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str, depth: int = 0
) -> list[str]:
    """Why a literal ``value`` does not fit ``schema`` (type, enum, const, items, properties, required)."""
    if depth > _MAX_DEPTH:
        return []
    schema = resolve_ref(schema, root)
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            if any(not schema_problems(value, o, root, where, depth + 1) for o in options if isinstance(o, Mapping)):
                return []
            return [f"{where}: {value!r:.60} matches none of the allowed forms"]
    if "const" in schema and value != schema["const"]:
        return [f"{where} must be {schema['const']!r}, got {value!r:.60}"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and value not in enum:
        return [f"{where} must be one of {', '.join(repr(e) for e in enum)}, got {value!r:.60}"]
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    known = [k for k in kinds if k in _JSON_TYPES]
    if known and not any(_JSON_TYPES[k](value) for k in known):
        return [f"{where} must be {' or '.join(known)}, got {type(value).__name__} {value!r:.60}"]
    problems: list[str] = []
    if isinstance(value, list | tuple) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            problems += schema_problems(item, schema["items"], root, f"{where}[{i}]", depth + 1)
    if isinstance(value, dict):
        props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        assert isinstance(props, Mapping)
        for name in schema.get("required") or []:
            if isinstance(name, str) and name not in value:
                problems.append(f"{where} is missing the required key {name!r}")
        for name, item in value.items():
            if name in props and isinstance(props[name], Mapping):
                problems += schema_problems(item, props[name], root, f"{where}[{name!r}]", depth + 1)
            elif props and schema.get("additionalProperties") is False:
                problems.append(f"{where} has an unknown key {name!r} (allowed: {', '.join(props)})")
    return problems


def _suggest(name: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=2)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


class _PythonChecker(ast.NodeVisitor):
    def __init__(self, index: StubIndex, allowed_imports: Sequence[str] | None) -> None:
        self.index = index
        self.allowed = list(allowed_imports) if allowed_imports is not None else None
        self.findings: list[Finding] = []
        self.defined: set[str] = set(dir(builtins)) | SANDBOX_RESERVED
        self.namespaces = {s.namespace: s for s in index.servers}

    def add(self, node: ast.AST, kind: str, message: str) -> None:
        self.findings.append(Finding(getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1, kind, message))

    def collect_definitions(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
                self.defined.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.defined.add(node.name)
            elif isinstance(node, ast.arg):
                self.defined.add(node.arg)
            elif isinstance(node, ast.alias):
                self.defined.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.defined.add(node.name)
            elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
                self.defined.add(node.name)
            elif isinstance(node, ast.Global | ast.Nonlocal):
                self.defined.update(node.names)

    # imports
    def _check_import(self, node: ast.AST, module: str) -> None:
        if self.allowed is None:
            return
        from smolagents.local_python_executor import check_import_authorized

        if not check_import_authorized(module, self.allowed):
            top = sorted({m.split(".")[0] for m in self.allowed})
            self.add(node, "import", f"import of {module!r} is not allowed for this runner (allowed: {', '.join(top)})")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_import(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.add(node, "import", "relative imports are not allowed (a script is not a package)")
        elif node.module:
            self._check_import(node, node.module)

    # tool references
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and isinstance(node.value.ctx, ast.Load):
            name = node.value.id
            server = self.namespaces.get(name)
            if server is not None and name not in self.defined:
                if node.attr not in SERVER_EXTRAS and not any(t.func == node.attr for t in server.tools):
                    funcs = [t.func for t in server.tools]
                    self.add(
                        node,
                        "unknown-tool",
                        f"server {server.name!r} has no tool {node.attr!r}{_suggest(node.attr, funcs)}",
                    )
            elif server is None and name not in self.defined:
                self.add(
                    node.value,
                    "unknown-server",
                    f"{name!r} is not a connected server or a defined name"
                    f"{_suggest(name, list(self.namespaces))} (servers: {', '.join(self.namespaces) or 'none'})",
                )
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in self.namespaces
            and func.value.id not in self.defined
        ):
            spec = next((t for t in self.namespaces[func.value.id].tools if t.func == func.attr), None)
            if spec is not None:
                self._check_stub_call(node, spec)
        elif (
            isinstance(func, ast.Name) and func.id == "call_tool" and "call_tool" not in self.defined - SANDBOX_RESERVED
        ):
            self._check_call_tool(node)
        self.generic_visit(node)

    def _check_stub_call(self, node: ast.Call, spec: ToolSpec) -> None:
        where = spec.qualified
        by_ident = {p.ident: p for p in spec.params}
        required = [p.ident for p in spec.required]
        if any(isinstance(a, ast.Starred) for a in node.args):
            return
        if len(node.args) > len(required):
            self.add(node, "arguments", f"{where}() takes {len(required)} positional arguments, got {len(node.args)}")
        given = set(required[: len(node.args)])
        has_kwargs = False
        for kw in node.keywords:
            if kw.arg is None:
                has_kwargs = True
                continue
            param = by_ident.get(kw.arg)
            if param is None:
                self.add(kw, "arguments", f"{where}() has no parameter {kw.arg!r}{_suggest(kw.arg, list(by_ident))}")
                continue
            given.add(kw.arg)
            value = _literal(kw.value)
            if value is not _UNCHECKED:
                for problem in schema_problems(value, param.schema, spec.info.input_schema, kw.arg):
                    self.add(kw.value, "arguments", f"{where}(): {problem}")
        for i, arg in enumerate(node.args[: len(required)]):
            value = _literal(arg)
            param = by_ident[required[i]]
            if value is not _UNCHECKED:
                for problem in schema_problems(value, param.schema, spec.info.input_schema, param.ident):
                    self.add(arg, "arguments", f"{where}(): {problem}")
        missing = [r for r in required if r not in given]
        if missing and not has_kwargs:
            self.add(node, "arguments", f"{where}() is missing required argument(s): {', '.join(missing)}")

    def _check_call_tool(self, node: ast.Call) -> None:
        args = list(node.args)
        keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        server_node = args[0] if args else keywords.get("server")
        tool_node = args[1] if len(args) > 1 else keywords.get("tool")
        arguments_node = args[2] if len(args) > 2 else keywords.get("arguments")
        if server_node is None or tool_node is None:
            return
        server, tool = _literal(server_node), _literal(tool_node)
        if not isinstance(server, str) or not isinstance(tool, str):
            return
        server_spec = self.index.server(server)
        if server_spec is None:
            names = [s.name for s in self.index.servers]
            self.add(server_node, "unknown-server", f"call_tool: no server {server!r}{_suggest(server, names)}")
            return
        spec = self.index.tool(server, tool)
        if spec is None:
            names = [t.name for t in server_spec.tools]
            self.add(
                tool_node,
                "unknown-tool",
                f"call_tool: server {server_spec.name!r} has no tool {tool!r}{_suggest(tool, names)}",
            )
            return
        arguments = _literal(arguments_node) if arguments_node is not None else {}
        if isinstance(arguments, dict):
            assert arguments_node is not None or not arguments
            target = arguments_node or node
            for problem in schema_problems(arguments, spec.info.input_schema, spec.info.input_schema, "arguments"):
                self.add(target, "arguments", f"call_tool({server!r}, {tool!r}): {problem}")


_TOO_DEEP = "the script is nested too deeply to {what} ({error}); split the deepest expression into named steps"


def validate_python(code: str, index: StubIndex, allowed_imports: Sequence[str] | None) -> list[Finding]:
    """Every finding for a Python script, sorted by position."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return [Finding(exc.lineno or 1, exc.offset or 1, "syntax", exc.msg)]
    except (RecursionError, MemoryError) as exc:  # CPython's parser runs out of stack on deep nesting
        return [Finding(1, 1, "nesting", _TOO_DEEP.format(what="parse", error=type(exc).__name__))]
    checker = _PythonChecker(index, allowed_imports)
    try:
        checker.collect_definitions(tree)
        checker.visit(tree)
    except RecursionError:  # a tree CPython parses can still be deeper than the visitor's recursion limit
        return [Finding(1, 1, "nesting", _TOO_DEEP.format(what="check", error="RecursionError"))]
    unique = dict.fromkeys(checker.findings)
    return sorted(unique, key=lambda f: (f.line, f.column))


VALIDATORS: dict[str, Validator] = {"python": validate_python}
"""Validators by canonical language; add one per language that has a checker."""


def validate_code(language: str, code: str, index: StubIndex, allowed_imports: Sequence[str] | None) -> dict[str, Any]:
    """The ``validate_code`` answer: ``valid`` and every finding (``supported: false`` without a checker)."""
    from .languages import LANGUAGE_ALIASES

    lang = LANGUAGE_ALIASES.get(language.strip().lower(), language.strip().lower())
    validator = VALIDATORS.get(lang)
    if validator is None:
        return {
            "language": lang,
            "supported": False,
            "valid": None,
            "findings": [],
            "message": f"validate_code does not support {language!r} yet (supported: {', '.join(VALIDATORS)})",
        }
    findings = validator(code, index, allowed_imports)
    return {"language": lang, "supported": True, "valid": not findings, "findings": [f.to_json() for f in findings]}


def code_size(code: str) -> int:
    """The script's size in UTF-8 bytes (lone surrogates, which JSON can carry, count as three)."""
    return len(code.encode("utf-8", "surrogatepass"))


def oversize(language: str, code: str, max_bytes: int) -> dict[str, Any] | None:
    """The ``validate_code`` answer for a script over ``max_bytes`` (a ``size`` finding), else ``None``."""
    if len(code) <= max_bytes // 4 or (size := code_size(code)) <= max_bytes:  # 4: the most bytes per character
        return None
    message = (
        f"the script is {size:,} bytes; validate_code checks at most {max_bytes:,} "
        "(CODE_MODE_MAX_CODE_BYTES): split it, or move data into files or tool calls"
    )
    finding = Finding(1, 1, "size", message)
    return {"language": language, "supported": True, "valid": False, "findings": [finding.to_json()]}


async def check_python(
    code: str, index: StubIndex, allowed_imports: Sequence[str] | None, *, max_bytes: int
) -> dict[str, Any]:
    """``validate_code`` for Python, off the event loop: a ``size`` finding over ``max_bytes``, else the
    analysis in a worker thread (a cancelled call returns at once; the thread finishes on its own)."""
    refused = oversize("python", code, max_bytes)
    if refused is not None:
        return refused
    return await anyio.to_thread.run_sync(validate_code, "python", code, index, allowed_imports, abandon_on_cancel=True)
