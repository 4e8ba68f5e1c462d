"""Keys and derived descriptions of stored scripts."""

from __future__ import annotations

from mcp_code_mode.cache.describe import ToolUse, code_key, derive_description, full_key, search_text


def test_the_code_key_ignores_indentation_trailing_spaces_and_package_order() -> None:
    a = code_key("python", "local", "x = 1   \nprint(x)\n", ["b", "a"])
    b = code_key("python", "local", "\n    x = 1\n    print(x)", ["a", "b"])
    assert a == b
    assert a != code_key("python", "local", "x = 2\nprint(x)", ["a", "b"])
    assert a != code_key("python", "other", "x = 1\nprint(x)", ["a", "b"])
    assert a != code_key("python", "local", "x = 1\nprint(x)", ["a"])


def test_the_full_key_changes_when_a_used_tool_changes_its_schema() -> None:
    key = code_key("python", "local", "fs.read(path='x')", [])
    before = full_key(key, [ToolUse("fs", "read", "aaa")])
    assert before == full_key(key, [ToolUse("fs", "read", "aaa"), ToolUse("fs", "read", "aaa")])
    assert before != full_key(key, [ToolUse("fs", "read", "bbb")])
    assert before != full_key(key, [])


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
