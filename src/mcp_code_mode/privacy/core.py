"""Tokenizing what goes to the model, restoring what goes to the tools: ``Privacy`` (the server's) and
``RunPrivacy`` (one run's, for one client).

What reaches the model (a run's output as it streams and in its result, its return value, its error and
traceback, the names of the files it left, the arguments an approval question or a plan shows, the audit
log's previews, stored runs shown by the cache tools) passes ``RunPrivacy.mask``:

1. Secrets become ``[SECRET]``, always: the values of every downstream server's ``env`` and ``headers``
   (and this server's own auth token), bearer tokens and the well-known key formats (``detect.Secrets``).
   They are never restored.
2. When personal data is tokenized at all (``CODE_MODE_PII=tokenize``, or any server's ``"pii": "tokenize"``),
   every value the detectors find becomes its client's token (``vault``): ``[EMAIL_1]``, ``[PHONE_2]``. A value
   that a ``"pii": "off"`` server's results carried in this run stays as it is, unless a tokenizing server's
   results also carried it or the run had it restored from a token.

The script itself sees real values: tool results reach it unchanged. The host reads each result of a
tokenizing server on its way (``harvest``) to learn which server each value came from: a tool may receive
the values of its own server in plaintext, and what a server's ``policy.pii.sinks`` allows.

``restore`` rewrites a call's arguments before the host makes the call: each of this client's tokens, in
any string at any depth (keys too; inside a larger string, such as an SQL query or a mail body), becomes its
value if the tool may receive that kind; otherwise it stays a token and the call's note says so
(``withheld``). A token this client was never given (another client's, an expired one, a made-up one) stays
as it is (``unknown``).
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import json
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import PrivacyConfig
from .detect import MIN_SECRET_CHARS, CustomKind, Detectors, Found, Secrets
from .seal import Sealer
from .vault import SECRET, TOKEN, Entry, Vault

MAX_HARVESTED = 200_000
"""Values one run remembers the origin of (results larger than that are still tokenized, without origin)."""
MAX_VERBATIM = 1000
"""Sensitive values of a run that are also searched for as written (glued to other text, where a detector
would not see them: ``alice@example.com.txt``); past these, the detectors alone find values."""
MIN_VERBATIM_CHARS = 5
MIN_NUMBER_DIGITS = 7
"""A JSON number with at least this many digits is checked as text (a phone or card number as a number)."""
_PEM_BEGIN = "-----BEGIN"
STREAM_HOLD = 4096
"""Characters of output without a line break a stream holds before it lets all but the last part go."""
STREAM_TAIL = 512
"""Characters a stream always holds back from a long unbroken run (a value could be cut there)."""


@dataclass(frozen=True)
class PiiNote:
    """What ``restore`` did to one call's arguments: the kinds it restored, withheld, and did not know."""

    restored: tuple[str, ...] = ()
    withheld: tuple[str, ...] = ()
    unknown: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"restored": list(self.restored), "withheld": list(self.withheld)}
        if self.unknown:
            out["unknown"] = self.unknown
        return out

    def __bool__(self) -> bool:
        return bool(self.restored or self.withheld or self.unknown)


