"""The detectors: where personal data and secrets are in a text.

``Detectors.find`` returns every value of the kinds that are on, as ``Found`` (start, end, kind, value), sorted
by start and never overlapping: of two matches that overlap, the longer is kept, then the earlier; at the same
start and length a custom kind wins over a built-in one, then the stricter format: card, IBAN, SSN, e-mail,
IP, phone. ``Secrets.find`` returns the spans of secrets, which are replaced and never restored.

Every pattern is compiled once, when the module is imported (a custom kind's when it is made). Each scan
starts at a literal or a small set of characters (an ``@``, a dot, a dash, a digit run), so the regex
engine skips the rest of the text in C, and no pattern backtracks more than a bounded amount at a position:
100 KB of ``a@a@...`` or ``1 1 1 ...`` takes milliseconds. A megabyte of code and logs takes about a tenth
of a second; a megabyte of customer rows dense with personal data a few tenths, most of it for phone
numbers (``bench/pii_detection.py`` measures both).

The built-in kinds:

- ``email``: a local part of letters, digits and ``_ % + -`` in runs joined by dots or apostrophes (at most
  64 characters), ``@``, a domain of dot-separated labels (letters, digits, inner hyphens) and a top-level
  domain of 2 to 63 ASCII letters. Not found: quoted local parts, IP-literal domains (``user@[192.0.2.1]``),
  internationalised names, an address without a dot in its domain (``user@localhost``, ``alice@example``:
  names on a host, not deliverable addresses), an address inside a longer word or address
  (``A@b@c@example.com``), version pins (``lodash@4.17.21``) and a file name whose last label is a common
  file extension that is no top-level domain (``icon@2x.png``).
- ``phone``: numbers valid by ``phonenumbers``' metadata, in a candidate span: 7 to 20 digits in groups
  separated by one of space, ``.``, ``-``, ``/`` or parentheses, with an optional leading ``+``. A number
  with ``+`` (E.164: ``+1 415 555 0132``, ``+49 (0)30 2345678``) is found whatever the regions; a national
  one (``(415) 555-0132``, ``020 7946 0958``, ``030 2345678``, ``01 23 45 67 89``) when it is valid read in
  one of ``phone_regions`` (a US reading also finds the other NANP countries' numbers, as ``phonenumbers``
  does). Outside the NANP and the regions without one, a national number needs its national prefix
  (``030 2345678``, not ``30 2345678``). A candidate of plain groups (single separators, an area code in
  parentheses at most) is checked against the metadata in the steps of ``phonenumbers``' own parse and
  validity check, where those steps are simple; every other candidate is given to ``PhoneNumberMatcher``
  (leniency ``VALID``), and only candidates that could be valid in a region get that far (the matcher costs
  about a tenth of a millisecond a call). A run of digits with no separator and no ``+`` (``4155550132``) is
  read only after a word that labels it within 24 characters before it (phone, tel, mobile, cell, fax,
  pager, sms, whatsapp, msisdn; handy, telefon, téléphone, portable, teléfono, telefono): unlabelled, such a run
  is more often an id, an amount or a timestamp. Where US or CA numbers are read, a number written the North
  American way with its separators (``(555) 123-4567``, ``555-123-4567``, ``+1 555.123.4567``) is a phone by
  its shape even when no such number is assigned (fictional customers' phones are written so), unless its
  area code starts with 0 or 1 or it is a placeholder (one repeated digit, ``123-456-7890``). Not found:
  dates (``2026-12-01``, ``01.02.2026``,
  ``12/31/2025``), times, decimals (``37.7749295``), dotted quads, numbers with three or more one-digit
  groups (``1 2 3 4 5 6 7 8``), card numbers (a run the card detector takes), the last groups of a spaced
  IBAN, and a number glued to letters, to more digits or to a time (``x4155550132``, ``4155550132.00``,
  ``2026 0115 10:20``). Extensions are not part of the value.
- ``card``: 13 to 19 digits, bare or in groups of 3 to 6 digits separated by single spaces or single
  dashes (one kind of separator throughout), Luhn-valid, with a known issuer prefix and a length that issuer
  uses: Visa ``4`` (16 or 19 digits), Mastercard ``51``–``55`` and ``2221``–``2720`` (16), American
  Express ``34``/``37`` (15), Discover ``6011``, ``644``–``649``, ``65`` (16–19), JCB ``3528``–``3589``
  (16–19), Diners Club ``300``–``305``, ``3095``, ``36``, ``38``, ``39`` (14–19), UnionPay ``62``
  (16–19), Mir ``2200``–``2204`` (16–19), Maestro ``5018``, ``5020``, ``5038``, ``5893``, ``6304``,
  ``6759``, ``6761``–``6763`` (16–19). Not found: 13-digit Visa numbers (none has been issued for years,
  and a 13-digit run starting with 4 is far more often an EAN-13 barcode), 15-digit runs with Visa's
  prefix (IMEIs), a run that a letter, a digit or a separator and a digit continues on either side (hex
  hashes, longer ids), masked numbers.
- ``iban``: two letters of a country in the IBAN registry, two check digits (02–98), the BBAN, bare or in
  groups of four separated by single spaces, of the length the registry gives that country (all SEPA
  countries, GB and the other registry members) and with ISO 13616 mod-97 equal to 1. Letters may be of
  either case. Not found: a country outside the registry, a wrong length or checksum, a run glued to
  letters or digits. A spaced IBAN followed by a short word (``BE68 5390 0754 7034 EUR``) is read without it.
- ``ip``: IPv4 in dotted-decimal (octets 0–255, no leading zeros, not part of a longer dotted run such as
  ``1.2.3.4.5`` or an OID, not right after a letter, ``v``, or a word such as version, build or section)
  and IPv6 as ``ipaddress`` reads it (compressed forms, ``::ffff:192.0.2.1``; a zone ``%eth0`` is not part
  of the value); an IPv6 value needs a group of three or more hex digits, four groups or an embedded IPv4
  (``a::b`` and ``xs[1::2]`` are code). Not found, as no person's: the unspecified addresses (``0.0.0.0``,
  ``::``), loopback (``127.0.0.0/8``, ``::1``, their IPv4-mapped forms), multicast (``224.0.0.0/4``,
  ``ff00::/8``) and the reserved ``240.0.0.0/4`` (netmasks such as ``255.255.255.0``, broadcast). Private,
  link-local and documentation ranges are found: such an address still tells a device apart.
- ``ssn``: a US Social Security number ``ddd-dd-dddd`` outside the ranges the SSA never issues (area
  ``000``, ``666``, ``900``–``999``; group ``00``; serial ``0000``). Nine bare digits, or ``ddd dd dddd``,
  only right after a label (``SSN``, ``SSN#:``, ``SS#``, ``social security number``, ``"ssn": "``): bare,
  nine digits are any id.

A custom kind (``CustomKind``) is a name and a Python regex; the value is the whole match. A regex that
matches the empty string is refused (tried on a set of probe texts; a zero-length match that only another
text would give is skipped when it is used). Its regex is the config's author's: one that backtracks badly
is slow on every result.

``Secrets`` finds: the literal values it is given (at least ``MIN_SECRET_CHARS`` characters; for a value
``<scheme> <credential>`` with scheme Bearer, Basic or Token the credential too), the credential after
``Bearer`` (8 or more token characters with a digit or a symbol, or 20 or more: ``Bearer authentication``
is prose), AWS access key ids (``AKIA``, ``ASIA``, ``ABIA``, ``ACCA`` and 16 more), AWS secret keys after
their label (``aws_secret_access_key = ...``, ``"SecretAccessKey": "..."``), GitHub tokens (``ghp_``,
``gho_``, ``ghu_``, ``ghs_``, ``ghr_`` and 36 or more, ``github_pat_``), Slack tokens (``xoxa-``,
``xoxb-``, ``xoxp-``, ``xoxo-``, ``xoxs-``, ``xoxr-``) and incoming-webhook URLs, JWTs (``eyJ...``
``.eyJ...`` ``.signature``), PEM private key blocks (``BEGIN ... PRIVATE KEY`` to the matching ``END``,
whole, in plain text or with ``\\n`` escapes in JSON; an unterminated one to the end of its base64 lines),
``sk-``/``sk-ant-``/``sk-proj-`` keys (20 or more characters with a digit), Stripe ``sk_live_``,
``sk_test_``, ``rk_live_``, ``rk_test_`` (not the publishable ``pk_``), and Google API keys (``AIza`` and
35). Spans are sorted and merged where they overlap or touch.
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import re
import string
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._lazy import LazyModule

if TYPE_CHECKING:
    import phonenumbers
else:
    phonenumbers = LazyModule("phonenumbers")  # its metadata is read when a phone detector is first built

KINDS: tuple[str, ...] = ("email", "phone", "card", "iban", "ip", "ssn")
"""The built-in kinds."""

_TIE_RANK: dict[str, int] = {"card": 0, "iban": 1, "ssn": 2, "email": 3, "ip": 4, "phone": 5}
"""At equal start and length, the stricter format wins (``069-80-2030`` is an SSN before it is a phone)."""

MIN_SECRET_CHARS = 8
"""A literal secret shorter than this is not searched for (it would match everywhere)."""

_KIND_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_RESERVED = frozenset((*KINDS, "secret"))


@dataclass(frozen=True)
class Found:
    """One value in a text: ``text[start:end] == value``."""

    start: int
    end: int
    kind: str
    value: str


@dataclass(frozen=True)
class CustomKind:
    """A kind of the config's own: a name (``employee_id``) and a Python regex whose whole match is the value.
    ValueError for a bad name (not ``[a-z][a-z0-9_]{0,31}``, a built-in kind, ``secret``), a regex that does
    not compile or one that matches the empty string."""

    kind: str
    regex: str
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _KIND_NAME.fullmatch(self.kind):
            raise ValueError(f"custom kind {self.kind!r}: a kind is a lower-case name, [a-z][a-z0-9_]{{0,31}}")
        if self.kind in _RESERVED:
            raise ValueError(f"custom kind {self.kind!r}: that name is a built-in kind")
        try:
            pattern = re.compile(self.regex)
        except re.error as exc:
            raise ValueError(f"custom kind {self.kind!r}: its regex does not compile: {exc}") from None
        if any(m.end() == m.start() for probe in _EMPTY_PROBES for m in pattern.finditer(probe)):
            raise ValueError(f"custom kind {self.kind!r}: its regex matches the empty string")
        object.__setattr__(self, "pattern", pattern)


_EMPTY_PROBES = ("", *string.printable, string.printable, "Aa0 _-.@\n", "ÄÉßøπ", "\u00a0\u2028")
"""Texts a custom regex is tried on: a zero-length match in any of them is refused (one that matches empty
only elsewhere, ``(?<=foo)(?=bar)``, has its zero-length matches skipped when it is used)."""


# ----- e-mail -------------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"""
    (?<![A-Za-z0-9._%+\-@])(?<![A-Za-z0-9]')      # not inside a longer local part, word or address
    (?P<local>[A-Za-z0-9_%+\-]+(?:['.][A-Za-z0-9_%+\-]+)*)
    @
    (?P<domain>(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.){1,126})
    (?P<tld>[A-Za-z]{2,63})
    (?![A-Za-z0-9_\-]|\.[A-Za-z0-9])             # not inside a longer domain or word
    """,
    re.VERBOSE,
)
_FILE_EXTENSIONS = frozenset(
    "png jpg jpeg gif svg webp ico bmp tif tiff heic pdf txt json yaml yml toml ini cfg html htm css scss "
    "js mjs cjs ts tsx jsx vue lock log csv tsv xml exe dll jar whl gz tgz xz wav".split()
)


_LOCAL_RUN = re.compile(r"[A-Za-z0-9._%+'\-]{1,64}$")
"""The characters of a local part right before an ``@`` (searched back from it, at most 64)."""


def _find_email(text: str) -> Iterable[tuple[int, int]]:
    # only from each "@" back to where its local part can start: a plain scan would try the pattern at
    # every letter of the text
    pos = 0  # where the next local part may start: after the last address, after the last "@"
    at = text.find("@")
    while at != -1:
        run = _LOCAL_RUN.search(text, max(pos, at - 64), at)
        if run is not None:
            start = run.start()
            while start < at and text[start] == "'":
                start += 1
            m = _EMAIL.match(text, start)
            if m is not None and m["tld"].lower() not in _FILE_EXTENSIONS:
                yield m.start(), m.end()
                pos = m.end()
        pos = max(pos, at + 1)
        at = text.find("@", pos)


# ----- payment cards ------------------------------------------------------------------------------

_CARD = re.compile(
    r"""
    [0-9](?<![0-9A-Za-z_][0-9])(?<![0-9][ \-][0-9])  # not continuing a word, a number or a grouped number
    (?:[ \-]?[0-9]){12,18}
    (?![0-9A-Za-z_])(?![ \-][0-9])              # nor continued by one
    """,
    re.VERBOSE,
)
_MAESTRO = frozenset((5018, 5020, 5038, 5893, 6304, 6759, 6761, 6762, 6763))


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check of a string of digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _issuer_length_ok(d: str) -> bool:
    """Whether a known issuer uses this prefix with this length."""
    n, p2, p3, p4 = len(d), int(d[:2]), int(d[:3]), int(d[:4])
    if d[0] == "4":
        return n in (16, 19)
    if 51 <= p2 <= 55 or 2221 <= p4 <= 2720:
        return n == 16
    if p2 in (34, 37):
        return n == 15
    if 300 <= p3 <= 305 or p4 == 3095 or p2 in (36, 38, 39):
        return 14 <= n <= 19
    if p4 == 6011 or 644 <= p3 <= 649 or p2 == 65 or 3528 <= p4 <= 3589 or p2 == 62:
        return 16 <= n <= 19
    if 2200 <= p4 <= 2204 or p4 in _MAESTRO:
        return 16 <= n <= 19
    return False


def _card_digits(candidate: str) -> str | None:
    """The digits of a card-shaped candidate, or None: one kind of separator, groups of 3 to 6 digits."""
    separators = {ch for ch in candidate if ch in " -"}
    if len(separators) > 1:
        return None
    if separators:
        groups = candidate.split(separators.pop())
        if any(not 3 <= len(g) <= 6 for g in groups):
            return None
        return "".join(groups)
    return candidate


def _is_card(candidate: str) -> bool:
    digits = _card_digits(candidate)
    return digits is not None and 13 <= len(digits) <= 19 and _issuer_length_ok(digits) and luhn_valid(digits)


def _looks_like_card(candidate: str) -> bool:
    return _CARD.fullmatch(candidate) is not None and _is_card(candidate)


def _find_card(text: str) -> Iterable[tuple[int, int]]:
    for m in _CARD.finditer(text):
        if _is_card(m.group()):
            yield m.start(), m.end()


# ----- IBAN ---------------------------------------------------------------------------------------

IBAN_LENGTHS: dict[str, int] = {
    **dict.fromkeys(("NO",), 15),
    **dict.fromkeys(("BE",), 16),
    **dict.fromkeys(("DK", "FI", "FO", "GL", "NL", "SD", "FK"), 18),
    **dict.fromkeys(("MK", "SI"), 19),
    **dict.fromkeys(("AT", "BA", "EE", "KZ", "LT", "LU", "XK", "MN"), 20),
    **dict.fromkeys(("CH", "HR", "LI", "LV"), 21),
    **dict.fromkeys(("BG", "BH", "CR", "DE", "GB", "GE", "IE", "ME", "RS", "VA"), 22),
    **dict.fromkeys(("AE", "GI", "IL", "IQ", "TL", "OM", "SO"), 23),
    **dict.fromkeys(("AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"), 24),
    **dict.fromkeys(("PT", "ST", "LY"), 25),
    **dict.fromkeys(("IS", "TR"), 26),
    **dict.fromkeys(("FR", "GR", "IT", "MC", "MR", "SM", "BI", "DJ"), 27),
    **dict.fromkeys(("AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "PL", "SV", "NI", "HN"), 28),
    **dict.fromkeys(("BR", "EG", "PS", "QA", "UA"), 29),
    **dict.fromkeys(("JO", "KW", "MU", "YE"), 30),
    **dict.fromkeys(("MT", "SC"), 31),
    **dict.fromkeys(("LC",), 32),
    **dict.fromkeys(("RU",), 33),
}
"""The IBAN registry's length per country (ISO 13616; the registry as of 2025)."""

_IBAN = re.compile(
    r"""
    [0-9](?<=(?<![A-Za-z0-9])[A-Za-z][A-Za-z][0-9])[0-9]       # the check digits, after the country code
    (?:[A-Za-z0-9]{11,30}|(?:\ [A-Za-z0-9]{4}){2,7}(?:\ [A-Za-z0-9]{1,3})?)
    (?![A-Za-z0-9])
    """,
    re.VERBOSE,
)
"""From the first check digit (a scan that stops at digits, fewer than letters); the country code is the
two letters before it."""


def iban_valid(compact: str) -> bool:
    """Whether a compact IBAN (no spaces, either case) has its country's length and mod-97 == 1."""
    compact = compact.upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not "02" <= compact[2:4] <= "98":
        return False
    if not compact[4:].isalnum() or not compact.isascii():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def _find_iban(text: str) -> Iterable[tuple[int, int]]:
    for m in _IBAN.finditer(text):
        start = m.start() - 2
        value = text[start : m.end()]
        if " " not in value:
            if iban_valid(value):
                yield start, m.end()
            continue
        # spaced: the last group or two may be a word that follows (``... 7034 EUR``)
        groups = value.split(" ")
        for keep in range(len(groups), max(len(groups) - 3, 3), -1):
            if iban_valid("".join(groups[:keep])):
                yield start, start + len(" ".join(groups[:keep]))
                break


# ----- IP addresses -------------------------------------------------------------------------------

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4_QUICK = re.compile(r"\.(?<=[0-9]\.)[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(?![\w]|\.[0-9])")
"""From the first dot of a dotted quad (a scan that stops at dots, not at every digit); the first octet is
read back from it."""
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
_IPV4_NOT_AFTER = re.compile(
    r"(?i)(?:\b(?:version|ver|release|build|section|chapter|rule|step|clause|rev|revision)|§)\s*\.?\s*$"
)
_IPV6_QUICK = re.compile(r":(?::|(?:[0-9A-Fa-f]{1,4}:){3})")
"""Where an IPv6 address may be: a ``::`` or three colon-separated groups in a row."""
_IPV6_CHARS = frozenset("0123456789abcdefABCDEF:")
_IPV6_RUN = re.compile(r"[0-9A-Fa-f:]*")
_IPV6 = re.compile(
    r"""
    (?<![\w:.])
    (?:[0-9A-Fa-f]{0,4}:){2,7}
    (?:[0-9]{1,3}(?:\.[0-9]{1,3}){3}|[0-9A-Fa-f]{1,4})?
    (?![\w:]|\.[0-9])
    """,
    re.VERBOSE,
)


def _ip_is_personal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_unspecified or address.is_loopback or address.is_multicast:
        return False
    return not (isinstance(address, ipaddress.IPv4Address) and address.is_reserved)


def _find_ip(text: str) -> Iterable[tuple[int, int]]:
    for m in _IPV4_QUICK.finditer(text):
        start = m.start()
        while start > 0 and start > m.start() - 4 and "0" <= text[start - 1] <= "9":
            start -= 1
        if start and (text[start - 1].isalnum() or text[start - 1] in "_."):
            continue
        value = text[start : m.end()]
        if not _IPV4.fullmatch(value) or _IPV4_NOT_AFTER.search(text, max(0, start - 16), start):
            continue
        if _ip_is_personal(ipaddress.IPv4Address(value)):
            yield start, m.end()
    pos = 0
    for quick in _IPV6_QUICK.finditer(text):
        if quick.start() < pos:
            continue
        # an address can only start where the run of hex digits and colons around the hit starts (inside
        # the run, the character before is one of them): that start is tried once, the run then skipped
        start = quick.start()
        while start > 0 and text[start - 1] in _IPV6_CHARS:
            start -= 1
        run_end = _IPV6_RUN.match(text, quick.start())
        pos = run_end.end() if run_end else quick.end()
        m = _IPV6.match(text, start)
        if m is None:
            continue
        value = m.group()
        if "::" not in value and value.count(":") < 7:
            continue
        try:
            address = ipaddress.IPv6Address(value)
        except ValueError:
            continue
        groups = [g for g in value.split(":") if g]
        if not (any(len(g) >= 3 for g in groups) or len(groups) >= 4):
            continue
        if _ip_is_personal(address):
            yield m.start(), m.end()


# ----- US SSN -------------------------------------------------------------------------------------

_SSN = re.compile(r"-(?<=(?<![\w\-])[0-9]{3}-)[0-9]{2}-[0-9]{4}(?![\w\-])")
"""From the first dash of ``ddd-dd-dddd`` (a scan that stops at dashes); the area is the three digits before."""
_SSN_LABELLED = re.compile(
    r"""
    [Ss](?<![A-Za-z][Ss])
    (?i:(?:sn|s\ ?\#|ocial[\ _\-]?security(?:[\ _\-]?(?:number|num|no|nr))?)(?![a-z]))
    [\s"':=\#.()\-]{0,6}
    (?P<value>[0-9]{3}(?P<sep>\ ?)[0-9]{2}(?P=sep)[0-9]{4})
    (?![\w\-])
    """,
    re.VERBOSE,
)


def ssn_valid(digits: str) -> bool:
    """Whether nine digits are outside the ranges the SSA never issues."""
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _find_ssn(text: str) -> Iterable[tuple[int, int]]:
    for m in _SSN.finditer(text):
        start = m.start() - 3
        if ssn_valid(text[start : m.end()].replace("-", "")):
            yield start, m.end()
    for m in _SSN_LABELLED.finditer(text):
        if ssn_valid(m["value"].replace(" ", "")):
            yield m.start("value"), m.end("value")


# ----- phone numbers ------------------------------------------------------------------------------

_DIGIT_RUN = re.compile(r"[0-9](?<![\w@./\-][0-9])(?:[0-9]|[ ().\-/]{1,3}[0-9]){6,}")
"""Where a phone number may be: 7 or more digits with short separator runs between them (the scan skips
every other character in C); the candidate regex below is tried only around these."""
_PHONE_RUN = re.compile(
    r"""
    (?<![\w@./\-])                               # not inside a word, an address, a path or an id
    (?!(?:19|20)[0-9][0-9][\-./](?:0?[1-9]|1[0-2])[\-./](?:0?[1-9]|[12][0-9]|3[01])(?![0-9]|[\-./][0-9]))  # not a date
    (?!(?:0?[1-9]|[12][0-9]|3[01])[\-./](?:0?[1-9]|[12][0-9]|3[01])[\-./](?:[0-9][0-9]){1,2}(?![0-9]|[\-./][0-9]))
    (?:\+|\(\+?)?
    [0-9](?:(?:[ .\-/]|\)[ .\-/]?|[ .\-/]?\()?[0-9]){6,19}
    \)?
    """,
    re.VERBOSE,
)
_DECIMAL = re.compile(r"[0-9]+\.[0-9]+")
_DOTTED_QUAD = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")
_PHONE_LABEL = re.compile(
    r"""(?ix)
    (?<![a-z])(?:phone|telephone|tel|mobile|mobil|cell|cellphone|fax|handy|telefon|tel[ée]fono|t[ée]l[ée]phone
    |portable|pager|whatsapp|sms|msisdn)
    \w*["']?\s*[.:=]?\s*["']?\s*$
    """
)
_GROUPS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class _Region:
    """What the phone detector reads of a region's metadata (the same metadata ``phonenumbers`` validates with)."""

    code: str
    country_code: int
    general: re.Pattern[str]
    general_lengths: frozenset[int]
    types: tuple[tuple[re.Pattern[str], frozenset[int]], ...]
    """Each type of number the region has (fixed line, mobile, toll free, ...): pattern and lengths."""
    any_type: re.Pattern[str]
    national_prefix: re.Pattern[str] | None
    """The national prefix as ``phonenumbers`` strips it when parsing."""
    transformed: bool
    """Whether the region rewrites what follows its national prefix (no shortcut is taken for it)."""
    international_prefix: re.Pattern[str] | None
    leading_digits: re.Pattern[str] | None

    def plausible(self, digits: str) -> bool:
        """A cheap necessary condition for a national-format number of this region (the matcher decides):
        with or without the national prefix, a number of some region of the same country code (a US reading
        finds Canadian numbers, as ``phonenumbers`` does), or one dialled with the international prefix."""
        if self.international_prefix is not None and self.international_prefix.match(digits):
            return True
        any_type = _country_any_type(self.country_code)
        # without its national prefix, a national number is read only where the prefix is optional (NANP)
        # or there is none (Spain, Italy): elsewhere phonenumbers wants it (and 263-66-1234 is no German number)
        if (self.country_code == 1 or self.national_prefix is None) and any_type.fullmatch(digits):
            return True
        if self.national_prefix is not None:
            prefix = self.national_prefix.match(digits)
            if prefix is not None and prefix.end() and any_type.fullmatch(digits[prefix.end() :]):
                return True
        return False

    def has_type(self, national: str) -> bool:
        """``phonenumbers``' number type is not UNKNOWN: the general pattern and one type's pattern match."""
        return _desc_matches(national, self.general, self.general_lengths) and any(
            _desc_matches(national, pattern, lengths) for pattern, lengths in self.types
        )


def _desc_matches(national: str, pattern: re.Pattern[str], lengths: frozenset[int]) -> bool:
    return (not lengths or len(national) in lengths) and pattern.fullmatch(national) is not None


_NUMBER_TYPES = (
    "fixed_line",
    "mobile",
    "toll_free",
    "premium_rate",
    "shared_cost",
    "personal_number",
    "voip",
    "pager",
    "uan",
    "voicemail",
)


@functools.lru_cache(maxsize=512)
def _region_or_none(code: str) -> _Region | None:
    metadata = phonenumbers.PhoneMetadata.metadata_for_region(code)
    if metadata is None or metadata.general_desc is None or metadata.general_desc.national_number_pattern is None:
        return None
    parsing = metadata.national_prefix_for_parsing or metadata.national_prefix
    types = tuple(
        (re.compile(desc.national_number_pattern), frozenset(desc.possible_length or ()))
        for desc in (getattr(metadata, name, None) for name in _NUMBER_TYPES)
        if desc is not None and desc.national_number_pattern
    )
    general = metadata.general_desc.national_number_pattern
    return _Region(
        code=code,
        country_code=metadata.country_code or 0,
        general=re.compile(general),
        general_lengths=frozenset(metadata.general_desc.possible_length or ()),
        types=types,
        any_type=re.compile("|".join(f"(?:{p.pattern})" for p, _ in types) if types else general),
        national_prefix=re.compile(parsing) if parsing else None,
        transformed=bool(metadata.national_prefix_transform_rule),
        international_prefix=re.compile(metadata.international_prefix) if metadata.international_prefix else None,
        leading_digits=re.compile(metadata.leading_digits) if metadata.leading_digits else None,
    )


@functools.lru_cache(maxsize=256)
def _country_any_type(country_code: int) -> re.Pattern[str]:
    regions = [_region_or_none(code) for code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE.get(country_code, ())]
    patterns = [f"(?:{r.any_type.pattern})" for r in regions if r is not None]
    return re.compile("|".join(patterns) if patterns else "(?!)")


def _region(code: str) -> _Region:
    region = _region_or_none(code)
    if region is None:
        raise ValueError(f"unknown phone region {code!r}: an ISO 3166 region code such as US, GB, DE, FR")
    return region


def _valid_in_country(country_code: int, national: str) -> bool:
    """``phonenumbers.is_valid_number`` of a parsed number: the region is picked among those of the country
    code (by leading digits, else the first with a known type), then the number must have a type there."""
    if not _country_any_type(country_code).fullmatch(national):
        return False  # no region of the country code has a type for it (one regex for the 25 NANP regions)
    for code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE.get(country_code, ()):
        region = _region_or_none(code)
        if region is None:
            continue
        if region.leading_digits is not None:
            if region.leading_digits.match(national):
                return region.has_type(national)
        elif region.has_type(national):
            return True
    return False


_PLAIN_PHONE = re.compile(r"\+?[0-9]*[ .\-]?(?:\((?P<area>[0-9]{1,5})\)[ .\-]?)?[0-9]+(?:[ .\-][0-9]+)*")
"""A candidate whose reading is plain: digit groups with single spaces, dots or dashes, an area code in
parentheses at most (no ``(0)`` after a country code, no slashes, no extension)."""


def _plainly_valid(candidate: str, digits: str, international: bool, regions: tuple[_Region, ...]) -> bool:
    """Whether a plain candidate is, whole, a number ``PhoneNumberMatcher`` (leniency VALID) finds valid:
    the same metadata and the same steps as its parse and checks, taken only where they are simple (no
    country code inside a national number, no national prefix after a country code, no rewriting region).
    False means "ask the matcher", never "not a phone number"."""
    plain = _PLAIN_PHONE.fullmatch(candidate)
    if plain is None:
        return False
    if international:
        if plain["area"] is not None and plain["area"].startswith("0"):
            return False
        for size in (1, 2, 3):
            country_code = int(digits[:size])
            if country_code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE:
                break
        else:
            return False
        national = digits[size:]
        main = _region_or_none(phonenumbers.region_code_for_country_code(country_code))
        if main is None or (main.national_prefix is not None and main.national_prefix.match(national)):
            return False
        return _valid_in_country(country_code, national)
    for region in regions:
        if region.transformed or region.national_prefix is None or digits.startswith(str(region.country_code)):
            continue
        if region.international_prefix is not None and region.international_prefix.match(digits):
            continue
        prefix = region.national_prefix.match(digits)
        national, stripped = digits, False
        if prefix is not None and prefix.end():
            # phonenumbers keeps the prefix when the number fits the region only with it
            if not (region.general.fullmatch(digits) and not region.general.fullmatch(digits[prefix.end() :])):
                national, stripped = digits[prefix.end() :], True
        # without its national prefix, a national number is read only where the prefix is optional (NANP)
        if (stripped or region.country_code == 1) and _valid_in_country(region.country_code, national):
            return True
    return False


@functools.lru_cache(maxsize=8192)
def _matches(candidate: str, region: str) -> tuple[tuple[int, int], ...]:
    """What ``PhoneNumberMatcher`` finds in a candidate, read in a region (``ZZ``: only ``+`` numbers)."""
    return tuple(
        (m.start, m.end)
        for m in phonenumbers.PhoneNumberMatcher(candidate, region, leniency=phonenumbers.Leniency.VALID)
    )


_IBAN_BEFORE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: [A-Z0-9]{4})+ $")


def _phone_bounded(text: str, start: int, end: int) -> bool:
    """Whether a match stands alone: no letter or digit glued to it, not inside a longer grouped number."""
    if start:
        before = text[start - 1]
        if before.isalnum() or before in "_@":
            return False
        if text[start] != "+" and start >= 2 and before in " .-/" and text[start - 2].isdigit():
            return False
        if before == " " and _IBAN_BEFORE.search(text, max(0, start - 40), start):
            return False  # the last groups of a spaced IBAN (NL47 UQRE 2574 1263 44)
    if end < len(text):
        after = text[end]
        if after.isalnum() or after == "_":
            return False
        if after in " .-/:" and end + 1 < len(text) and text[end + 1].isdigit():
            return False
    return True


def _phone_runs(text: str) -> Iterable[re.Match[str]]:
    for run in _DIGIT_RUN.finditer(text):
        start = run.start()
        while start > 0 and start > run.start() - 2 and text[start - 1] in "+(":
            start -= 1
        yield from _PHONE_RUN.finditer(text, start, run.end() + 1)


_NANP_SHAPE = re.compile(r"(?:\+1[ .-]?|1[ .-])?(?:\(\d{3}\)[ .-]?|\d{3}[ .-])\d{3}[ .-]\d{4}")
"""A number written the North American way, with its separators: ``(555) 123-4567``, ``555-123-4567``."""


def _nanp_shaped(candidate: str, digits: str, regions: tuple[_Region, ...]) -> bool:
    """A North American number by its shape alone, where US or CA numbers are read: ``(555) 123-4567`` is
    no assigned number (libphonenumber says invalid), but data sets write fictional customers' phones so, and
    a value the detectors miss reaches the model. Not: an area code starting with 0 or 1, placeholders of one
    repeated digit, ``123-456-7890``."""
    if not any(r.code in ("US", "CA") for r in regions) or not _NANP_SHAPE.fullmatch(candidate):
        return False
    local = digits[-10:]
    return local[0] not in "01" and len(set(local)) > 1 and local != "1234567890"


def _find_phone(text: str, regions: tuple[_Region, ...]) -> Iterable[tuple[int, int]]:
    for m in _phone_runs(text):
        candidate, offset = m.group(), m.start()
        if candidate.endswith(")") and "(" not in candidate:
            candidate = candidate[:-1]
        if candidate.startswith("(") and ")" not in candidate:
            candidate, offset = candidate[1:], offset + 1
        digits = "".join(_GROUPS.findall(candidate))
        if not 7 <= len(digits) <= 20:
            continue
        if _DECIMAL.fullmatch(candidate) or _DOTTED_QUAD.fullmatch(candidate) or _looks_like_card(candidate):
            continue
        international = candidate.lstrip("(").startswith("+")
        if not international and digits == candidate and not _PHONE_LABEL.search(text, max(0, offset - 24), offset):
            continue
        spans: set[tuple[int, int]] = set()
        if _plainly_valid(candidate, digits, international, regions):
            spans.add((0, len(candidate)))
        else:
            readings = ["ZZ"] if international else [r.code for r in regions if r.plausible(digits)]
            for region in readings:
                spans.update(_matches(candidate, region))
        if not spans and _nanp_shaped(candidate, digits, regions):
            spans.add((0, len(candidate)))
        for s, e in sorted(spans):
            start, end = offset + s, offset + e
            groups = _GROUPS.findall(text, start, end)
            if sum(len(g) == 1 for g in groups) >= 3:
                continue
            if _phone_bounded(text, start, end):
                yield start, end


# ----- the detectors ------------------------------------------------------------------------------

_BUILTIN: dict[str, Callable[[str], Iterable[tuple[int, int]]]] = {
    "email": _find_email,
    "card": _find_card,
    "iban": _find_iban,
    "ip": _find_ip,
    "ssn": _find_ssn,
}


class Detectors:
    """The detectors that are on. ``kinds``: the built-in kinds (ValueError for an unknown one); ``custom``:
    kinds of the config's own; ``phone_regions``: ISO 3166 region codes national-format phone numbers are
    read in (ValueError for an unknown one; ``+`` numbers are found whatever they are)."""

    def __init__(
        self,
        kinds: Iterable[str] = KINDS,
        custom: Sequence[CustomKind] = (),
        phone_regions: Sequence[str] = ("US",),
    ) -> None:
        chosen = tuple(dict.fromkeys(kinds))
        unknown = [k for k in chosen if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown kind {unknown[0]!r}: the built-in kinds are {', '.join(KINDS)}")
        if isinstance(phone_regions, str):
            phone_regions = (phone_regions,)
        self.kinds: tuple[str, ...] = tuple(k for k in KINDS if k in chosen)
        self.custom: tuple[CustomKind, ...] = tuple(custom)
        self.phone_regions: tuple[str, ...] = tuple(dict.fromkeys(r.upper() for r in phone_regions))
        for code in self.phone_regions:
            if code not in phonenumbers.SUPPORTED_REGIONS:
                raise ValueError(f"unknown phone region {code!r}: an ISO 3166 region code such as US, GB, DE, FR")
        self._regions = tuple(_region(code) for code in self.phone_regions)

    @property
    def active(self) -> bool:
        """Whether any detector is on."""
        return bool(self.kinds or self.custom)

    def find(self, text: str) -> list[Found]:
        """Every value of the kinds that are on, sorted by start, none overlapping another."""
        # (start, end, rank, kind): rank orders equal spans, custom kinds first, then _TIE_RANK
        spans: list[tuple[int, int, int, str]] = []
        for rank, custom in enumerate(self.custom):
            spans.extend(
                (m.start(), m.end(), rank, custom.kind) for m in custom.pattern.finditer(text) if m.end() > m.start()
            )
        base = len(self.custom)
        for kind in self.kinds:
            rank = base + _TIE_RANK[kind]
            found = _find_phone(text, self._regions) if kind == "phone" else _BUILTIN[kind](text)
            spans.extend((s, e, rank, kind) for s, e in found)
        return [Found(s, e, kind, text[s:e]) for s, e, kind in _without_overlaps(spans)]


def _without_overlaps(spans: list[tuple[int, int, int, str]]) -> list[tuple[int, int, str]]:
    """Of spans that overlap, the longer is kept, then the earlier, then the lower rank; sorted by start.

    Spans that overlap nothing are kept as they are; each run of spans chained by overlaps is settled on its
    own (greedy, longest first), which is what settling the whole list longest first would give."""
    spans.sort()
    kept: list[tuple[int, int, str]] = []
    at, n = 0, len(spans)
    while at < n:
        start, end, _rank, kind = spans[at]
        last = at + 1
        while last < n and spans[last][0] < end:
            end = max(end, spans[last][1])
            last += 1
        if last == at + 1:
            kept.append((start, end, kind))
        else:
            kept.extend(_settle(spans[at:last]))
        at = last
    return kept


def _settle(group: list[tuple[int, int, int, str]]) -> list[tuple[int, int, str]]:
    chosen: list[tuple[int, int, str]] = []
    for start, end, _rank, kind in sorted(group, key=lambda s: (s[0] - s[1], s[0], s[2])):
        if all(end <= s or start >= e for s, e, _ in chosen):
            chosen.append((start, end, kind))
    chosen.sort()
    return chosen


# ----- secrets ------------------------------------------------------------------------------------

# Each pattern starts with a literal or a small set of characters, and its left boundary is a lookbehind
# after that start: the scan then skips, in C, every position where a secret cannot begin.
_TOKEN_CHARS = r"A-Za-z0-9\-._~+/"
_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?:AKIA|ASIA|ABIA|ACCA)(?<![A-Za-z0-9]....)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    re.compile(r"gh(?<![A-Za-z0-9_]gh)[pousr]_[A-Za-z0-9]{36,255}(?![A-Za-z0-9_])"),
    re.compile(r"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{22,255}(?![A-Za-z0-9_])"),
    re.compile(r"xox(?<![A-Za-z0-9\-]xox)[abposr]-[A-Za-z0-9\-]{10,250}(?![A-Za-z0-9\-])"),
    re.compile(r"https?://hooks\.slack\.com/services/[A-Za-z0-9_/\-]{8,200}"),
    re.compile(r"eyJ(?<![A-Za-z0-9_\-]eyJ)[A-Za-z0-9_\-]{5,4096}\.eyJ[A-Za-z0-9_\-]{5,8192}\.[A-Za-z0-9_\-]{0,2048}"),
    re.compile(r"sk_(?<![A-Za-z0-9_]sk_)(?:live|test)_[A-Za-z0-9]{10,247}(?![A-Za-z0-9_])"),
    re.compile(r"rk_(?<![A-Za-z0-9_]rk_)(?:live|test)_[A-Za-z0-9]{10,247}(?![A-Za-z0-9_])"),
    re.compile(r"AIza(?<![A-Za-z0-9_\-]AIza)[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_\-])"),
)
_SK_KEY = re.compile(
    r"sk-(?<![A-Za-z0-9_\-]sk-)(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,250}(?![A-Za-z0-9_\-])"
)
_BEARER = re.compile(rf"[Bb](?<![A-Za-z][Bb])(?i:earer)[ \t]+(?P<token>[{_TOKEN_CHARS}]{{8,4096}}=*)")
_AWS_SECRET = re.compile(
    r"""[Ss](?i:ecret[_\-]?access[_\-]?key)["']?\s{0,8}[:=]\s{0,8}["']?
    (?P<key>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])""",
    re.VERBOSE,
)
_PEM_BEGIN = re.compile(r"-----BEGIN (?P<label>[A-Z0-9 ]{0,40}?)PRIVATE KEY(?P<block> BLOCK)?-----")
_PEM_END = re.compile(r"-----END (?P<label>[A-Z0-9 ]{0,40}?)PRIVATE KEY(?P<block> BLOCK)?-----")
_PEM_BODY = re.compile(r"(?:(?!-----)[A-Za-z0-9+/=:,\- \t\r\n]|\\[nr]){0,20000}")
"""What follows an unterminated BEGIN line: base64 lines and their headers, up to the next ``-----``."""
_CREDENTIAL_SCHEMES = re.compile(r"(?i)(?:bearer|basic|token)[ \t]+(\S+)\s*")


class Secrets:
    """Where secrets are: the literal values given (of ``MIN_SECRET_CHARS`` or more) and the well-known
    formats. ``find`` gives sorted, merged (start, end) spans."""

    def __init__(self, literals: Iterable[str] = ()) -> None:
        values: set[str] = set()
        for literal in literals:
            if len(literal) >= MIN_SECRET_CHARS:
                values.add(literal)
            credential = _CREDENTIAL_SCHEMES.fullmatch(literal.strip())
            if credential is not None and len(credential.group(1)) >= MIN_SECRET_CHARS:
                values.add(credential.group(1))
        self.literals: tuple[str, ...] = tuple(sorted(values, key=lambda v: (-len(v), v)))

    def find(self, text: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        for literal in self.literals:
            at = text.find(literal)
            while at != -1:
                spans.append((at, at + len(literal)))
                at = text.find(literal, at + 1)
        for pattern in _SECRET_PATTERNS:
            spans.extend(m.span() for m in pattern.finditer(text))
        if "sk-" in text:
            spans.extend(m.span() for m in _SK_KEY.finditer(text) if any(c.isdigit() for c in m.group()))
        for m in _BEARER.finditer(text):
            token = m.group("token")
            if len(token) >= 20 or any(not c.isalpha() for c in token):
                spans.append(m.span("token"))
        spans.extend(m.span("key") for m in _AWS_SECRET.finditer(text))
        if "PRIVATE KEY" in text:
            spans.extend(_pem_blocks(text))
        return _merged(spans)


def _pem_blocks(text: str) -> list[tuple[int, int]]:
    """Each private key block whole: BEGIN to the next END with the same label, or, with none, to the end of
    the base64 lines after it (a key cut short still gives its key away). Linear: ENDs are found once."""
    ends: dict[tuple[str, bool], list[tuple[int, int]]] = {}
    for m in _PEM_END.finditer(text):
        ends.setdefault((m["label"], bool(m["block"])), []).append(m.span())
    spans: list[tuple[int, int]] = []
    for m in _PEM_BEGIN.finditer(text):
        candidates = ends.get((m["label"], bool(m["block"])), [])
        at = bisect.bisect_left(candidates, (m.end(), 0))
        if at < len(candidates):
            spans.append((m.start(), candidates[at][1]))
        else:
            body = _PEM_BODY.match(text, m.end())
            spans.append((m.start(), body.end() if body else m.end()))
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged
