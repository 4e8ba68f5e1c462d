"""JSON Schema → Python stubs: one class per server, one static method per tool.

The text this module renders is the code that defines the stubs inside the sandbox (the worker
executes it), so what ``get_tool_stubs`` shows a model is exactly what its script calls. A name that is
none of a server's tools raises the sandbox's ToolError with the dispatcher's text (``server 'x' has no
tool 'y' (its tools: ...)``): the class's type (``_namespace``) answers only for missing, public names.
"""

from __future__ import annotations

import json
import keyword
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .index import NO_DEFAULT, ServerSpec, StubIndex, ToolSpec, ref_name, resolve_ref
from .names import PY_TYPE_RESERVED, pascal, singular
from .text import py_doc, py_string, split_top

HEADER = '''\
"""Tool stubs of mcp-code-mode. In the sandbox they are already defined: call them, do not import them.

call_tool(server, tool, arguments) calls any tool by its original names; a failing tool raises ToolError.
A result is the tool's structured content where it has one, else its text (parsed when it is JSON).
parallel(lambda: srv.tool(x=i) for i in items) makes the calls at once: results in order; the first failed
call's ToolError is raised once all are answered. Under cpython and pyodide, asyncio.gather of stub calls too.
report_progress(done, total=None, message=None) tells the client how far the script is (MCP progress).
Every server also has list_resources(), read_resource(uri), list_prompts() and get_prompt(name, arguments)
(MCP's results; a tool of the same name wins). show(image_or_path) adds an image to the result.
"""
from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict
'''

NAMESPACE_HELPER = '''\
def _namespace(server: str, *tools: str) -> Any:
    """Makes a class a server's namespace: a name that is none of its tools raises ToolError listing them."""
    listed = ", ".join(tools) or "none"

    class _Tools(type):
        def __getattr__(cls, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            if name in _SERVER_CALLS:  # no tool has this name: the server's resources or prompts
                return _server_call(server, name)
            # Also an AttributeError: hasattr(server, "tool") answers False, as for any missing name.
            unknown = type("ToolError", (_tool_error(), AttributeError), {})
            raise unknown(f"server {server!r} has no tool {name!r} (its tools: {listed})", server, name)

    def namespace(cls: type) -> Any:
        body = {k: v for k, v in vars(cls).items() if k not in ("__dict__", "__weakref__")}
        return _Tools(cls.__name__, cls.__bases__, body)

    return namespace


_SERVER_CALLS = {
    "list_resources": ("resources/list", ()),
    "read_resource": ("resources/read", ("uri",)),
    "list_prompts": ("prompts/list", ()),
    "get_prompt": ("prompts/get", ("name", "arguments")),
}


def _server_call(server: str, name: str) -> Any:
    op, params = _SERVER_CALLS[name]

    def call(*args: Any, **kwargs: Any) -> Any:
        if len(args) > len(params) or set(kwargs) - set(params):
            raise TypeError(f"{name}() takes {', '.join(params) or 'no arguments'}")
        given = {**dict(zip(params, args)), **kwargs}
        optional = {"arguments": given.pop("arguments", None)}
        return _call(server, op, given, optional)

    call.__name__ = name
    return call


def _tool_error() -> Any:
    """The sandbox's ToolError (so that `except ToolError` catches it), else RuntimeError."""
    import sys

    for found in (
        globals().get("ToolError"),
        getattr(sys.modules.get("cm_runtime"), "ToolError", None),
        getattr(sys.modules.get("cm_protocol"), "ToolError", None),
        getattr(_call, "__globals__", {}).get("ToolError"),
    ):
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    return RuntimeError
'''
"""Defined in every stub module: the decorator of a live server's class, and the ToolError the helpers raise."""

UNAVAILABLE_HELPER = '''\
class _Unavailable(type):
    """The type of a server's namespace while the server is down: any of its tools raises ToolError saying why."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        server, reason = cls.__dict__["_server"], cls.__dict__["_reason"]
        raise _tool_error()(f"server {server!r} is not available: {reason}", server, name)
'''
"""Defined in the stubs only when a server is down: the namespace object of each such server."""

MAX_REASON_CHARS = 500
"""A down server's reason is cut to this many characters in its stub."""

_PRIMITIVES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
_MAX_DEPTH = 6


def _docstring_literal(text: str, prefix: str, closing_line: bool = False) -> str:
    """``text`` as a triple-quoted docstring indented by ``prefix``; any text compiles (see ``text.py_doc``)."""
    body = py_doc(text) + ("\n" if closing_line else "")
    return "\n".join(prefix + line if line.strip() else "" for line in f'"""{body}"""'.split("\n"))


def _schema(value: object) -> Mapping[str, Any]:
    """A subschema as a mapping: anything else (``true``, a list, a string) describes nothing."""
    return value if isinstance(value, Mapping) else {}


