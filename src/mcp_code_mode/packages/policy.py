"""The package whitelist and requirement validation: names and version ranges only, nothing else.

A requirement string is untrusted input. Before anything reaches an installer it must be a plain
name from the whitelist with an optional version specifier (PEP 508 for Python, a semver range for
npm). URLs, paths, flags, VCS references, extras and environment markers are refused, each with an
error naming the entry.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .._json import unique_keys
from ..errors import PackageError

MAX_ENTRY = 120
MAX_PACKAGES = 32
_PY_FORBIDDEN = re.compile(
    r"[/\\@;:#\[\]\n\r\t\f\v'\"`$|&]"
)  # URL, path, marker, extras, shell: refused before parsing
_PY_SPEC_CHARS = re.compile(r"^[A-Za-z0-9_.\-]+(\s*(===|==|!=|~=|>=|<=|>|<)\s*[A-Za-z0-9_.*+!]+\s*,?)*$")
_NPM_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$")
_NPM_VERSION = re.compile(r"^(\^|~|[<>]=?|=)?v?(\d+|[xX*])(\.(\d+|[xX*])){0,2}(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


@dataclass(frozen=True)
class Whitelist:
    """Allowed packages per language; Python names map to the modules they provide."""

    python: dict[str, tuple[str, ...]]
    """Canonical distribution name → import names."""
    javascript: dict[str, str]
    """npm package name → the version range loaded when a script names none (usually a major version)."""
    source: str

    @classmethod
    def load(cls, path: Path | None = None) -> Whitelist:
        """The file at ``path``, else the defaults shipped with the package."""
        if path is None:
            text = (
                resources.files("mcp_code_mode.packages").joinpath("allowed_packages.json").read_text(encoding="utf-8")
            )
            source = "the built-in allowed_packages.json"
        else:
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise PackageError(f"{path}: cannot read the package whitelist: {exc}") from None
            source = str(path)
        try:
            data: Any = json.loads(text, object_pairs_hook=unique_keys)
        except ValueError as exc:
            raise PackageError(f"{source}: invalid JSON: {exc}") from None
        python = data.get("python", {}) if isinstance(data, dict) else None
        javascript = data.get("javascript", {}) if isinstance(data, dict) else None
        if not isinstance(python, dict) or not isinstance(javascript, dict):
            raise PackageError(f"{source}: expected {{'python': {{name: [modules]}}, 'javascript': {{name: range}}}}")
        mapping: dict[str, tuple[str, ...]] = {}
        for name, modules in python.items():
            if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
                raise PackageError(f"{source}: python.{name}: expected a list of import names")
            mapping[canonicalize_name(str(name))] = tuple(modules) or (str(name).replace("-", "_"),)
        npm: dict[str, str] = {}
        for name, default in javascript.items():
            if not isinstance(default, str) or not _is_semver_range(default):
                raise PackageError(f'{source}: javascript.{name}: expected a default version range such as "1"')
            npm[str(name).lower()] = default
        return cls(mapping, npm, source)

    def listing(self, language: str) -> dict[str, Any]:
        """What ``list_allowed_packages`` returns for ``python``, ``javascript``/``typescript`` or ``all``."""
        lang = language.strip().lower()
        python = [{"name": n, "imports": list(m)} for n, m in sorted(self.python.items())]
        js = [{"name": n, "default": f"{n}@{v}"} for n, v in sorted(self.javascript.items())]
        if lang in ("python", "py"):
            return {"python": python}
        if lang in ("javascript", "js", "typescript", "ts"):
            return {"javascript": js, "typescript": js}
        if lang == "all":
            return {"python": python, "javascript": js, "typescript": js}
        raise PackageError(f"unknown language {language!r} (use python, javascript, typescript or all)")

    def imports_for(self, requirements: list[str]) -> tuple[str, ...]:
        """The import names that validated Python requirements provide."""
        names = [re.split(r"[<>=!~]", r, maxsplit=1)[0] for r in requirements]
        return tuple(sorted({module for n in names for module in self.python.get(n, ())}))


def _entries(packages: object) -> list[str]:
    if not isinstance(packages, list):
        raise PackageError("packages must be a list of strings")
    if len(packages) > MAX_PACKAGES:
        raise PackageError(f"at most {MAX_PACKAGES} packages per run (got {len(packages)})")
    out: list[str] = []
    for i, entry in enumerate(packages):
        if not isinstance(entry, str):
            raise PackageError(f"packages[{i}]: must be a string, got {type(entry).__name__}")
        if not entry.strip():
            raise PackageError(f"packages[{i}]: empty")
        if len(entry) > MAX_ENTRY:
            raise PackageError(f"packages[{i}]: longer than {MAX_ENTRY} characters")
        out.append(entry.strip())
    return out


def validate_python(packages: object, whitelist: Whitelist) -> list[str]:
    """Normalized ``name<spec>`` strings, sorted; ``PackageError`` names the first bad entry."""
    seen: dict[str, str] = {}
    for entry in _entries(packages):
        where = f"package {entry!r}"
        if entry.startswith("-"):
            raise PackageError(f"{where}: installer flags are not allowed")
        if _PY_FORBIDDEN.search(entry) or not _PY_SPEC_CHARS.match(entry):
            raise PackageError(
                f"{where}: only a name and a version specifier are allowed (no URL, path, VCS reference, "
                "extras or environment marker)"
            )
        try:
            requirement = Requirement(entry)
        except InvalidRequirement as exc:
            raise PackageError(f"{where}: not a valid requirement: {exc}") from None
        if requirement.url or requirement.marker or requirement.extras:
            raise PackageError(f"{where}: only a name and a version specifier are allowed")
        name = canonicalize_name(requirement.name)
        if name not in whitelist.python:
            raise PackageError(f"{where}: {name!r} is not in the allowed packages (see list_allowed_packages)")
        if name in seen:
            raise PackageError(f"{where}: {name!r} is listed twice")
        seen[name] = f"{name}{requirement.specifier}"
    return sorted(seen.values())


def validate_npm(packages: object, whitelist: Whitelist) -> list[str]:
    """Normalized ``name`` or ``name@range`` strings, sorted; ``PackageError`` names the first bad entry."""
    seen: dict[str, str] = {}
    for entry in _entries(packages):
        where = f"package {entry!r}"
        if entry.startswith("-"):
            raise PackageError(f"{where}: installer flags are not allowed")
        scoped = entry.startswith("@")
        name, _, version = entry[1:].partition("@") if scoped else entry.partition("@")
        name = ("@" + name) if scoped else name
        name = name.lower()
        if not _NPM_NAME.match(name):
            raise PackageError(f"{where}: only an npm package name and a semver range are allowed")
        if version and not _is_semver_range(version):
            raise PackageError(f"{where}: {version!r} is not a semver range (tags, URLs and paths are not allowed)")
        if name not in whitelist.javascript:
            raise PackageError(f"{where}: {name!r} is not in the allowed packages (see list_allowed_packages)")
        if name in seen:
            raise PackageError(f"{where}: {name!r} is listed twice")
        seen[name] = f"{name}@{version.strip()}" if version else name
    return sorted(seen.values())


def _is_semver_range(text: str) -> bool:
    """``^1.2``, ``~1.2.3``, ``>=1 <2``, ``1.x || 2.x``, ``1.0.0 - 1.5.0``; never a tag, URL or path."""
    alternatives = text.split("||")
    for alternative in alternatives:
        tokens = [t for t in re.split(r"\s+", alternative.strip()) if t]
        if not tokens:
            return False
        for token in tokens:
            if token != "-" and not _NPM_VERSION.match(token):
                return False
    return True