class Privacy:
    """The server's privacy: detectors, secrets, which servers' results are tokenized, the sinks, the vault
    and the sealer of stored tokens. ``run(client)`` makes one run's ``RunPrivacy``."""

    def __init__(
        self,
        *,
        config: PrivacyConfig,
        tokenize: Mapping[str, bool],
        sinks: Mapping[str, Callable[[str], frozenset[str] | None]],
        secrets: Iterable[str],
        vault: Vault,
        sealer: Sealer,
        everywhere: bool = False,
    ) -> None:
        self.config = config
        self.tokenize = dict(tokenize)
        """Server → whether its results are tokenized."""
        self._sinks = dict(sinks)
        self.active = everywhere or any(self.tokenize.values())
        """Whether personal data is tokenized at all (secrets always are): ``CODE_MODE_PII=tokenize``, or a
        server's ``"pii": "tokenize"``. Then every value found in what goes to the model is tokenized, whatever
        it came from (a tool, the network, the script), except what an ``off`` server's results carried."""
        self.secrets = Secrets(secrets)
        self.vault = vault
        self.sealer = sealer

    @functools.cached_property
    def detectors(self) -> Detectors:
        """The personal-data detectors, built when first needed (a server without tokenizing never needs them:
        their phone metadata and patterns cost start-up time)."""
        config = self.config
        builtins = [k for k in config.kinds() if k not in {c.kind for c in config.custom}]
        return Detectors(
            builtins, [CustomKind(c.kind, c.regex) for c in config.custom], phone_regions=config.phone_regions
        )

    def run(self, client: str, *, tenant: str) -> RunPrivacy:
        return RunPrivacy(self, client, tenant)

    def scrub(self, text: str) -> str:
        """``text`` with its secrets ``[SECRET]`` (what the server says of itself: a downstream server's start-up
        error may quote its own credentials)."""
        spans = self.secrets.find(text)
        if not spans:
            return text
        out: list[str] = []
        at = 0
        for start, end in spans:
            out += [text[at:start], SECRET]
            at = end
        return "".join([*out, text[at:]])

    def may_receive(self, server: str, tool: str, kind: str, origins: frozenset[str]) -> bool:
        """Whether ``server``'s ``tool`` may receive a value of ``kind`` in plaintext: its sinks entry, else
        whether the value came from this server."""
        rule = self._sinks.get(server)
        allowed = rule(tool) if rule is not None else None
        if allowed is not None:
            return "*" in allowed or kind in allowed
        return server in origins

    def describe(self) -> dict[str, Any]:
        """For ``get_execution_limits``: what is tokenized, by which detectors, and where values may go."""
        return {
            "tokenize": sorted(name for name, on in self.tokenize.items() if on),
            "detectors": list(self.config.kinds()) if self.active else [],
            "phoneRegions": self.config.phone_regions,
            "secrets": "always replaced with [SECRET]",
            "restore": "a token in a tool call's arguments becomes its value if the tool may receive its kind "
            "(policy.pii.sinks; by default the values of the tool's own server)",
        }


