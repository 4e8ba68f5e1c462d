"""The languages a script may name, with their aliases (a leaf: runners, validation and the tools use it)."""

from __future__ import annotations

LANGUAGE_ALIASES: dict[str, str] = {
    "python": "python",
    "py": "python",
    "python3": "python",
    "javascript": "javascript",
    "js": "javascript",
    "typescript": "typescript",
    "ts": "typescript",
}


def canonical(language: str) -> str | None:
    """``python``, ``javascript`` or ``typescript`` for a name or alias (any case), else None."""
    return LANGUAGE_ALIASES.get(language.strip().lower())


__all__ = ["LANGUAGE_ALIASES", "canonical"]
