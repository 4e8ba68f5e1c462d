"""The naming layer between downstream tools and stubs: namespaces, function names, parameters.

Built once per tool-index version and shared by the Python and TypeScript renderers, the bridge
(which maps a stub call back to a server and tool) and ``validate_code``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..downstream.tools import ToolInfo
from .names import MEMBER_RESERVED, PARAM_RESERVED, SERVER_RESERVED, assign_identifiers

NO_DEFAULT: Any = object()
_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Param:
    """One top-level property of a tool's input schema."""

    name: str
    """The property's name in the schema (what is sent)."""
    ident: str
    """The keyword argument's name in stubs."""
    schema: Mapping[str, Any]
    required: bool
    description: str
    default: Any = NO_DEFAULT

    @property
    def has_scalar_default(self) -> bool:
        """Whether the default can be the stub's default value (``repr`` writes it as a literal)."""
        if isinstance(self.default, float):
            return math.isfinite(self.default)
        return self.default is not NO_DEFAULT and isinstance(self.default, _SCALARS)


@dataclass(frozen=True)
class ToolSpec:
    """A tool as it appears in the sandbox."""

    info: ToolInfo
    namespace: str
    func: str
    params: tuple[Param, ...]

    @property
    def server(self) -> str:
        return self.info.server

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def qualified(self) -> str:
        """``namespace.func``: how a script spells it."""
        return f"{self.namespace}.{self.func}"

    @property
    def required(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.required)

    @property
    def optional(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.required)


@dataclass(frozen=True)
class ServerSpec:
    name: str
    namespace: str
    description: str | None
    tools: tuple[ToolSpec, ...]


@dataclass(frozen=True)
class StubIndex:
    """Every server's namespace and every tool's function, with lookups both ways."""

    servers: tuple[ServerSpec, ...]
    unavailable: Mapping[str, str] = field(default_factory=dict[str, str])
    """Namespace → why that server is down (failed to start, disabled): its namespace in the sandbox raises
    that reason on every tool, and a runner's run message can carry it (``"unavailable"``)."""
    tenant: str | None = None
    """Set on a tenant's view (``only``): whose servers these are, for the refusals that list them."""
    _by_namespace: dict[str, ServerSpec] = field(default_factory=dict, repr=False)
    _by_name: dict[str, ServerSpec] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        servers: Sequence[tuple[str, str | None]],
        tools: Iterable[ToolInfo],
        unavailable: Mapping[str, str] | None = None,
    ) -> StubIndex:
        """``servers`` is ``(name, description)`` in config order; ``tools`` are the ready servers' tools;
        ``unavailable`` maps the name of each server that is down to the reason (its error)."""
        by_server: dict[str, list[ToolInfo]] = {name: [] for name, _ in servers}
        for tool in tools:
            by_server.setdefault(tool.server, []).append(tool)
        namespaces = assign_identifiers(by_server, SERVER_RESERVED)
        descriptions = dict(servers)
        specs: list[ServerSpec] = []
        for server, infos in by_server.items():
            funcs = assign_identifiers((t.name for t in infos), MEMBER_RESERVED)
            tool_specs = tuple(
                ToolSpec(info=t, namespace=namespaces[server], func=funcs[t.name], params=tuple(params_of(t)))
                for t in infos
            )
            specs.append(ServerSpec(server, namespaces[server], descriptions.get(server), tool_specs))
        down = {namespaces[name]: reason for name, reason in (unavailable or {}).items() if name in namespaces}
        index = cls(servers=tuple(specs), unavailable=down)
        index._by_namespace.update({s.namespace: s for s in specs})
        index._by_name.update({s.name: s for s in specs})
        return index

    def only(self, names: Collection[str], tenant: str) -> StubIndex:
        """A tenant's view: the servers named (by server name) and nothing of the others, each keeping the
        namespace and functions it has in the whole index (what scripts and stubs spell stays the same)."""
        specs = tuple(s for s in self.servers if s.name in names)
        kept = {s.namespace for s in specs}
        down = {ns: reason for ns, reason in self.unavailable.items() if ns in kept}
        index = StubIndex(servers=specs, unavailable=down, tenant=tenant)
        index._by_namespace.update({s.namespace: s for s in specs})
        index._by_name.update({s.name: s for s in specs})
        return index

    def known(self) -> str:
        """The servers a refusal lists: ``configured: a, b``, or for a tenant's view ``tenant acme's servers: a``."""
        names = ", ".join(s.name for s in self.servers) or "none"
        return f"tenant {self.tenant}'s servers: {names}" if self.tenant is not None else f"configured: {names}"

    def unavailable_reason(self, server: ServerSpec) -> str | None:
        """Why ``server`` is down, or ``None`` when it was not reported down."""
        return self.unavailable.get(server.namespace)

    def server(self, name_or_namespace: str) -> ServerSpec | None:
        return self._by_name.get(name_or_namespace) or self._by_namespace.get(name_or_namespace)

    def tools(self) -> list[ToolSpec]:
        return [t for s in self.servers for t in s.tools]

    def tool(self, server: str, name: str) -> ToolSpec | None:
        """Look a tool up by server name or namespace, and by tool name or function name."""
        spec = self.server(server)
        if spec is None:
            return None
        return next((t for t in spec.tools if t.name == name), None) or next(
            (t for t in spec.tools if t.func == name), None
        )


def params_of(tool: ToolInfo) -> list[Param]:
    """The tool's top-level parameters, required ones first (in schema order), then optional ones."""
    schema = tool.input_schema
    props = schema.get("properties")
    if not isinstance(props, dict):
        return []
    names = schema.get("required")
    required = {r for r in names if isinstance(r, str)} if isinstance(names, list) else set()
    idents = assign_identifiers(props, PARAM_RESERVED)
    params: list[Param] = []
    for name, sub in props.items():
        sub_schema: Mapping[str, Any] = sub if isinstance(sub, dict) else {}
        params.append(
            Param(
                name=name,
                ident=idents[name],
                schema=sub_schema,
                required=name in required,
                description=str(sub_schema.get("description") or "").strip(),
                default=sub_schema.get("default", NO_DEFAULT),
            )
        )
    return [p for p in params if p.required] + [p for p in params if not p.required]


def resolve_ref(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow a local ``$ref`` (``#/$defs/X``, ``#/definitions/X``); anything else is returned unchanged."""
    seen: set[str] = set()
    while isinstance(ref := schema.get("$ref"), str) and ref.startswith("#/") and ref not in seen:
        seen.add(ref)
        node: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return {}
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def ref_name(schema: Mapping[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) and ref.startswith("#/") else None
