"""Words that describe a stored script for search: derived descriptions, identifiers, search text.

(The keys of stored runs are in ``keys``.)
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

_MAX_DESCRIPTION = 300
_MAX_IDENTIFIERS = 60
_FIRST_LINE = 120
_MAX_ANALYSED = 20_000
"""Characters of code parsed for comments and identifiers (longer scripts are cut there)."""


@dataclass(frozen=True, order=True)
class ToolUse:
    """One tool a run called, and the hash of its schema at the time."""

    server: str
    tool: str
    schema_hash: str

    @property
    def name(self) -> str:
        return f"{self.server}.{self.tool}"


def normalize_code(code: str) -> str:
    """The code as it is analysed for descriptions and search words (never for keys: see ``keys``):
    common indentation, trailing spaces and blank edges removed."""
    lines = [line.rstrip() for line in textwrap.dedent(code).splitlines()]
    return "\n".join(lines).strip("\n")


def _comments(code: str) -> list[str]:
    out: list[str] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                text = tok.string.lstrip("#").strip()
                if text and not text.startswith(("!", "type:", "noqa", "pyright")):
                    out.append(text)
    except (tokenize.TokenError, IndentationError, SyntaxError):  # broken code: comments on their own lines
        out = [m.group(1).strip() for m in re.finditer(r"^\s*#+\s*(.+)$", code, re.M)]
    return out


def _docstrings(tree: ast.Module) -> list[str]:
    docs: list[str] = []
    module_doc = ast.get_docstring(tree)
    if module_doc:
        docs.append(module_doc)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            doc = ast.get_docstring(node)
            if doc:
                docs.append(doc)
    return docs


def derive_description(code: str, tools: Iterable[str] = ()) -> str:
    """A description for a script that came without one: its docstrings and comments, then the tools it called."""
    code = normalize_code(code)[:_MAX_ANALYSED]
    parts: list[str] = []
    try:
        parts.extend(_docstrings(ast.parse(code)))
    except SyntaxError:
        pass
    parts.extend(_comments(code))
    text = " ".join(" ".join(p.split()) for p in parts)
    if not text:  # nothing written about it: its first line says most
        text = next((line.strip() for line in code.splitlines() if line.strip()), "")[:_FIRST_LINE]
    names = sorted(set(tools))
    if names:
        text = (text + " " if text else "") + f"(calls {', '.join(names)})"
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 1].rstrip() + "…"


def split_identifier(name: str) -> list[str]:
    """``read_text_file`` → read text file; ``listPullRequests`` → list Pull Requests."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name.replace("_", " ").replace(".", " "))
    return [w for w in spaced.split() if w]


def identifiers(code: str) -> list[str]:
    """Names a script defines, imports, calls and reads, in first-seen order (words for search)."""
    try:
        tree = ast.parse(normalize_code(code)[:_MAX_ANALYSED])
    except SyntaxError:
        return list(dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z0-9_]{2,}", code)))[:_MAX_IDENTIFIERS]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.alias):
            names.append(node.name)
        elif isinstance(node, ast.keyword) and node.arg:
            names.append(node.arg)
        elif isinstance(node, ast.arg):
            names.append(node.arg)
    return [n for n in dict.fromkeys(names) if len(n) > 1][:_MAX_IDENTIFIERS]


def search_text(description: str, code: str, tools: Iterable[str]) -> str:
    """The text an embedding model sees for a script: description, tools and identifiers as words."""
    tool_words = " ".join(" ".join(split_identifier(t)) for t in sorted(set(tools)))
    ident_words = " ".join(" ".join(split_identifier(n)) for n in identifiers(code))
    return " ".join(part for part in (description, tool_words, ident_words) if part)