def _required(schema: Mapping[str, Any]) -> set[str]:
    names = schema.get("required")
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _text(value: object) -> str:
    return str(value or "").strip()


@dataclass
class _Types:
    """Renders schema types, collecting the TypedDicts they need (named after the tool and path)."""

    root: Mapping[str, Any]
    prefix: str
    taken: set[str]
    defs: list[str] = field(default_factory=list)
    _ref_names: dict[str, str] = field(default_factory=dict)

    def render(self, schema: object, hint: str, depth: int = 0) -> str:
        schema = _schema(schema)
        if depth > _MAX_DEPTH:
            return "Any"
        named = ref_name(schema)
        if named is not None and named in self._ref_names:
            return self._ref_names[named]
        schema = resolve_ref(schema, self.root)
        if "const" in schema:
            return f"Literal[{_literal(schema['const'])}]" if _is_literal(schema["const"]) else "Any"
        enum = schema.get("enum")
        if isinstance(enum, list) and enum and all(_is_literal(v) for v in enum):
            return f"Literal[{', '.join(_literal(v) for v in enum)}]"
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return _union(self.render(o, hint, depth + 1) for o in options)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1:
            return self.render(all_of[0], hint, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            return _union(self.render({**schema, "type": k}, hint, depth + 1) for k in kind)
        if kind is None and "properties" in schema:
            kind = "object"
        if not isinstance(kind, str | None):
            return "Any"
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind]
        if kind == "array":
            items = schema.get("items")
            inner = self.render(items, singular(hint), depth + 1) if isinstance(items, Mapping) else "Any"
            return f"list[{inner}]"
        if kind == "object":
            props = schema.get("properties")
            if isinstance(props, Mapping) and props:
                name = self._typed_dict(schema, named or hint, depth)
                if named is not None:
                    self._ref_names[named] = name
                return name
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping) and extra:
                return f"dict[str, {self.render(extra, hint, depth + 1)}]"
            return "dict[str, Any]"
        return "Any"

    def _typed_dict(self, schema: Mapping[str, Any], hint: str, depth: int) -> str:
        base = pascal(hint) if hint[:1].isupper() else self.prefix + pascal(hint)
        name, n = base, 2
        while name in self.taken or name in PY_TYPE_RESERVED:
            name, n = f"{base}{n}", n + 1
        self.taken.add(name)
        props: Mapping[str, Any] = schema["properties"]
        required = _required(schema)
        fields: list[tuple[str, str, str]] = []
        for key, sub in props.items():
            sub_schema = _schema(sub)
            annotation = self.render(sub_schema, f"{hint}_{key}", depth + 1)
            if key not in required:
                annotation = f"NotRequired[{annotation}]"
            fields.append((key, annotation, _text(sub_schema.get("description"))))
        described = _text(schema.get("description"))
        if all(_is_field_name(k) for k, _, _ in fields):
            lines = [f"class {name}(TypedDict):"]
            if described:
                lines.append(_docstring_literal(described, "    "))
            for key, annotation, doc in fields:
                lines.append(f"    {key}: {annotation}")
                if doc:
                    lines.append(_docstring_literal(doc, "    "))
            text = "\n".join(lines)
        else:
            body = ", ".join(f"{py_string(k)}: {a}" for k, a, _ in fields)
            text = f"{name} = TypedDict({name!r}, {{{body}}})"
        self.defs.append(text)
        return name


def _is_field_name(key: str) -> bool:
    """Whether ``key`` can be a field of a class-syntax TypedDict and stay ``key``: an ASCII identifier
    (others are NFKC-normalised), not a keyword, not ``__x`` (mangled in a class body)."""
    return key.isascii() and key.isidentifier() and not keyword.iskeyword(key) and not key.startswith("__")


def _is_literal(value: object) -> bool:
    """A value ``repr`` writes as a Python literal (``nan`` and ``inf`` are names, not literals)."""
    return isinstance(value, str | int | bool) or value is None or (isinstance(value, float) and math.isfinite(value))


def _literal(value: object) -> str:
    return repr(value)


def _union(parts: Iterable[str]) -> str:
    seen: list[str] = []
    for part in parts:
        for piece in split_top(part, " | "):
            if piece not in seen:
                seen.append(piece)
    if "Any" in seen:
        return "Any"
    if "None" in seen:
        seen = [p for p in seen if p != "None"] + ["None"]
    return " | ".join(seen) or "Any"


@dataclass(frozen=True)
class RenderedTool:
    """A tool's stub: the TypedDicts it needs and its method, indented for its server class."""

    spec: ToolSpec
    types: tuple[str, ...]
    method: str
    signature: str
    return_type: str

    @property
    def summary(self) -> str:
        """``namespace.func(signature) -> return``: one line for discovery results."""
        return f"{self.spec.qualified}({self.signature}) -> {self.return_type}"


