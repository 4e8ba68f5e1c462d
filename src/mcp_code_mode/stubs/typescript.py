"""JSON Schema → TypeScript declarations: one interface per argument object, one global object per server.

The text is a global declaration file (no imports or exports): ``get_tool_stubs`` shows it to a model,
and ``runners._typecheck.check_typescript`` type-checks a script against it. The sandbox defines the same
globals at run time from the bundle's ``functions`` (namespace → function names): each function sends
``callTool(namespace, function, args)`` over the bridge, and the host maps both names back to the
server and the tool, so declarations and behaviour come from one ``StubIndex``.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .index import ServerSpec, StubIndex, ToolSpec, ref_name, resolve_ref
from .names import JS_RESERVED, SERVER_EXTRAS, TS_TYPE_RESERVED, pascal, singular
from .text import comment_text, split_top

HEADER = """\
/**
 * Tool stubs of mcp-code-mode for JavaScript and TypeScript. In the sandbox they are already defined
 * as globals: call them, do not import them. Every tool function returns a Promise: `await` it.
 *
 * callTool(server, tool, args) calls any tool by its original names; a failing tool throws ToolError.
 * A result is the tool's structured content where it has one, else its text (parsed when it is JSON).
 */

/** A downstream tool failed; `message` is the server's message. */
declare class ToolError extends Error {
  /** The server's name in mcp_servers.json. */
  readonly server: string | null;
  /** The tool's name on that server. */
  readonly tool: string | null;
}

/** Call any tool by its server and tool names, e.g. `await callTool("filesystem", "read_text_file", { path })`. */
declare function callTool(server: string, tool: string, args?: object): Promise<any>;

/** Tell the client how far the script is (MCP progress), e.g. `reportProgress(3, 10, "page 3")`. */
declare function reportProgress(done: number, total?: number | null, message?: string | null): void;
/** The same as `reportProgress`. */
declare function report_progress(done: number, total?: number | null, message?: string | null): void;
/** Add an image to the result: the path of a png, jpeg, gif or webp file in the workspace, or a tool's image value. */
declare function show(image: string | object): void;

/** What every server's object has besides its tools (MCP's results; a tool of the same name wins). */
interface ServerExtras {
  list_resources(): Promise<{ resources: any[] }>;
  read_resource(uri: string): Promise<{ contents: any[] }>;
  list_prompts(): Promise<{ prompts: any[] }>;
  get_prompt(name: string, args?: Record<string, string>): Promise<any>;
}
"""

# Names the header declares; generated types must not take them.
HEADER_NAMES = frozenset(
    {"ToolError", "callTool", "reportProgress", "report_progress", "require", "show", "ServerExtras"}
)

_PRIMITIVES = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}
_MAX_DEPTH = 6
_WIDTH = 100
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


def jsdoc(text: str, indent: str = "") -> list[str]:
    """``text`` as a JSDoc block (one line when short), long lines wrapped, with ``*/`` made harmless
    and invisible characters escaped (``text.comment_text``)."""
    lines: list[str] = []
    for line in comment_text(text).strip().splitlines():
        line = line.rstrip()
        if len(line) <= _WIDTH:
            lines.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        lines.extend(
            textwrap.wrap(
                line.lstrip(),
                _WIDTH,
                initial_indent=lead,
                subsequent_indent=lead,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    if not lines:
        return []
    if len(lines) == 1 and len(lines[0]) <= _WIDTH - 8:
        return [f"{indent}/** {lines[0]} */"]
    body = [f"{indent} *" + (f" {line}" if line else "") for line in lines]
    return [f"{indent}/**", *body, f"{indent} */"]


def property_key(name: str) -> str:
    """``name`` as a member name: itself when it is an identifier, else a JSON (and so JavaScript) string."""
    return name if _IDENT.fullmatch(name) else json.dumps(name)


def method_key(name: str) -> str:
    """A method's name in an object type; a reserved word is quoted (``new(...)`` would declare a constructor)."""
    return json.dumps(name) if name in JS_RESERVED or not _IDENT.fullmatch(name) else name


