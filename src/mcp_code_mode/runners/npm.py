"""npm packages for the ``deno`` runner: which names are allowed, and which a script needs.

``checker(whitelist)`` is the allow-list hook: it maps requested names to the npm specifiers to load
(the whitelist's default range unless the script names a version), or raises ``PackageError`` naming
the unknown ones. ``plan`` reads a script's imports and ``require`` calls so that the packages it names
are in Deno's cache before it runs; the worker runs with ``--cached-only``, so a package that is not
there cannot be loaded at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..errors import PackageError, UnsupportedError
from ..packages import Whitelist

NODE_BUILTINS: frozenset[str] = frozenset(
    """assert assert/strict async_hooks buffer child_process cluster console constants crypto dgram
    diagnostics_channel dns dns/promises domain events fs fs/promises http http2 https inspector module net os
    path path/posix path/win32 perf_hooks process punycode querystring readline readline/promises repl stream
    stream/consumers stream/promises stream/web string_decoder sys timers timers/promises tls trace_events tty
    url util util/types v8 vm wasi worker_threads zlib""".split()
)
"""Node.js built-in modules; scripts may name them with or without ``node:`` (``require('fs')``)."""

_SPECIFIER = re.compile(
    r"""(?:\bfrom\s*|\bimport\s+)(["'])([^"'\n]+)\1"""  # import x from "a", export … from "a", import "a"
    r"""|\b(?:import|require)\s*\(\s*(["'])([^"'\n]+)\3\s*[),]"""  # import("a"), require("a")
)
_REQUIRE = re.compile(r"""\brequire\s*\(\s*(["'])([^"'\n]+)\1\s*\)""")
_LOCAL = ("./", "../", "/", "http:", "https:", "file:", "data:", "blob:", "jsr:")

Checker = Callable[[Iterable[str]], Mapping[str, str]]


def checker(whitelist: Whitelist) -> Checker:
    """The allow-list hook over the package whitelist: name → default npm specifier, or ``PackageError``."""

    def check(names: Iterable[str]) -> dict[str, str]:
        wanted = sorted(set(names))
        unknown = [n for n in wanted if n not in whitelist.javascript]
        if unknown:
            plural = "s" if len(unknown) > 1 else ""
            raise PackageError(
                f"npm package{plural} {', '.join(repr(n) for n in unknown)} not allowed "
                f"(allowed: {', '.join(sorted(whitelist.javascript))}; see list_allowed_packages)"
            )
        return {n: f"npm:{n}@{whitelist.javascript[n]}" for n in wanted}

    return check


@dataclass(frozen=True)
class Requirement:
    name: str
    version: str | None = None
    subpath: str = ""


def parse_requirement(text: str) -> Requirement:
    """``axios``, ``axios@1.7``, ``@scope/pkg@2/sub/path``, with or without ``npm:``."""
    rest = text.strip().removeprefix("npm:").lstrip("/")
    scope = ""
    if rest.startswith("@"):
        scope, _, rest = rest.partition("/")
        scope += "/"
    head, _, subpath = rest.partition("/")
    name, _, version = head.partition("@")
    if not name or not re.fullmatch(r"[a-z0-9][a-z0-9._~-]*", name) or (scope and len(scope) < 3):
        raise UnsupportedError(f"{text!r} is not an npm package name")
    return Requirement(scope + name, version or None, subpath)


def is_builtin(specifier: str) -> bool:
    return specifier.startswith("node:") or specifier in NODE_BUILTINS


def npm_specifiers(code: str) -> list[str]:
    """The npm packages a script names in ``import``/``export … from``/``import()``/``require()`` literals."""
    found: list[str] = []
    for match in _SPECIFIER.finditer(code):
        specifier = match.group(2) or match.group(4)
        if is_builtin(specifier) or specifier.startswith(_LOCAL):
            continue
        if specifier not in found:
            found.append(specifier)
    return found


@dataclass(frozen=True)
class NpmPlan:
    """What a run needs from npm: specifiers to have in the cache, and modules ``require()`` returns."""

    cache: tuple[str, ...] = ()
    preload: tuple[tuple[str, str], ...] = ()
    """(the string passed to ``require``, the specifier the worker imports for it) in script order."""


def _specifier(req: Requirement, default: str) -> str:
    base = f"npm:{req.name}@{req.version}" if req.version else default
    return base + (f"/{req.subpath}" if req.subpath else "")


def plan(code: str, packages: Iterable[str], check: Checker) -> NpmPlan:
    """The npm packages of one run: those asked for in ``packages`` and those the code names."""
    requested = [parse_requirement(p) for p in packages]
    named: dict[str, Requirement] = {}
    for specifier in npm_specifiers(code):
        try:
            named[specifier] = parse_requirement(specifier)
        except UnsupportedError:
            continue  # not a package name: Deno reports it when the script runs
    defaults = check([r.name for r in [*requested, *named.values()]])
    cache: list[str] = []
    for req in [*requested, *named.values()]:
        spec = _specifier(Requirement(req.name, req.version), defaults[req.name])
        if spec not in cache:
            cache.append(spec)
    preload: list[tuple[str, str]] = []
    for match in _REQUIRE.finditer(code):
        text = match.group(2)
        if text in named and all(text != p for p, _ in preload):
            preload.append((text, _specifier(named[text], defaults[named[text].name])))
    return NpmPlan(tuple(cache), tuple(preload))


def import_map(whitelist: Whitelist) -> dict[str, dict[str, str]]:
    """Bare names → npm specifiers for the allowed packages, and bare Node.js built-ins → ``node:``."""
    imports: dict[str, str] = {}
    for name, version in sorted(whitelist.javascript.items()):
        imports[name] = f"npm:{name}@{version}"
        imports[f"{name}/"] = f"npm:/{name}@{version}/"
    for name in sorted(NODE_BUILTINS):
        imports[name] = f"node:{name}"
    return {"imports": imports}