def render_tool(spec: ToolSpec, taken: set[str] | None = None) -> RenderedTool:
    """Render one tool's method and the types it uses; ``taken`` holds type names already used."""
    taken = taken if taken is not None else set()
    types = _Types(root=spec.info.input_schema, prefix=pascal(spec.func), taken=taken)
    parts = [f"{p.ident}: {types.render(p.schema, p.name)}" for p in spec.required]
    if spec.optional:
        parts.append("*")
    for p in spec.optional:
        annotation = types.render(p.schema, p.name)
        if p.has_scalar_default:
            parts.append(f"{p.ident}: {annotation} = {p.default!r}")
        else:
            parts.append(f"{p.ident}: {_union([annotation, 'None'])} = None")
    signature = ", ".join(parts)

    return_type = "Any"
    out = spec.info.output_schema
    if out:
        out_types = _Types(root=out, prefix="", taken=taken)
        return_type = out_types.render(out, pascal(spec.func) + "Result")
        types.defs.extend(out_types.defs)

    required_map = ", ".join(f"{py_string(p.name)}: {p.ident}" for p in spec.required)
    optional_map = ", ".join(f"{py_string(p.name)}: {p.ident}" for p in spec.optional)
    call = f"return _call({py_string(spec.server)}, {py_string(spec.name)}, {{{required_map}}}, {{{optional_map}}})"
    method = "\n".join(
        [
            "    @staticmethod",
            f"    def {spec.func}({signature}) -> {return_type}:",
            _docstring_literal(_docstring(spec), "        ", closing_line=True),
            f"        {call}",
        ]
    )
    return RenderedTool(spec=spec, types=tuple(types.defs), method=method, signature=signature, return_type=return_type)


def _docstring(spec: ToolSpec) -> str:
    parts = [spec.info.description or f"Call {spec.server}'s tool {spec.name!r}."]
    if spec.func != spec.name or spec.namespace != spec.server:
        parts.append(f"(Server {spec.server!r}, tool {spec.name!r}.)")
    if spec.params:
        lines = ["Args:"]
        for p in spec.params:
            line = f"    {p.ident}: {p.description or ('required' if p.required else 'optional')}"
            if p.name != p.ident:
                line += f" (sent as {p.name!r})"
            if p.default is not NO_DEFAULT and not p.has_scalar_default:
                line += f" Default: {json.dumps(p.default)}."
            lines.append(line)
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def render_server(server: ServerSpec, tools: Iterable[ToolSpec] | None = None, taken: set[str] | None = None) -> str:
    """The class of one server with the given tools (all of them by default), preceded by their types."""
    taken = taken if taken is not None else set()
    rendered = [render_tool(t, taken) for t in (server.tools if tools is None else tools)]
    summary = server.description or f"Tools of the MCP server {server.name!r}."
    names = "".join(f", {py_string(t.name)}" for t in server.tools)
    head = [
        f"@_namespace({py_string(server.name)}{names})",
        f"class {server.namespace}:",
        _docstring_literal(f"{summary} ({len(server.tools)} tools)", "    "),
    ]
    body = "\n\n".join(r.method for r in rendered) if rendered else "    pass"
    types = [d for r in rendered for d in r.types]
    return "\n\n\n".join([*types, "\n".join(head) + "\n\n" + body])


def render_unavailable(server: ServerSpec, reason: str) -> str:
    """The namespace of a server that is down: a class whose every tool raises ToolError with ``reason``."""
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    doc = _docstring_literal(f"The MCP server {server.name!r} is not available: {reason}", "    ")
    return "\n".join(
        [
            f"class {server.namespace}(metaclass=_Unavailable):",
            doc,
            "",
            f"    _server = {py_string(server.name)}",
            f"    _reason = {py_string(reason)}",
        ]
    )


def render_module(index: StubIndex, selection: Mapping[str, Iterable[ToolSpec]] | None = None) -> str:
    """The full stub module, or only ``selection`` (server name → tools) of it."""
    taken: set[str] = {s.namespace for s in index.servers}
    blocks = [HEADER]
    chosen = [s for s in index.servers if selection is None or s.name in selection]
    down = [(s, reason) for s in chosen if (reason := index.unavailable_reason(s)) is not None]
    if chosen:
        blocks.append(NAMESPACE_HELPER)
    if down:
        blocks.append(UNAVAILABLE_HELPER)
    for server, reason in down:
        blocks.append(render_unavailable(server, reason))
    for server in chosen:
        if index.unavailable_reason(server) is not None:
            continue
        tools = None if selection is None else selection[server.name]
        blocks.append(render_server(server, tools, taken))
    return "\n\n".join(blocks).rstrip() + "\n"