def _schema(value: object) -> Mapping[str, Any]:
    """A subschema as a mapping: anything else (``true``, a list, a string) describes nothing."""
    return value if isinstance(value, Mapping) else {}


def _required(schema: Mapping[str, Any]) -> set[str]:
    names = schema.get("required")
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


@dataclass
class _Types:
    """Renders schema types, collecting the interfaces they need (named after the tool and path)."""

    root: Mapping[str, Any]
    prefix: str
    taken: set[str]
    defs: list[str] = field(default_factory=list)
    _ref_names: dict[str, str] = field(default_factory=dict)

    def render(self, schema: object, hint: str, depth: int = 0) -> str:
        schema = _schema(schema)
        if depth > _MAX_DEPTH:
            return "any"
        named = ref_name(schema)
        if named is not None and named in self._ref_names:
            return self._ref_names[named]
        schema = resolve_ref(schema, self.root)
        if "const" in schema:
            return _literal(schema["const"]) if _is_literal(schema["const"]) else "any"
        enum = schema.get("enum")
        if isinstance(enum, list) and enum and all(_is_literal(v) for v in enum):
            return _union(_literal(v) for v in enum)
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return _union(self.render(o, hint, depth + 1) for o in options)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            parts = [self.render(o, hint, depth + 1) for o in all_of]
            return parts[0] if len(parts) == 1 else " & ".join(_group(p) for p in parts)
        kind = schema.get("type")
        if isinstance(kind, list):
            return _union(self.render({**schema, "type": k}, hint, depth + 1) for k in kind)
        if kind is None and "properties" in schema:
            kind = "object"
        if not isinstance(kind, str | None):
            return "any"
        if kind in _PRIMITIVES:
            return _PRIMITIVES[kind]
        if kind == "array":
            items = schema.get("items")
            inner = self.render(items, singular(hint), depth + 1) if isinstance(items, Mapping) else "any"
            return f"{_group(inner)}[]"
        if kind == "object":
            props = schema.get("properties")
            if isinstance(props, Mapping) and props:
                name = self.interface(schema, named or hint, depth)
                if named is not None:
                    self._ref_names[named] = name
                return name
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping) and extra:
                return f"Record<string, {self.render(extra, hint, depth + 1)}>"
            return "Record<string, any>"
        return "any"

    def name_for(self, hint: str) -> str:
        base = pascal(hint) if hint[:1].isupper() else self.prefix + pascal(hint)
        name, n = base, 2
        while name in self.taken or name in HEADER_NAMES or name in TS_TYPE_RESERVED:
            name, n = f"{base}{n}", n + 1
        self.taken.add(name)
        return name

    def interface(self, schema: Mapping[str, Any], hint: str, depth: int, *, top: bool = False) -> str:
        """An interface for an object schema; ``top`` means the tool's arguments (members named by key)."""
        name = self.name_for(hint)
        props = _schema(schema.get("properties"))
        required = _required(schema)
        lines = jsdoc(str(schema.get("description") or ""))
        lines.append(f"interface {name} {{")
        for key, sub in props.items():
            sub_schema = _schema(sub)
            annotation = self.render(sub_schema, key if top else f"{hint}_{key}", depth + 1)
            doc = str(sub_schema.get("description") or "").strip()
            if "default" in sub_schema:
                doc = (doc + "\n" if doc else "") + f"@default {json.dumps(sub_schema['default'], default=repr)}"
            lines.extend(jsdoc(doc, "  "))
            lines.append(f"  {property_key(key)}{'' if key in required else '?'}: {annotation};")
        lines.append("}")
        self.defs.append("\n".join(lines))
        return name


def _is_literal(value: object) -> bool:
    """A value ``json.dumps`` writes as a TypeScript literal type (``NaN`` and ``Infinity`` are not types)."""
    return isinstance(value, str | int | bool) or value is None or (isinstance(value, float) and math.isfinite(value))


