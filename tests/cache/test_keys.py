"""Cache keys mean "the same program": one test per way two different programs used to share a key.

Each collision test first shows that the old normalisation (still used for search words, as
``normalize_code``) made the two programs one, then that their keys differ now.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from mcp_code_mode.cache import KEY_VERSION, ToolUse, code_key, full_key, keyed_code, runner_identity
from mcp_code_mode.cache.describe import normalize_code
from mcp_code_mode.cache.keys import _sources_digest  # pyright: ignore[reportPrivateUsage]

from .helpers import key_context

CONTEXT = key_context()


def key(code: str) -> str:
    return code_key(code, CONTEXT)


def assert_once_collided_and_now_differ(a: str, b: str) -> None:
    assert a != b
    assert normalize_code(a) == normalize_code(b), "the pair should have collided under the old normalisation"
    assert key(a) != key(b)


@pytest.mark.parametrize("separator", ["\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x0c", "\x0b"])
def test_characters_that_are_not_python_line_breaks_are_not_keyed_as_newlines(separator: str) -> None:
    with_separator = f'print(repr("""a{separator}b"""))'
    with_newline = 'print(repr("""a\nb"""))'
    assert ast.literal_eval(f'"""a{separator}b"""') != ast.literal_eval('"""a\nb"""')  # two programs
    assert_once_collided_and_now_differ(with_separator, with_newline)


def test_trailing_spaces_before_a_newline_inside_a_triple_quoted_string_are_part_of_the_key() -> None:
    assert_once_collided_and_now_differ('print(len("""a   \nb"""))', 'print(len("""a\nb"""))')


def test_a_whitespace_only_line_inside_a_string_literal_is_part_of_the_key() -> None:
    assert_once_collided_and_now_differ('s = """a\n    \nb"""\nprint(len(s))', 's = """a\n\nb"""\nprint(len(s))')


def test_a_trailing_tab_and_a_trailing_space_inside_a_string_are_different_keys() -> None:
    assert_once_collided_and_now_differ('print(repr("""a\t\nb"""))', 'print(repr("""a \nb"""))')


def test_indentation_is_syntax_so_an_indented_program_has_its_own_key() -> None:
    assert_once_collided_and_now_differ("    print(1)", "print(1)")  # the first is an IndentationError


def test_tabs_and_spaces_as_indentation_are_different_keys() -> None:
    assert key("if x:\n\tprint(1)") != key("if x:\n    print(1)")


def test_only_trailing_newlines_are_ignored() -> None:
    code = "x = 1\nprint(x)"
    assert key(code) == key(code + "\n") == key(code + "\n\n")
    assert keyed_code(code + "\n\n") == code
    assert key(code) != key("\n" + code)  # leading newlines shift every line number
    assert key(code) != key(code + " ")
    assert key(code) != key(code + "\n ")
    assert key(code) != key(code + "\x0c")


def test_newlines_after_a_trailing_backslash_are_kept_because_they_change_the_program() -> None:
    runs, fails = "x = 1\\\n\n", "x = 1\\"
    ast.parse(runs)  # a continuation followed by a blank line
    with pytest.raises(SyntaxError):
        ast.parse(fails)
    assert keyed_code(runs) == runs
    assert len({key(runs), key(fails), key("x = 1\\\n")}) == 3


def test_crlf_line_ends_are_keyed_exactly() -> None:
    assert keyed_code("x = 1\r\n") == "x = 1\r\n"  # stripping the \n alone would leave a lone \r
    assert key("x = 1\r\n") != key("x = 1\n")


def test_networking_allowed_and_not_allowed_are_different_keys() -> None:
    code = "print(1)"
    assert code_key(code, key_context(network=True)) != code_key(code, key_context(network=False))


def test_the_runner_its_identity_language_packages_and_stubs_each_change_the_key() -> None:
    code = "print(1)"
    keys = {
        code_key(code, CONTEXT),
        code_key(code, key_context(runner="cpython")),
        code_key(code, key_context(runner_identity="local-after-an-upgrade")),
        code_key(code, key_context(language="javascript")),
        code_key(code, key_context(packages=["numpy"])),
        code_key(code, key_context(stubs="another-tool-set")),
    }
    assert len(keys) == 6


def test_package_order_and_repeats_do_not_change_the_key() -> None:
    a = code_key("print(1)", key_context(packages=["b", "a"]))
    assert a == code_key("print(1)", key_context(packages=["a", "b", "a"]))


def test_a_key_field_cannot_run_into_the_next() -> None:
    joined = code_key("print(1)", dataclasses.replace(CONTEXT, runner="local\0x", runner_identity="y"))
    assert joined != code_key("print(1)", dataclasses.replace(CONTEXT, runner="local", runner_identity="x\0y"))


def test_the_full_key_changes_when_a_called_tool_changes_its_schema() -> None:
    base = key("fs.read(path='x')")
    before = full_key(base, [ToolUse("fs", "read", "aaa")])
    assert before == full_key(base, [ToolUse("fs", "read", "aaa"), ToolUse("fs", "read", "aaa")])
    assert before != full_key(base, [ToolUse("fs", "read", "bbb")])
    assert before != full_key(base, [])


def test_the_key_version_is_past_the_normalising_keys() -> None:
    assert KEY_VERSION >= 2


class Declared:
    name = "declared"
    identity = "declared-runner 1.2.3"


def test_a_runner_that_declares_its_identity_is_taken_at_its_word() -> None:
    assert runner_identity(Declared()) == "declared-runner 1.2.3"


def test_editing_a_worker_source_changes_the_derived_runner_identity(tmp_path: Path) -> None:
    package = tmp_path / "fake_runners"
    package.mkdir()
    (package / "fake_runner.py").write_text("class FakeRunner:\n    name = 'fake'\n", encoding="utf-8")
    worker = package / "fake_worker.js"
    worker.write_text("console.log(1);\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("fake_runner_for_identity", package / "fake_runner.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        before = runner_identity(module.FakeRunner())
        worker.write_text("console.log(2);\n", encoding="utf-8")
        _sources_digest.cache_clear()  # computed once per process: a new release or a restart sees the edit
        after = runner_identity(module.FakeRunner())
    finally:
        del sys.modules[spec.name]
        _sources_digest.cache_clear()
    assert before != after
