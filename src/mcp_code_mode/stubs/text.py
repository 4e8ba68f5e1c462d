"""Downstream text as source: string literals and doc text that no string can break out of.

Descriptions, names and values come from downstream servers and may be any string: quotes,
backslashes, triple quotes, ``*/``, NUL, lone surrogates, line and bidi control characters.
Printable text is kept as it is, so ordinary descriptions read the same; every character that is
not printable becomes an escape (``\\x00``, ``\\ud800``, ``\\u2028``), so the source encodes as
UTF-8, shows no invisible characters and keeps one line where the text had one.
"""

from __future__ import annotations

import re

_KEPT = "\n\t"
_PY_NAMED = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# A quote that could close a triple-quoted string: in a run of two or more, or the text's last character.
_CLOSING_QUOTES = re.compile(r'"{2,}|"\Z')
_OPEN = {"[": "]", "(": ")", "<": ">", "{": "}"}


def escape_char(ch: str) -> str:
    """``ch`` as a Python/JavaScript escape: ``\\xNN``, ``\\uNNNN`` or (Python only) ``\\UNNNNNNNN``."""
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def visible(text: str) -> str:
    """``text`` with line ends made ``\\n`` and every other non-printable character (tabs aside) escaped."""
    return "".join(ch if ch.isprintable() or ch in _KEPT else escape_char(ch) for ch in _lines(text))


def py_string(text: str) -> str:
    """A double-quoted Python string literal whose value is exactly ``text``."""
    body = "".join(_PY_NAMED.get(ch) or (ch if ch.isprintable() else escape_char(ch)) for ch in text)
    return f'"{body}"'


def _doc_char(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    if ch.isprintable() or ch in _KEPT:
        return ch
    if "\ud800" <= ch <= "\udfff":
        # A class's docstring must encode as UTF-8 (``type()`` fails otherwise): it holds the escape as text.
        return "\\" + escape_char(ch)
    return escape_char(ch)


def py_doc(text: str) -> str:
    """``text`` for the inside of a ``\"\"\"`` docstring: backslashes doubled, invisible characters escaped,
    and each quote that could end the string escaped; other quotes stay as they are. The docstring's value
    is ``text`` (line ends made ``\\n``), except that a lone surrogate is the text of its escape."""
    body = "".join(_doc_char(ch) for ch in _lines(text))
    return _CLOSING_QUOTES.sub(lambda m: '\\"' * len(m.group()), body)


def comment_text(text: str) -> str:
    """``text`` for the inside of a ``/* */`` comment: invisible characters escaped and ``*/`` written ``*\\/``."""
    return visible(text).replace("*/", "*\\/")


def split_top(type_text: str, sep: str) -> list[str]:
    """Split a rendered type at ``sep`` where it is outside brackets and string literals.

    ``Literal['a | b'] | None`` → ``["Literal['a | b']", "None"]``; ``"x | y" | null`` → ``['"x | y"', "null"]``.
    """
    parts: list[str] = []
    closers: list[str] = []
    quote = ""
    start = i = 0
    while i < len(type_text):
        ch = type_text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            closers.append(_OPEN[ch])
        elif closers and ch == closers[-1]:
            closers.pop()
        elif not closers and type_text.startswith(sep, i):
            parts.append(type_text[start:i])
            i = start = i + len(sep)
            continue
        i += 1
    parts.append(type_text[start:])
    return parts
