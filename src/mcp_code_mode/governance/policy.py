"""Tool-call policy: whether a downstream tool call is allowed, needs a person's approval, or is denied.

A server's entry in the servers file may carry ``policy``::

    "policy": {
      "default": "ask",
      "tools": {
        "read_*": "allow",
        "write_file": {"decision": "allow", "when": {"/path": {"glob": "reports/**"}}, "otherwise": "ask",
                       "maxPerRun": 20, "perMinute": 60},
        "delete_*": "deny"
      }
    }

- ``default`` (``allow``, ``ask`` or ``deny``; ``allow`` when unset) decides a tool no entry matches.
- ``tools`` maps a pattern over the tool's *original* name (``fnmatch`` style, case-sensitive: ``*``, ``?``,
  ``[seq]``, ``[!seq]``) to a decision or to a rule. Entries are tried in the file's order and the first
  match wins; a literal name that an earlier pattern already matches is an error (it could never apply).
- A rule: ``decision``; ``when``, conditions on the call's arguments, every one of which must hold, keyed by
  a JSON pointer (RFC 6901: ``/path``, ``/items/0/name``, ``~1`` for ``/`` and ``~0`` for ``~``) and each one
  of ``{"glob": "reports/**"}`` (or a list of globs, any of which may match), ``{"regex": "..."}`` (Python
  syntax, ``re.fullmatch`` against a string) or ``{"min": n, "max": m}`` (either bound or both, inclusive,
  against a number; ``true``/``false`` are not numbers); ``otherwise`` (``ask`` or ``deny``, default
  ``deny``): the decision when a condition fails, the pointer names nothing or the value has the wrong type;
  ``maxPerRun``: calls of each matching tool one run may make; ``perMinute``: calls of each matching tool
  across all runs in any 60 seconds.

An argument glob is matched against the whole string: ``*`` is any run of characters but ``/``, ``?`` one
character but ``/``, ``**`` any run of characters including ``/`` (``a/**/b`` matches ``a/b`` too),
``[seq]``/``[!seq]`` one character of (not of) the set, never ``/``. A value with a ``..`` segment matches no
glob (it could climb out of the directory the glob names). A glob is over the string the script sent, not
over the filesystem: the downstream server's own path resolution (symlinks, its root) is not seen here.

``CODE_MODE_POLICY=annotations`` decides a tool that no entry matches by its MCP annotations: ``readOnlyHint``
→ allow, else ``destructiveHint`` → ask, else ``openWorldHint`` → ask, else the server's default. Annotations
are *untrusted*: the downstream server describes its own tools, and one that lies gets its tools allowed.
Use that mode only for servers you trust to describe themselves; explicit entries always win.

Every mistake (an unknown key, a bad decision, pointer or regex, ``min`` above ``max``, a cap below 1) is a
validation error at load, which ``config.py`` turns into a ``ConfigError`` naming the server and the entry.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator
from pydantic_core import PydanticCustomError

Decision = Literal["allow", "ask", "deny"]
StaticDecision = Literal["allow", "ask", "deny", "conditional"]
PolicyMode = Literal["explicit", "annotations"]

RATE_WINDOW_SECONDS = 60.0
"""The window of ``perMinute``: a sliding 60 seconds."""

_WORDS: dict[str, str] = {"allow": "allowed", "ask": "needs approval", "deny": "denied"}
_WILDCARDS = re.compile(r"[*?\[]")
_SHOWN_CHARS = 80


def _error(message: str) -> PydanticCustomError:
    return PydanticCustomError("policy", "{message}", {"message": message})


def _check_keys(data: object, valid: tuple[str, ...], what: str, also: tuple[str, ...] = ()) -> None:
    """Unknown keys of an object, named with the nearest valid one (pydantic reports a non-object itself);
    ``also``: Python spellings accepted without being suggested."""
    if not isinstance(data, dict):
        return
    for key in data:  # pyright: ignore[reportUnknownVariableType]
        if key in valid or key in also:
            continue
        near = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]!r}?" if near else f"valid: {', '.join(valid)}"
        raise _error(f"unknown key {key!r} in {what} ({hint})")


def _show(value: object) -> str:
    """A value as JSON on one line, cut to a readable length (arguments come from the script: untrusted)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def glob_regex(pattern: str) -> str:
    """The regular expression (for ``re.fullmatch``) of an argument glob: ``*`` and ``?`` stop at ``/``,
    ``**`` crosses it, ``**/`` is zero or more whole segments, ``[seq]``/``[!seq]`` never match ``/``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            j = pattern.find("]", j)
            if j == -1:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : j]
            negate = body.startswith("!")
            body = "".join("\\" + ch if ch in "\\^[]&~|" else ch for ch in (body[1:] if negate else body))
            out.append(f"(?!/)[{'^' if negate else ''}{body}]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def parse_pointer(pointer: str) -> tuple[str, ...]:
    """The reference tokens of a JSON pointer (RFC 6901). Raises ``ValueError`` for a malformed one."""
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {pointer!r} must start with '/' (e.g. '/path')")
    tokens = pointer[1:].split("/")
    for token in tokens:
        if re.search(r"~(?![01])", token):
            raise ValueError(f"JSON pointer {pointer!r}: '~' must be followed by 0 or 1 ('~0' is '~', '~1' is '/')")
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in tokens)


MISSING = object()
"""What ``resolve_pointer`` returns for a pointer that names nothing."""


def resolve_pointer(document: object, tokens: tuple[str, ...]) -> object:
    """The value ``tokens`` name in ``document``, or ``MISSING`` (an absent key, an index out of range or
    not in canonical form, ``-``, or a step into something that is neither an object nor an array)."""
    current = document
    for token in tokens:
        if isinstance(current, Mapping):
            if token not in current:
                return MISSING
            current = current[token]  # pyright: ignore[reportUnknownVariableType]
        elif isinstance(current, list | tuple):
            if not re.fullmatch(r"0|[1-9][0-9]*", token) or int(token) >= len(current):  # pyright: ignore[reportUnknownArgumentType]
                return MISSING
            current = current[int(token)]  # pyright: ignore[reportUnknownVariableType]
        else:
            return MISSING
    return current  # pyright: ignore[reportUnknownVariableType]


class ArgumentCondition(BaseModel):
    """One condition on an argument: a glob (or several), a regex, or a numeric range."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True)

    glob: str | list[str] | None = None
    """The string must match this glob (or one of these); see the module's docstring for the syntax."""
    regex: str | None = None
    """The string must match this regular expression as a whole (``re.fullmatch``)."""
    min: int | float | None = None
    """The number must be at least this."""
    max: int | float | None = None
    """The number must be at most this."""

    _patterns: tuple[re.Pattern[str], ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: object) -> object:
        _check_keys(data, ("glob", "regex", "min", "max"), "a condition")
        return data

    @field_validator("min", "max", mode="before")
    @classmethod
    def _a_number(cls, bound: object) -> object:
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)):
            raise _error(f"a bound must be a number, got {_show(bound)}")
        return bound

    @model_validator(mode="after")
    def _compile(self) -> ArgumentCondition:
        kinds = [k for k, v in (("glob", self.glob), ("regex", self.regex)) if v is not None]
        if self.min is not None or self.max is not None:
            kinds.append("min/max")
        if len(kinds) != 1:
            raise _error(
                "a condition is one of {'glob': ...}, {'regex': ...} or {'min': ..., 'max': ...}"
                + (f"; this one has {' and '.join(kinds)}" if kinds else "")
            )
        if self.min is not None and self.max is not None and self.min > self.max:
            raise _error(f"min {self.min} is greater than max {self.max}")
        globs = [self.glob] if isinstance(self.glob, str) else self.glob
        if globs is not None:
            if not globs:
                raise _error("an empty list of globs matches nothing")
            self._patterns = tuple(self._compiled(glob_regex(g), f"glob {g!r}", exc_position=False) for g in globs)
        elif self.regex is not None:
            self._patterns = (self._compiled(self.regex, f"regex {self.regex!r}"),)
        return self

    @staticmethod
    def _compiled(regex: str, what: str, *, exc_position: bool = True) -> re.Pattern[str]:
        try:
            return re.compile(regex, re.DOTALL)
        except re.error as exc:  # a glob's position would be in the regex it became: not shown
            raise _error(f"invalid {what}: {exc if exc_position else exc.msg}") from None

    def failure(self, pointer: str, value: object) -> str | None:
        """Why ``value`` (at ``pointer``) fails this condition, or None when it holds."""
        if value is MISSING:
            return f"{pointer} is missing"
        if self.min is not None or self.max is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"{pointer} {_show(value)} is not a number"
            if self.min is not None and not value >= self.min:
                return f"{pointer} {_show(value)} is below the min {self.min}"
            if self.max is not None and not value <= self.max:
                return f"{pointer} {_show(value)} is above the max {self.max}"
            return None
        if not isinstance(value, str):
            return f"{pointer} {_show(value)} is not a string"
        if self.regex is not None:
            return (
                None if self._patterns[0].fullmatch(value) else f"{pointer} {_show(value)} does not match {self.regex}"
            )
        globs = [self.glob] if isinstance(self.glob, str) else list(self.glob or ())
        if ".." in re.split(r"[/\\]", value):
            return f"{pointer} {_show(value)} has a '..' segment"
        if any(p.fullmatch(value) for p in self._patterns):
            return None
        if len(globs) == 1 and globs[0].endswith("/**") and not _WILDCARDS.search(globs[0][:-3]):
            return f"{pointer} {_show(value)} is not under {globs[0]}"
        return f"{pointer} {_show(value)} does not match {' or '.join(globs)}"

    def describe(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class ToolRule(BaseModel):
    """What a policy entry decides for the tools its pattern matches (``"ask"`` is short for
    ``{"decision": "ask"}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True)

    decision: Decision
    """``allow``, ``ask`` (a person approves each call) or ``deny``, when every ``when`` condition holds."""
    when: dict[str, ArgumentCondition] = Field(default_factory=dict)
    """Conditions on the arguments, keyed by JSON pointer; all must hold."""
    otherwise: Literal["ask", "deny"] = "deny"
    """The decision when a ``when`` condition fails (or its pointer names nothing)."""
    max_per_run: int | None = Field(default=None, gt=0, validation_alias=AliasChoices("maxPerRun", "max_per_run"))
    """Calls of each matching tool that one run may make."""
    per_minute: int | None = Field(default=None, gt=0, validation_alias=AliasChoices("perMinute", "per_minute"))
    """Calls of each matching tool that all runs together may make in any 60 seconds."""

    _pointers: tuple[tuple[str, tuple[str, ...], ArgumentCondition], ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: object) -> object:
        if isinstance(data, str):
            return {"decision": data}
        _check_keys(
            data,
            ("decision", "when", "otherwise", "maxPerRun", "perMinute"),
            "a tool rule",
            also=("max_per_run", "per_minute"),
        )
        if isinstance(data, dict) and "decision" not in data:
            raise _error("missing 'decision' ('allow', 'ask' or 'deny')")
        return data

    @field_validator("when")
    @classmethod
    def _pointers_are_valid(cls, when: dict[str, ArgumentCondition]) -> dict[str, ArgumentCondition]:
        for pointer in when:
            try:
                parse_pointer(pointer)
            except ValueError as exc:
                raise _error(str(exc)) from None
        return when

    @model_validator(mode="after")
    def _parse_pointers(self) -> ToolRule:
        self._pointers = tuple((p, parse_pointer(p), c) for p, c in self.when.items())
        return self

    def failure(self, arguments: Mapping[str, Any]) -> str | None:
        """The first ``when`` condition that fails, described; None when all hold."""
        for pointer, tokens, condition in self._pointers:
            failed = condition.failure(pointer, resolve_pointer(arguments, tokens))
            if failed is not None:
                return failed
        return None

    def static(self) -> StaticDecision:
        """The decision without the arguments: ``conditional`` when they can change it."""
        return self.decision if not self.when or self.decision == self.otherwise else "conditional"

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"decision": self.decision}
        if self.when:
            out["when"] = {p: c.describe() for p, c in self.when.items()}
            out["otherwise"] = self.otherwise
        if self.max_per_run is not None:
            out["maxPerRun"] = self.max_per_run
        if self.per_minute is not None:
            out["perMinute"] = self.per_minute
        return out


SINK_KIND = re.compile(r"\*|[a-z][a-z0-9_]{0,31}")


class PiiPolicy(BaseModel):
    """A server's ``policy.pii``: which of its tools may receive which kinds of personal data in plaintext.

    ``sinks`` maps a pattern over the tool's original name (as ``tools`` does: ``fnmatch``, case-sensitive,
    first match wins) to the kinds it may receive: ``["email", "phone"]``, ``["*"]`` for every kind, ``[]``
    for none. A token of such a kind in a call's arguments is replaced with its value before the call; any
    other token stays a token. A tool no entry matches receives the values its own server's results carried
    (and nothing else in plaintext). Secrets are never restored, whatever the sinks say."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True)

    sinks: dict[str, list[str]] = Field(default_factory=dict)
    """Tool pattern → the kinds it may receive in plaintext."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: object) -> object:
        _check_keys(data, ("sinks",), "policy.pii")
        return data

    @field_validator("sinks")
    @classmethod
    def _kinds(cls, sinks: dict[str, list[str]]) -> dict[str, list[str]]:
        for pattern, kinds in sinks.items():
            if not pattern:
                raise _error("an empty tool pattern in policy.pii.sinks matches no tool")
            for kind in kinds:
                if not SINK_KIND.fullmatch(kind):
                    raise _error(f'sinks[{json.dumps(pattern)}]: {kind!r} is not a kind (e.g. "email", or "*")')
        return sinks

    def kinds_for(self, tool: str) -> frozenset[str] | None:
        """The kinds the first entry matching ``tool`` allows (``*`` among them: every kind), or None when
        no entry matches (then the values of the tool's own server)."""
        for pattern, kinds in self.sinks.items():
            if fnmatch.fnmatchcase(tool, pattern):
                return frozenset(kinds)
        return None


class ServerPolicy(BaseModel):
    """A server's ``policy``: its default and its tool entries, tried in order."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, use_attribute_docstrings=True)

    default: Decision = "allow"
    """The decision for a tool no entry matches (and, with ``CODE_MODE_POLICY=annotations``, whose annotations
    say nothing)."""
    tools: dict[str, ToolRule] = Field(default_factory=dict)
    """Patterns over the tools' original names (``fnmatch``, case-sensitive), first match wins."""
    pii: PiiPolicy | None = None
    """Which tools may receive which kinds of personal data in plaintext (``sinks``; ``privacy``)."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: object) -> object:
        _check_keys(data, ("default", "tools", "pii"), "a policy")
        return data

    @field_validator("tools")
    @classmethod
    def _every_entry_can_apply(cls, tools: dict[str, ToolRule]) -> dict[str, ToolRule]:
        patterns = list(tools)
        for i, pattern in enumerate(patterns):
            if not pattern:
                raise _error("an empty tool pattern matches no tool")
            if _WILDCARDS.search(pattern):
                continue
            earlier = next((p for p in patterns[:i] if fnmatch.fnmatchcase(pattern, p)), None)
            if earlier is not None:
                raise _error(
                    f"tools[{json.dumps(pattern)}] never applies: tools[{json.dumps(earlier)}] comes first and "
                    "matches it (the first matching entry wins; move the more specific one up)"
                )
        return tools

    def match(self, tool: str) -> tuple[str, ToolRule] | None:
        """The first entry whose pattern matches ``tool`` (its original name), or None."""
        return next(((p, r) for p, r in self.tools.items() if fnmatch.fnmatchcase(tool, p)), None)


_NO_POLICY = ServerPolicy()


@dataclass(frozen=True)
class Verdict:
    """What the policy decides for one call."""

    decision: Decision
    rule: str
    """What decided: ``filesystem: tools["write_*"]``, ``filesystem: default``, ``annotations: readOnlyHint``."""
    reason: str
    """One line for people and error messages: the tool, why, and the rule in parentheses."""


_HINTS: tuple[tuple[str, Decision], ...] = (
    ("readOnlyHint", "allow"),
    ("destructiveHint", "ask"),
    ("openWorldHint", "ask"),
)


def _hint(annotations: Mapping[str, Any] | None) -> tuple[Decision, str] | None:
    """The decision the annotations suggest (only a JSON ``true`` counts), with the hint that made it."""
    if not annotations:
        return None
    for key, decision in _HINTS:
        if annotations.get(key) is True:
            return decision, key
    return None


class PolicyBook:
    """Every server's policy and the mode (``CODE_MODE_POLICY``): answers what a call may do.

    Build it from the config: ``PolicyBook({n: s.policy for n, s in config.servers.items()},
    config.settings.policy)``. A server it does not know, or whose ``policy`` is None, allows everything
    (and, in ``annotations`` mode, follows its tools' annotations)."""

    def __init__(self, servers: Mapping[str, ServerPolicy | None], mode: PolicyMode = "explicit") -> None:
        self.mode: PolicyMode = mode
        self._servers = {name: policy or _NO_POLICY for name, policy in servers.items()}

    def _policy(self, server: str) -> ServerPolicy:
        return self._servers.get(server, _NO_POLICY)

    def decide(
        self,
        server: str,
        tool: str,
        annotations: Mapping[str, Any] | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Verdict:
        """The verdict for calling ``tool`` (its original name) of ``server`` with ``arguments``."""
        policy = self._policy(server)
        found = policy.match(tool)
        if found is not None:
            pattern, rule = found
            name = f"{server}: tools[{json.dumps(pattern, ensure_ascii=False)}]"
            failed = rule.failure(arguments or {})
            if failed is not None:
                return Verdict(rule.otherwise, name, f"{tool}: {failed} ({name})")
            return Verdict(rule.decision, name, f"{tool}: {_WORDS[rule.decision]} ({name})")
        if self.mode == "annotations" and (hint := _hint(annotations)) is not None:
            decision, key = hint
            name = f"annotations: {key}"
            return Verdict(decision, name, f"{tool}: {_WORDS[decision]}, its server marks it {key} ({name})")
        name = f"{server}: default"
        return Verdict(policy.default, name, f"{tool}: {_WORDS[policy.default]} by default ({name})")

    def static(self, server: str, tool: str, annotations: Mapping[str, Any] | None = None) -> StaticDecision:
        """The decision known without the arguments (for stubs, search results and ``validate_code``):
        ``conditional`` when an entry's ``when`` conditions decide between two outcomes."""
        found = self._policy(server).match(tool)
        if found is not None:
            return found[1].static()
        if self.mode == "annotations" and (hint := _hint(annotations)) is not None:
            return hint[0]
        return self._policy(server).default

    def limits(self, server: str, tool: str) -> tuple[int | None, int | None]:
        """``(maxPerRun, perMinute)`` of the entry that matches the tool; ``(None, None)`` for none.
        The entry is the one ``decide`` names in ``Verdict.rule``, for the counters' ``rule``."""
        found = self._policy(server).match(tool)
        return (found[1].max_per_run, found[1].per_minute) if found is not None else (None, None)

    def gated(self, server: str, tools: Mapping[str, Mapping[str, Any] | None] | None = None) -> bool:
        """Whether a call to ``server`` may be asked about or denied. ``tools`` (original name → annotations)
        makes the answer exact; without it, annotations mode counts any tool as possibly gated."""
        if tools is not None:
            return any(self.static(server, name, hints) != "allow" for name, hints in tools.items())
        policy = self._policy(server)
        return (
            self.mode == "annotations"
            or policy.default != "allow"
            or any(rule.static() != "allow" for rule in policy.tools.values())
        )

    def describe(self) -> dict[str, Any]:
        """The policy as JSON (for ``get_execution_limits``): the mode, and per server its default and its
        entries in the order they are tried."""
        return {
            "mode": self.mode,
            "servers": {
                name: {
                    "default": policy.default,
                    "tools": [{"tool": pattern, **rule.describe()} for pattern, rule in policy.tools.items()],
                }
                for name, policy in self._servers.items()
            },
        }


def _named(rule: str | None, server: str) -> str:
    return rule if rule is not None else server


class RunCounter:
    """Calls of one run, per (server, tool), against ``maxPerRun``: make one per run, never share it."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str], int] = {}

    def calls(self, server: str, tool: str) -> int:
        """Calls of ``tool`` this run has counted."""
        return self._calls.get((server, tool), 0)

    def check_and_count(
        self, server: str, tool: str, max_per_run: int | None, *, rule: str | None = None
    ) -> str | None:
        """Count one call and return None, or, when the run already made ``max_per_run``, the reason (naming
        ``rule``, e.g. ``Verdict.rule``) and count nothing. Call it for a call about to go ahead."""
        made = self.calls(server, tool)
        if max_per_run is not None and made >= max_per_run:
            return f"{tool}: the run made {made} calls, the most maxPerRun allows ({_named(rule, server)})"
        self._calls[(server, tool)] = made + 1
        return None


class RateLimiter:
    """Calls per (server, tool) across runs in a sliding window of 60 seconds, against ``perMinute``.

    ``clock`` returns seconds (default: ``time.monotonic``). One per server process; it is not thread-safe
    (the server answers calls on one event loop)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window: float = RATE_WINDOW_SECONDS) -> None:
        self._clock = clock
        self._window = window
        self._times: dict[tuple[str, str], deque[float]] = {}

    def recent(self, server: str, tool: str) -> int:
        """Calls of ``tool`` counted within the window (only tools with a ``perMinute`` are counted)."""
        return len(self._prune((server, tool), self._clock()))

    def _prune(self, key: tuple[str, str], now: float) -> deque[float]:
        times = self._times.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self._window:
            times.popleft()
        if not times:
            del self._times[key]
        return times

    def check_and_count(self, server: str, tool: str, per_minute: int | None, *, rule: str | None = None) -> str | None:
        """Count one call and return None, or, when ``per_minute`` calls fall within the last 60 seconds, the
        reason (naming ``rule``) and count nothing. ``per_minute`` None: nothing is counted."""
        if per_minute is None:
            return None
        key = (server, tool)
        now = self._clock()
        times = self._prune(key, now)
        if len(times) >= per_minute:
            return (
                f"{tool}: {len(times)} calls in the last minute (all runs), the most perMinute allows "
                f"({_named(rule, server)})"
            )
        self._times.setdefault(key, times).append(now)
        return None