@dataclass
class RunPrivacy:
    """One run's view: the client's vault, the origins of the values its results carried."""

    book: Privacy
    client: str
    tenant: str
    """The tenant the run acts for: its vault is that tenant's client's."""
    origins: dict[tuple[str, str], set[str]] = field(default_factory=dict[tuple[str, str], set[str]])
    """(kind, value) → the tokenizing servers whose results carried it in this run."""
    sensitive: set[tuple[str, str]] = field(default_factory=set[tuple[str, str]])
    """Values a tokenizing server's results carried, or restored from a token, in this run."""
    plain: set[tuple[str, str]] = field(default_factory=set[tuple[str, str]])
    """Values a ``"pii": "off"`` server's results carried in this run (left as they are, unless sensitive)."""
    _given: dict[tuple[str, str, str | None], str | None] = field(
        default_factory=dict[tuple[str, str, str | None], str | None]
    )
    """(kind, value, origin) → the token the vault gave in this run (one vault call per value and origin)."""
    _entries: dict[str, Entry | None] = field(default_factory=dict[str, Entry | None])
    """Token → what the vault said it stands for, in this run."""
    _verbatim: dict[str, str] = field(default_factory=dict[str, str])
    """Sensitive values (the first ``MAX_VERBATIM``) → their kind: found as written, wherever they stand."""
    _secrets: set[str] = field(default_factory=set[str])
    """Values of the secret-named fields of this run's results (``SECRET_FIELD``): ``[SECRET]`` wherever they are."""
    _shortest: int = MIN_SECRET_CHARS
    """Without tokenizing, a text shorter than this holds no secret: no known format or literal secret is shorter,
    nor any value of ``_secrets`` (a tool call's ``{"a": 1}`` is not scanned)."""
    _lock: threading.RLock = field(default_factory=threading.RLock)
    """A large result is harvested, and a large output masked, in a worker thread while the run goes on."""

    # ----- on the way in: what the tools said ---------------------------------------------------------------

    def harvest(self, server: str, value: Any) -> None:
        """Note the personal data in one result (or error message) of ``server`` on its way to the script, and
        (whatever the config) the secrets its fields name (``SECRET_FIELD``: ``password``, ``api_key``, …)."""
        with self._lock:
            for secret in _secret_fields(value):
                if len(self._secrets) < MAX_VERBATIM:
                    self._secrets.add(secret)
                    self._shortest = min(self._shortest, len(secret))
            if self.book.active:
                self._harvest(server, value)

    def _harvest(self, server: str, value: Any) -> None:
        book = self.book
        tokenizing = book.tokenize.get(server, False)
        found = [(f.kind, f.value) for text in _strings(value) for f in book.detectors.find(text)]
        if tokenizing:  # a field named for a kind holds one, even in a shape no detector knows ("555-0199")
            found.extend(_fields(value, book.detectors.kinds))
        for key in found:
            if not tokenizing:
                self.plain.add(key)
            elif key in self.origins:
                self.origins[key].add(server)
            elif len(self.origins) < MAX_HARVESTED:
                self.origins[key] = {server}
                self._sensitive(key)
            else:
                self._sensitive(key)

    def _sensitive(self, key: tuple[str, str]) -> None:
        self.sensitive.add(key)
        if len(self._verbatim) < MAX_VERBATIM and len(key[1]) >= MIN_VERBATIM_CHARS:
            self._verbatim.setdefault(key[1], key[0])

    # ----- on the way out: what the model reads ------------------------------------------------------------

    def mask_text(self, text: str) -> str:
        """``text`` with every secret ``[SECRET]`` and every personal value its token."""
        if not text:
            return text
        with self._lock:
            return self._mask_text(text)

    def _mask_text(self, text: str) -> str:
        book = self.book
        if len(text) < self._shortest and not book.active:
            return text
        covered = book.secrets.find(text)  # sorted, merged
        for secret in self._secrets:  # what a result's secret-named fields held, wherever it is printed
            for start in _occurrences(text, secret):
                if not _overlaps(covered, start, start + len(secret)):
                    bisect.insort(covered, (start, start + len(secret)))
        spans: list[tuple[int, int, Found | None]] = [(start, end, None) for start, end in covered]
        if book.active:
            if self._verbatim:  # known values first, even glued to other text (a file name, an extension)
                for value, kind in sorted(self._verbatim.items(), key=lambda item: -len(item[0])):
                    for start in _occurrences(text, value):
                        end = start + len(value)
                        if not _overlaps(covered, start, end):
                            bisect.insort(covered, (start, end))
                            spans.append((start, end, Found(start, end, kind, value)))
            spans.extend(
                (found.start, found.end, found)
                for found in book.detectors.find(text)
                if self._masked(found) and not _overlaps(covered, found.start, found.end)
            )
        if not spans:
            return text
        spans.sort(key=lambda span: span[0])  # tokens are given in the order values appear
        out: list[str] = []
        at = 0
        for start, end, found in spans:
            out.append(text[at:start])
            out.append(SECRET if found is None else self._token(found))
            at = end
        out.append(text[at:])
        return "".join(out)

    def mask(self, value: Any) -> Any:
        """A JSON value with every string (keys too) masked, and numbers that read as personal data tokens."""
        if isinstance(value, str):
            return self.mask_text(value)
        if isinstance(value, bool) or value is None or isinstance(value, float):
            return value
        if isinstance(value, int):
            if len(str(abs(value))) < MIN_NUMBER_DIGITS:
                return value
            text = str(value)
            masked = self.mask_text(text)
            return value if masked == text else masked
        if isinstance(value, Mapping):
            binary = _binary(value)  # pyright: ignore[reportUnknownArgumentType]
            return {
                self.mask_text(str(k)): v if binary and k == "data" else self.mask(v)
                for k, v in value.items()  # pyright: ignore[reportUnknownVariableType]
            }
        if isinstance(value, list | tuple):
            return [self.mask(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
        return value

    def described(self, description: str | None) -> str | None:
        """A description to store: masked, and this client's tokens written as their kind alone (a listing is
        for finding a script, and another client reads it)."""
        if not description:
            return description
        return TOKEN.sub(lambda m: f"[{m.group(1)}]", self.mask_text(description))

    def present(self, sealed: bytes | None, value: Any) -> Any:
        """A stored script's JSON as this client may see it: its own tokens for the stored ones, then masked
        (code a model wrote may hold values in plaintext)."""
        return self.mask(self.retokenize(sealed, value))

    def _masked(self, found: Found) -> bool:
        key = (found.kind, found.value)
        return key not in self.plain or key in self.sensitive

    def _token(self, found: Found) -> str:
        origins = self.origins.get((found.kind, found.value)) or (None,)
        token = None
        for origin in origins:
            token = self._give(found.kind, found.value, origin)
        return token or f"[{found.kind.upper()}]"

    def _give(self, kind: str, value: str, origin: str | None) -> str | None:
        key = (kind, value, origin)
        if key not in self._given:
            self._given[key] = self.book.vault.token_for(self.client, kind, value, origin, tenant=self.tenant)
        return self._given[key]

    def _lookup(self, token: str) -> Entry | None:
        if token not in self._entries:
            self._entries[token] = self.book.vault.lookup(self.client, token, tenant=self.tenant)
        return self._entries[token]

    def cut(self, text: str) -> str:
        """Text a cap cut, safe to mask: without its last word (``cut_tail``) when that word may be the start of
        a value (personal data is tokenized) or of a secret (it holds a key format's prefix or the start of a
        known secret); as it is otherwise (a cap keeps exactly the cap)."""
        if not text or text[-1].isspace():
            return text
        word = text[max(text.rfind(c) for c in " \n\t\r") + 1 :]
        if self.book.active or _partial_secret(word, self.book.secrets.literals):
            return cut_tail(text)
        return text

    def stream(self, emit: Callable[[str], Awaitable[None]]) -> MaskedStream:
        """Output as it streams, masked: a value cut between two chunks is held until it is whole."""
        return MaskedStream(self.mask_text, emit, self.cut)

    # ----- on the way to the tools ---------------------------------------------------------------------------

    def restore(self, server: str, tool: str, arguments: Any) -> tuple[Any, PiiNote]:
        """The arguments ``server``'s ``tool`` receives: this client's tokens replaced with their values where
        the tool may receive their kind (``Privacy.may_receive``), left as tokens elsewhere. The same rule holds
        for a value the script passes in plaintext that a tokenizing server's results carried (in this run or
        as a token this client was given): where the tool may not receive its kind, it receives the token."""
        restored: set[str] = set()
        withheld: set[str] = set()
        unknown = 0
        book = self.book

        def withhold(text: str) -> str:
            spans: list[tuple[int, int, str]] = []
            for found in book.detectors.find(text):
                key = (found.kind, found.value)
                if key in self.plain and key not in self.sensitive:
                    continue
                origins = self.origins.get(key)
                token = self._token(found)  # the vault learns where the value came from
                entry = self._lookup(token)
                known = frozenset(origins or ()) | (entry.origins if entry is not None else frozenset())
                if not known and key not in self.sensitive:
                    continue  # not a tokenized server's value: the model may have written it itself
                if book.may_receive(server, tool, found.kind, known):
                    continue
                withheld.add(found.kind)
                spans.append((found.start, found.end, token))
            if not spans:
                return text
            out: list[str] = []
            at = 0
            for start, end, replacement in spans:
                out.append(text[at:start])
                out.append(replacement)
                at = end
            out.append(text[at:])
            return "".join(out)

        def substitute(match: re.Match[str]) -> str:
            nonlocal unknown
            token = match.group(0)
            entry = self._lookup(token)
            if entry is None:
                unknown += 1
                return token
            if not book.may_receive(server, tool, entry.kind, entry.origins):
                withheld.add(entry.kind)
                return token
            restored.add(entry.kind)
            self._sensitive((entry.kind, entry.value))
            return entry.value

        def rewrite(text: str) -> str:
            if book.active:
                text = withhold(text)
            return TOKEN.sub(substitute, text) if "[" in text else text

        with self._lock:
            out = _map_strings(arguments, rewrite)
        return out, PiiNote(tuple(sorted(restored)), tuple(sorted(withheld)), unknown)

    def known_tokens(self, text: str) -> bool:
        """Whether ``text`` (a script) holds a token this client was given."""
        return any(self._lookup(m.group(0)) is not None for m in TOKEN.finditer(text))

    # ----- stored runs -------------------------------------------------------------------------------------------

    def seal_tokens(self, *values: Any) -> bytes | None:
        """The tokens of this client that ``values`` hold, with what they stand for, sealed for the cache (so a
        replay to another client can give that client its own tokens); None when there are none."""
        found: dict[str, list[Any]] = {}
        for text in _strings(list(values)):
            for match in TOKEN.finditer(text):
                token = match.group(0)
                if token in found:
                    continue
                entry = self._lookup(token)
                if entry is not None:
                    found[token] = [entry.kind, entry.value, sorted(entry.origins)]
        if not found:
            return None
        return self.book.sealer.seal(json.dumps(found, ensure_ascii=False).encode("utf-8"), b"pii-tokens")

    def retokenize(self, sealed: bytes | None, value: Any) -> Any:
        """A stored value (a run's output, its listing) with the tokens it was stored with replaced by this
        client's own tokens for the same values; by the kind alone (``[EMAIL]``) when they cannot be read."""
        if not sealed:
            return value
        opened = self.book.sealer.open(sealed, b"pii-tokens")
        table: dict[str, Any] | None = None
        if opened is not None:
            try:
                table = json.loads(opened)
            except ValueError:
                table = None
        if not isinstance(table, dict) or not table:
            return _replace_tokens(value, lambda token: f"[{token[1:].rsplit('_', 1)[0]}]", None)
        mapping: dict[str, str] = {}
        for token, stored in table.items():
            kind, plain, origins = stored[0], stored[1], stored[2] or [None]
            mine = None
            for origin in origins:
                mine = self._give(kind, plain, origin)
            mapping[token] = mine or f"[{kind.upper()}]"
        return _replace_tokens(value, mapping.get, set(table))

    def readable(self, sealed: bytes | None) -> bool:
        """Whether stored tokens can be re-tokenized here (no tokens, or sealed with this server's key)."""
        return not sealed or self.book.sealer.open(sealed, b"pii-tokens") is not None


def _replace_tokens(value: Any, new: Callable[[str], str | None], only: set[str] | None) -> Any:
    """``value`` with each token (of ``only``, or every token-shaped string) replaced by ``new(token)``."""

    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if only is not None and token not in only:
            return token
        return new(token) or token

    return _map_strings(value, lambda text: TOKEN.sub(substitute, text) if "[" in text else text)


def _map_strings(value: Any, rewrite: Callable[[str], str]) -> Any:
    """A copy of a JSON value with ``rewrite`` applied to every string, keys too."""
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, Mapping):
        return {rewrite(str(k)): _map_strings(v, rewrite) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list | tuple):
        return [_map_strings(v, rewrite) for v in value]  # pyright: ignore[reportUnknownVariableType]
    return value


PARTIAL_TAIL = 256
"""Characters after the last space that ``cut_tail`` drops from text cut at a cap."""


def cut_tail(text: str) -> str:
    """Text that a cap cut, without its last word when that word runs to the cut: it may be the start of a
    value (``alice.mo``) that no detector can recognise, so it goes, and ``…`` says so."""
    if not text or text[-1].isspace():
        return text
    start = max(text.rfind(c) for c in " \n\t\r") + 1
    if len(text) - start > PARTIAL_TAIL:
        start = len(text) - PARTIAL_TAIL
    return text[:start] + "…"


SECRET_PREFIXES = ("sk-", "sk_", "rk_", "gh", "github_pat_", "xox", "AKIA", "ASIA", "eyJ", "AIza", "-----BEGIN")
"""Starts of the key formats ``detect.Secrets`` knows: a word cut at a cap that holds one may be a cut key."""
MIN_PARTIAL = 4


def _partial_secret(word: str, literals: Iterable[str]) -> bool:
    """Whether ``word`` (the end of text cut at a cap) may hold the start of a secret."""
    if any(prefix in word for prefix in SECRET_PREFIXES):
        return True
    for literal in literals:
        for k in range(MIN_PARTIAL, min(len(word), len(literal)) + 1):
            if word.endswith(literal[:k]):
                return True
    return False


def _occurrences(text: str, value: str) -> Iterable[int]:
    """Where ``value`` stands in ``text``, glued to other text or not, unless it is part of a longer value: a
    number continued by a digit, or a value preceded by a letter or digit (``bob@x.com`` is not in
    ``jimbob@x.com``; it is in ``bob@x.com.txt`` and ``backup-bob@x.com``)."""
    at = text.find(value)
    n = len(value)
    while at != -1:
        before = text[at - 1] if at > 0 else ""
        after = text[at + n] if at + n < len(text) else ""
        glued_before = bool(before) and (
            before.isalnum()
            and (value[0].isalnum() or value[0] == "+")
            or before in "._%+"
            and value[0].isalnum()
            and "@" in value  # a longer address's local part
        )
        glued_after = after.isdigit() and value[-1].isdigit()  # a longer number
        if not glued_before and not glued_after:
            yield at
            at = text.find(value, at + n)
        else:
            at = text.find(value, at + 1)


def _overlaps(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end) overlaps one of ``spans`` (sorted, not overlapping each other)."""
    at = bisect.bisect_right(spans, (start, float("inf"))) - 1
    if at >= 0 and spans[at][1] > start:
        return True
    return at + 1 < len(spans) and spans[at + 1][0] < end


FIELDS: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"e_?mail(_?address)?|mail_?address|contact_?email", re.IGNORECASE),
    "phone": re.compile(r"(tele)?phone(_?number)?|mobile|cell(_?phone)?|tel|fax|msisdn", re.IGNORECASE),
    "card": re.compile(r"(credit_?|debit_?|payment_?)?card(_?number|_?no)?|cc_?(number|num|no)|pan", re.IGNORECASE),
    "iban": re.compile(r"iban", re.IGNORECASE),
    "ip": re.compile(r"ip|ip_?addr(ess)?|remote_?addr(ess)?|client_?ip", re.IGNORECASE),
    "ssn": re.compile(r"ssn|social_?security(_?number)?", re.IGNORECASE),
}
"""Field names (``-`` read as ``_``, any case) whose string value is a value of that kind, in a tokenizing server's
results, whatever its shape."""


SECRET_FIELD = re.compile(
    r".*(password|passwd|passphrase|secret|apikey|accesskey|privatekey|credential|authorization|signingkey)"
    r".*|(.*token|token.*)",
    re.IGNORECASE,
)
"""A field name (lower case, ``-``, ``_``, ``.`` and spaces removed) whose string value in any server's results is
a secret: ``password``, ``client_secret``, ``api_key``, ``X-Api-Key``, ``accessToken``, ``refresh_token``,
``private_key``; not ``max_tokens``/``tokens`` (counts), nor ``author``."""
MIN_SECRET_FIELD = 8
_NAME_SEPARATORS = str.maketrans("", "", "-_. ")


def _secret_fields(value: Any) -> Iterable[str]:
    """The string values (of ``MIN_SECRET_FIELD`` characters or more, with no space but after a scheme such as
    ``Bearer``) under keys ``SECRET_FIELD`` names, at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for k, v in item.items():  # pyright: ignore[reportUnknownVariableType]
                if isinstance(v, str):
                    name = str(k).lower().translate(_NAME_SEPARATORS)  # pyright: ignore[reportUnknownArgumentType]
                    text = v.strip()
                    if name.endswith("tokens") or len(text) < MIN_SECRET_FIELD or not SECRET_FIELD.fullmatch(name):
                        continue
                    scheme, _, rest = text.partition(" ")
                    if not rest:
                        yield text
                    elif scheme.lower() in ("bearer", "basic", "token") and " " not in rest.strip():
                        yield rest.strip()
                else:
                    stack.append(v)
        elif isinstance(item, list | tuple):
            stack.extend(item)  # pyright: ignore[reportUnknownArgumentType]


def _field_value(kind: str, value: str) -> bool:
    """Whether a field's value can be of its kind (a name alone is not enough: ``"card": "visa"`` is not)."""
    digits = sum(c.isdigit() for c in value)
    if kind == "email":
        return "@" in value
    if kind == "phone":
        return digits >= 6
    if kind == "card":
        return 12 <= digits <= 19
    if kind == "iban":
        return len(value.replace(" ", "")) >= 15 and digits >= 2
    if kind == "ssn":
        return digits == 9
    if kind == "ip":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return False
        return True
    return False


def _fields(value: Any, kinds: Iterable[str]) -> Iterable[tuple[str, str]]:
    """(kind, value) for each string (or long number) under a key that names a kind (``FIELDS``)."""
    wanted = {kind: FIELDS[kind] for kind in kinds if kind in FIELDS}
    if not wanted:
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            for k, v in item.items():  # pyright: ignore[reportUnknownVariableType]
                if isinstance(v, int) and not isinstance(v, bool):
                    v = str(v)
                if isinstance(v, str):
                    text = v.strip()
                    name = str(k).replace("-", "_")  # pyright: ignore[reportUnknownArgumentType]
                    if MIN_VERBATIM_CHARS <= len(text) <= 100:
                        yield from (
                            (kind, text)
                            for kind, pattern in wanted.items()
                            if pattern.fullmatch(name) and _field_value(kind, text)
                        )
                else:
                    stack.append(v)
        elif isinstance(item, list | tuple):
            stack.extend(item)  # pyright: ignore[reportUnknownArgumentType]


def _binary(item: Mapping[str, Any]) -> bool:
    """An image or audio value (``{"type": "image", "data": <base64>, "mimeType": …}``): its data is not text."""
    return item.get("type") in ("image", "audio") and isinstance(item.get("data"), str)


def _strings(value: Any) -> Iterable[str]:
    """Every string in a JSON value (keys too), and numbers long enough to be personal data, as text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            continue
        elif isinstance(item, int):
            if len(str(abs(item))) >= MIN_NUMBER_DIGITS:
                yield str(item)
        elif isinstance(item, Mapping):
            binary = _binary(item)  # pyright: ignore[reportUnknownArgumentType]
            for k, v in item.items():  # pyright: ignore[reportUnknownVariableType]
                yield str(k)  # pyright: ignore[reportUnknownArgumentType]
                if not (binary and k == "data"):
                    stack.append(v)
        elif isinstance(item, list | tuple):
            stack.extend(item)  # pyright: ignore[reportUnknownArgumentType]


class MaskedStream:
    """Output chunks masked on their way out. A chunk goes out up to its last line break; the rest waits for
    the next chunk (a value is never split across two messages), unless it grows past ``STREAM_HOLD``
    characters, when all but the last ``STREAM_TAIL`` go. A PEM block is held until its end line."""

    def __init__(
        self,
        mask: Callable[[str], str],
        emit: Callable[[str], Awaitable[None]],
        cut: Callable[[str], str] = lambda text: text,
    ) -> None:
        self._mask = mask
        self._emit = emit
        self._cut = cut
        self._pending = ""

    async def write(self, text: str) -> None:
        self._pending += text
        pending = self._pending
        cut = pending.rfind("\n") + 1
        begin = pending.rfind(_PEM_BEGIN)
        if begin != -1 and "-----END" not in pending[begin:] and len(pending) - begin < 64 * 1024:
            cut = min(cut, begin)
        if cut == 0 and len(pending) > STREAM_HOLD:
            cut = len(pending) - STREAM_TAIL
            while cut > 0 and not pending[cut - 1].isspace():  # cut at a space: not inside a value
                cut -= 1
            if cut == 0:
                cut = len(pending) - STREAM_TAIL
        if cut <= 0:
            return
        out, self._pending = pending[:cut], pending[cut:]
        await self._emit(self._mask(out))

    async def flush(self, cut: bool = False) -> None:
        """Send what is held. ``cut``: the output was cut at its cap, so its last word may be part of a value
        (``RunPrivacy.cut``)."""
        if self._pending:
            out, self._pending = self._pending, ""
            await self._emit(self._mask(self._cut(out) if cut else out))


__all__ = ["MaskedStream", "PiiNote", "Privacy", "RunPrivacy", "cut_tail"]
