"""JSON as the files a person writes are read: a key given twice in one object is an error, not a silent choice."""

from __future__ import annotations

import json
from typing import Any

from .errors import ConfigError


class DuplicateKey(ValueError):
    """A JSON object with the same key twice."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook`` that refuses a key given twice in one object: JSON parsers keep the
    last one silently, so a second ``"default": "allow"`` below a ``"default": "deny"`` would win unseen."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            others = ", ".join(repr(k) for k in list(out)[:5] if k != key)
            where = f" (beside {others})" if others else ""
            raise DuplicateKey(f"the key {key!r} appears twice in one object{where}: remove one")
        out[key] = value
    return out


def read_document(text: str, source: object) -> object:
    """A file's JSON text, keys given twice refused; ``ConfigError`` naming ``source`` (and the line and column of
    bad JSON) when it is not a document."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except DuplicateKey as exc:
        raise ConfigError(f"{source}: {exc}") from None


__all__ = ["DuplicateKey", "read_document", "unique_keys"]