def _literal(value: object) -> str:
    return json.dumps(value)


def _group(part: str) -> str:
    """Parenthesise a union or intersection where it is an operand (``(A | B)[]``)."""
    return f"({part})" if len(split_top(part, " | ")) > 1 or len(split_top(part, " & ")) > 1 else part


def _union(parts: Iterable[str]) -> str:
    seen: list[str] = []
    for part in parts:
        for piece in split_top(part, " | "):
            if piece not in seen:
                seen.append(piece)
    if "any" in seen:
        return "any"
    if "null" in seen:
        seen = [p for p in seen if p != "null"] + ["null"]
    return " | ".join(seen) or "any"


@dataclass(frozen=True)
class RenderedTool:
    """A tool's declaration: the interfaces it needs and its member line in its server's object."""

    spec: ToolSpec
    types: tuple[str, ...]
    member: str
    signature: str
    return_type: str

    @property
    def summary(self) -> str:
        """``namespace.func(args: X): Promise<Y>``: one line for discovery results."""
        return f"{self.spec.qualified}({self.signature}): {self.return_type}"


def render_tool(spec: ToolSpec, taken: set[str] | None = None) -> RenderedTool:
    """Render one tool's member and the types it uses; ``taken`` holds type names already used."""
    taken = taken if taken is not None else set()
    types = _Types(root=spec.info.input_schema, prefix=pascal(spec.func), taken=taken)
    if not spec.params:
        signature = "args?: Record<string, never>"
    else:
        args_type = types.interface(spec.info.input_schema, "args", 0, top=True)
        signature = f"args{'' if spec.required else '?'}: {args_type}"

    result = "any"
    out = spec.info.output_schema
    if out:
        out_types = _Types(root=out, prefix="", taken=taken)
        result = out_types.render(out, pascal(spec.func) + "Result")
        types.defs.extend(out_types.defs)
    return_type = f"Promise<{result}>"
    member = "\n".join([*jsdoc(_doc(spec), "  "), f"  {method_key(spec.func)}({signature}): {return_type};"])
    return RenderedTool(spec=spec, types=tuple(types.defs), member=member, signature=signature, return_type=return_type)


def _doc(spec: ToolSpec) -> str:
    parts = [spec.info.description or f"Call {spec.server}'s tool {spec.name!r}."]
    if spec.func != spec.name or spec.namespace != spec.server:
        parts.append(f"(Server {spec.server!r}, tool {spec.name!r}.)")
    return "\n\n".join(parts)


def render_server(server: ServerSpec, tools: Iterable[ToolSpec] | None = None, taken: set[str] | None = None) -> str:
    """The declaration of one server's object with the given tools (all by default), preceded by their types."""
    taken = taken if taken is not None else set()
    rendered = [render_tool(t, taken) for t in (server.tools if tools is None else tools)]
    summary = server.description or f"Tools of the MCP server {server.name!r}."
    taken_names = [f'"{t.func}"' for t in server.tools if t.func in SERVER_EXTRAS]
    extras = f"Omit<ServerExtras, {' | '.join(taken_names)}>" if taken_names else "ServerExtras"
    head = [*jsdoc(f"{summary} ({len(server.tools)} tools)"), f"declare const {server.namespace}: {extras} & {{"]
    body = "\n\n".join(r.member for r in rendered)
    block = "\n".join(head) + ("\n" + body + "\n" if body else "\n") + "};"
    return "\n\n".join([*(d for r in rendered for d in r.types), block])


def render_module(index: StubIndex, selection: Mapping[str, Iterable[ToolSpec]] | None = None) -> str:
    """The full declaration file, or only ``selection`` (server name → tools) of it."""
    taken: set[str] = {s.namespace for s in index.servers}
    blocks = [HEADER]
    for server in index.servers:
        if selection is not None and server.name not in selection:
            continue
        tools = None if selection is None else selection[server.name]
        blocks.append(render_server(server, tools, taken))
    return "\n\n".join(block.rstrip() for block in blocks) + "\n"
