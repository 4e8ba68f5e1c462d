"""Derived descriptions and search words of stored scripts (keys: ``test_keys``)."""

from __future__ import annotations

from mcp_code_mode.cache.describe import derive_description, search_text


def test_a_description_is_derived_from_docstring_comments_and_tools() -> None:
    code = '"""Sum the sales."""\n# from the CSV export\nrows = fs.read(path="s.csv")  # noqa: E501\n'
    text = derive_description(code, ["fs.read"])
    assert text == "Sum the sales. from the CSV export (calls fs.read)"


def test_code_without_comments_is_described_by_its_first_line() -> None:
    assert derive_description("\n\nprint(sum(range(10)))\n") == "print(sum(range(10)))"
    assert derive_description("def broken(:\n  # still a comment\n") == "still a comment"


def test_search_text_splits_tool_and_identifier_names_into_words() -> None:
    text = search_text("Sum sales", "totalAmount = filesystem.read_text_file(path='x')", ["filesystem.read_text_file"])
    assert "filesystem read text file" in text
    assert "total Amount" in text
