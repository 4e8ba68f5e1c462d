"""The offline token counter (real BPE vocabularies shipped in a wheel)."""

from __future__ import annotations

import pytest

from mcp_code_mode.tokens import count_json_tokens, count_tokens


def test_known_strings_count_as_tiktoken_counts_them() -> None:
    assert count_tokens("hello world", "cl100k_base") == 2
    assert count_tokens("hello world") == 2
    assert count_tokens("<|endoftext|>", "cl100k_base") > 1, "special tokens count as plain text"
    assert count_tokens("") == 0


def test_json_is_counted_compactly_and_unknown_encodings_are_refused() -> None:
    assert count_json_tokens({"a": [1, 2]}) == count_tokens('{"a":[1,2]}')
    with pytest.raises(ValueError, match="unknown encoding"):
        count_tokens("x", "p50k_base")
