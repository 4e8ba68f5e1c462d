"""Cache keys that mean "the same program": what a run's result depends on, hashed.

A request's key (``code_key``) is the sha256 of a JSON list, so no field can run into the next:

- ``KEY_VERSION``: bumped whenever what goes into a key changes; rows stored under another
  version never match a lookup (``ScriptStore.candidates``), but stay listed and searchable.
- the code exactly as sent, but for trailing newlines (``keyed_code``);
- the canonical language, the runner's name and its identity (``runner_identity``: this package's
  version, the host Python, the versions the runner reports, and a digest of the runner's worker
  sources), so that an upgrade or an edited worker never answers with an old run's output;
- the network policy in force for the run (``allowNetworking`` after the server-wide setting, and with the
  network the egress policy: the server's allow, deny and private lists and the hosts the run named);
- the validated packages, sorted;
- a digest of the tool stubs the script would see (``stubs_digest``): a script that tests for a tool
  (``hasattr``, ``except NameError``) without calling one behaves differently once the tool exists.

A run's key (``full_key``) adds the tools it called with the hash of each one's schema.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .describe import ToolUse

KEY_VERSION = 3
"""1: normalised code (dedented, trailing spaces stripped), no network policy, no runner identity;
2: network on or off, without the egress policy."""

_NEWLINES_KEPT_AFTER = ("\\", "\r")
_SOURCE_SUFFIXES = (".py", ".js", ".ts", ".mjs")


def keyed_code(code: str) -> str:
    """The code as it is keyed: exactly as sent, without its trailing ``\\n`` characters.

    Only that is proven harmless. In Python and JavaScript, line feeds at the end of a program that
    parses are blank lines; a program whose end is inside a bracket, string or comment parses (or
    fails) the same with or without them. Two exceptions are kept exact: a trailing backslash
    (``x = 1\\`` fails, ``x = 1\\`` + two newlines is a continuation followed by a blank line and
    runs) and a trailing ``\\r`` (the ``\\r\\n`` pair would be split). Nothing else is touched:
    ``\\x0c``, ``\\x1c``, ``\\u2028`` and friends are not line breaks to Python, spaces may sit
    inside a string literal, and indentation is syntax.
    """
    stripped = code.rstrip("\n")
    return code if stripped.endswith(_NEWLINES_KEPT_AFTER) else stripped


@dataclass(frozen=True)
class KeyContext:
    """Everything besides the code that decides what a run does."""

    language: str
    runner: str
    runner_identity: str
    network: bool
    """The network policy in force: ``allowNetworking`` and the server-wide ``allow_network``."""
    packages: tuple[str, ...]
    stubs: str
    """``stubs_digest`` of the stub module the runner defines for the script."""
    egress: list[Any] | None = None
    """What a run with the network could reach (``EgressPolicy.fingerprint``: the server's lists, the run's)."""


def _sha(parts: list[Any]) -> str:
    return hashlib.sha256(json.dumps(parts, ensure_ascii=True, separators=(",", ":")).encode()).hexdigest()


def code_key(code: str, context: KeyContext) -> str:
    """The key of a request before it runs."""
    return _sha(
        [
            KEY_VERSION,
            context.language,
            context.runner,
            context.runner_identity,
            ["network", context.egress] if context.network else "offline",
            sorted(set(context.packages)),
            context.stubs,
            keyed_code(code),
        ]
    )


def full_key(code_key_: str, tools: Iterable[ToolUse]) -> str:
    """The key of a run: its ``code_key`` and the tools it called with their schema hashes."""
    return _sha([code_key_, "tools", [[t.server, t.tool, t.schema_hash] for t in sorted(set(tools))]])


@functools.lru_cache(maxsize=16)
def stubs_digest(source: str) -> str:
    """A digest of a stub module (cached: the engine asks for the same source object on every run)."""
    return hashlib.sha256(source.encode()).hexdigest()


@functools.cache
def _sources_digest(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.suffix in _SOURCE_SUFFIXES and p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        with contextlib.suppress(OSError):
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _reported_versions(runner: object) -> dict[str, str]:
    """The versions a runner reports of what runs a script (``Runner.identity()``), else none."""
    versions: Callable[[], dict[str, str]] | None = getattr(runner, "identity", None)
    if not callable(versions):
        return {}
    with contextlib.suppress(OSError, ValueError, TypeError):
        return {str(k): str(v) for k, v in versions().items()}
    return {}


@functools.lru_cache(maxsize=32)
def runner_identity(runner: object) -> str:
    """What changes when the program that runs a script changes (computed once per runner).

    A runner whose ``identity`` is a string says it itself (a built runner's ``identity()`` adds
    versions). Otherwise it is derived from what is there: this package's version, the host Python's,
    the versions the runner reports of what runs a script (``Runner.identity()``: its interpreter, Deno,
    Pyodide), and a digest of every worker source in the runner's package (the sources of all runners:
    editing one worker ends the exact hits of every runner, which costs a run, never a wrong answer).
    """
    declared = getattr(runner, "identity", None)
    if isinstance(declared, str) and declared:
        return declared
    from .. import __version__

    package = Path(inspect.getfile(type(runner))).resolve().parent
    return _sha(
        [
            str(getattr(runner, "name", type(runner).__name__)),
            __version__,
            sys.version,
            _reported_versions(runner),
            _sources_digest(package),
        ]
    )
