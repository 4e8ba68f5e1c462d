"""The policy model: matching order, argument conditions, caps, annotations mode, and what it describes."""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from pydantic import ValidationError

from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.governance import (
    MISSING,
    PolicyBook,
    RateLimiter,
    RunCounter,
    ServerPolicy,
    ToolRule,
    Verdict,
    glob_regex,
    parse_pointer,
    resolve_pointer,
)
from mcp_code_mode.governance.policy import RATE_WINDOW_SECONDS

from ..fixtures.annotated_server import annotated_entry

READ_ONLY = {"readOnlyHint": True}
DESTRUCTIVE = {"destructiveHint": True}
OPEN_WORLD = {"openWorldHint": True, "destructiveHint": False, "readOnlyHint": False}


def book(policy: dict[str, Any] | None, mode: Any = "explicit", server: str = "fs") -> PolicyBook:
    return PolicyBook({server: ServerPolicy.model_validate(policy) if policy is not None else None}, mode)


def write_rule(condition: dict[str, Any], pointer: str = "/path", **extra: Any) -> PolicyBook:
    return book({"tools": {"write_file": {"decision": "allow", "when": {pointer: condition}, **extra}}})


def decision(policy: PolicyBook, arguments: dict[str, Any], tool: str = "write_file") -> str:
    return policy.decide("fs", tool, None, arguments).decision


# --- matching -------------------------------------------------------------------------------------------


def test_the_first_matching_entry_in_file_order_wins() -> None:
    policy = book({"tools": {"write_secret": "deny", "write_*": "ask", "*": "allow"}})
    assert policy.decide("fs", "write_secret").decision == "deny"
    assert policy.decide("fs", "write_file").decision == "ask"
    assert policy.decide("fs", "read_file").decision == "allow"
    assert policy.decide("fs", "write_file").rule == 'fs: tools["write_*"]'


def test_a_later_broader_pattern_does_not_override_an_earlier_one() -> None:
    policy = book({"tools": {"*_file": "allow", "write_*": "deny"}})
    assert policy.decide("fs", "write_file").decision == "allow"
    assert policy.decide("fs", "write_note").decision == "deny"


def test_tool_patterns_are_case_sensitive_fnmatch_over_the_original_name() -> None:
    policy = book({"default": "deny", "tools": {"read_?ile": "allow", "list_[ab]*": "allow"}})
    assert policy.decide("fs", "read_file").decision == "allow"
    assert policy.decide("fs", "Read_file").decision == "deny"
    assert policy.decide("fs", "read_fiile").decision == "deny"
    assert policy.decide("fs", "list_allowed").decision == "allow"
    assert policy.decide("fs", "list_c").decision == "deny"
    # the original name, not the script's: a dash is matched as the server spelt it
    assert book({"default": "deny", "tools": {"get-item": "allow"}}).decide("fs", "get-item").decision == "allow"


def test_the_default_decides_what_no_entry_matches_and_allow_is_the_default_default() -> None:
    verdict = book({"default": "ask", "tools": {"read_*": "allow"}}).decide("fs", "move_file")
    assert verdict == Verdict("ask", "fs: default", "move_file: needs approval by default (fs: default)")
    assert book({}).decide("fs", "anything").decision == "allow"
    assert book(None).decide("fs", "anything") == Verdict(
        "allow", "fs: default", "anything: allowed by default (fs: default)"
    )


def test_a_server_the_book_does_not_know_allows_everything() -> None:
    assert book({"default": "deny"}).decide("other", "x").decision == "allow"


def test_the_verdict_names_the_entry_and_explains_in_one_line() -> None:
    policy = book({"tools": {"delete_*": "deny", "move_file": "ask", "read_*": "allow"}})
    assert policy.decide("fs", "delete_file") == Verdict(
        "deny", 'fs: tools["delete_*"]', 'delete_file: denied (fs: tools["delete_*"])'
    )
    assert policy.decide("fs", "move_file").reason == 'move_file: needs approval (fs: tools["move_file"])'
    assert policy.decide("fs", "read_text").reason == 'read_text: allowed (fs: tools["read_*"])'


# --- argument globs -------------------------------------------------------------------------------------


def test_the_issue_example_write_file_only_under_reports() -> None:
    policy = write_rule({"glob": "reports/**"})
    assert decision(policy, {"path": "reports/q1.txt"}) == "allow"
    assert decision(policy, {"path": "reports/2024/q1/summary.txt"}) == "allow"
    verdict = policy.decide("fs", "write_file", None, {"path": "notes/x.txt"})
    assert verdict == Verdict(
        "deny",
        'fs: tools["write_file"]',
        'write_file: /path "notes/x.txt" is not under reports/** (fs: tools["write_file"])',
    )


@pytest.mark.parametrize(
    ("glob", "value", "matches"),
    [
        ("reports/*", "reports/a.txt", True),
        ("reports/*", "reports/2024/a.txt", False),  # * stops at /
        ("reports/**", "reports/2024/a.txt", True),  # ** crosses it
        ("reports/**", "reports", False),
        ("reports/**/*.csv", "reports/a.csv", True),  # **/ is zero or more segments
        ("reports/**/*.csv", "reports/x/y/a.csv", True),
        ("reports/**/*.csv", "reports/x/y/a.txt", False),
        ("*.txt", "a.txt", True),
        ("*.txt", "dir/a.txt", False),
        ("**.txt", "dir/a.txt", True),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file/.txt", False),  # ? is not /
        ("file[0-9].txt", "file7.txt", True),
        ("file[!0-9].txt", "file7.txt", False),
        ("file[!0-9].txt", "fileA.txt", True),
        ("a[!x]b", "a/b", False),  # a negated set never matches /
        ("a.b", "axb", False),  # regex characters are literal
        ("a+(b)", "a+(b)", True),
        ("[unclosed", "[unclosed", True),  # an unclosed [ is literal, as in fnmatch
        ("[[]x", "[x", True),  # a set of one '['
        ("Reports/**", "reports/a", False),  # case-sensitive
        ("**", "any/thing\nwith a newline", True),
    ],
)
def test_argument_globs(glob: str, value: str, matches: bool) -> None:
    assert (re.fullmatch(glob_regex(glob), value, re.DOTALL) is not None) is matches
    assert decision(write_rule({"glob": glob}), {"path": value}) == ("allow" if matches else "deny")


def test_a_dot_dot_segment_matches_no_glob() -> None:
    policy = write_rule({"glob": "reports/**"})
    for value in ("reports/../secrets.txt", "reports/a/..", "reports\\..\\x"):
        verdict = policy.decide("fs", "write_file", None, {"path": value})
        assert verdict.decision == "deny" and "'..' segment" in verdict.reason, value
    assert decision(policy, {"path": "reports/..hidden/x"}) == "allow"  # only a whole segment


def test_a_list_of_globs_matches_when_any_does() -> None:
    policy = write_rule({"glob": ["reports/**", "out/*.csv"]})
    assert decision(policy, {"path": "out/a.csv"}) == "allow"
    assert decision(policy, {"path": "reports/x"}) == "allow"
    reason = policy.decide("fs", "write_file", None, {"path": "out/a.txt"}).reason
    assert '/path "out/a.txt" does not match reports/** or out/*.csv' in reason


def test_a_glob_applies_to_strings_only() -> None:
    policy = write_rule({"glob": "*"})
    verdict = policy.decide("fs", "write_file", None, {"path": ["a"]})
    assert verdict.decision == "deny"
    assert verdict.reason == 'write_file: /path ["a"] is not a string (fs: tools["write_file"])'


# --- regex and ranges -----------------------------------------------------------------------------------


def test_a_regex_must_match_the_whole_string() -> None:
    policy = write_rule({"regex": "[a-z]+\\.md"}, pointer="/name")
    assert decision(policy, {"name": "notes.md"}) == "allow"
    assert decision(policy, {"name": "notes.md.exe"}) == "deny"  # fullmatch, not search
    assert decision(policy, {"name": "x/notes.md"}) == "deny"
    reason = policy.decide("fs", "write_file", None, {"name": "A.md"}).reason
    assert reason == 'write_file: /name "A.md" does not match [a-z]+\\.md (fs: tools["write_file"])'
    assert decision(policy, {"name": 3}) == "deny"


@pytest.mark.parametrize(
    ("value", "expected", "why"),
    [
        (1, "allow", None),
        (10, "allow", None),
        (5.5, "allow", None),
        (0, "deny", "/limit 0 is below the min 1"),
        (11, "deny", "/limit 11 is above the max 10"),
        (10.01, "deny", "/limit 10.01 is above the max 10"),
        ("5", "deny", '/limit "5" is not a number'),
        (True, "deny", "/limit true is not a number"),
        (None, "deny", "/limit null is not a number"),
        (float("nan"), "deny", "/limit NaN is below the min 1"),
    ],
)
def test_a_range_is_inclusive_and_applies_to_numbers(value: object, expected: str, why: str | None) -> None:
    policy = write_rule({"min": 1, "max": 10}, pointer="/limit")
    verdict = policy.decide("fs", "write_file", None, {"limit": value})
    assert verdict.decision == expected
    if why is not None:
        assert verdict.reason == f'write_file: {why} (fs: tools["write_file"])'


def test_a_range_may_have_one_bound() -> None:
    assert decision(write_rule({"max": 100}, pointer="/n"), {"n": -1e9}) == "allow"
    assert decision(write_rule({"min": 0}, pointer="/n"), {"n": 1e9}) == "allow"
    assert decision(write_rule({"min": 0}, pointer="/n"), {"n": -1}) == "deny"


# --- JSON pointers --------------------------------------------------------------------------------------


def test_pointers_follow_rfc_6901_escapes() -> None:
    assert parse_pointer("/a~1b") == ("a/b",)
    assert parse_pointer("/m~0n") == ("m~n",)
    assert parse_pointer("/~01") == ("~1",)  # ~0 first, then 1: not a slash
    assert parse_pointer("/") == ("",)
    assert parse_pointer("/a/0/b") == ("a", "0", "b")
    document = {"a/b": 1, "m~n": 2, "~1": 3, "": 4}
    for pointer, value in (("/a~1b", 1), ("/m~0n", 2), ("/~01", 3), ("/", 4)):
        assert resolve_pointer(document, parse_pointer(pointer)) == value


@pytest.mark.parametrize("pointer", ["path", "", "/a~", "/a~2b", "a/b"])
def test_malformed_pointers_are_refused(pointer: str) -> None:
    with pytest.raises(ValueError, match="JSON pointer"):
        parse_pointer(pointer)


def test_pointers_index_arrays_and_nested_objects() -> None:
    policy = write_rule({"glob": "reports/**"}, pointer="/edits/1/path")
    assert decision(policy, {"edits": [{"path": "x"}, {"path": "reports/a"}]}) == "allow"
    assert decision(policy, {"edits": [{"path": "reports/a"}, {"path": "x"}]}) == "deny"
    document = {"items": [10, 20, 30]}
    assert resolve_pointer(document, parse_pointer("/items/2")) == 30


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"edits": []},
        {"edits": [{"path": "reports/a"}]},  # index 1 out of range
        {"edits": "not a container"},
        {"edits": [{}, {}]},
    ],
)
def test_a_pointer_that_names_nothing_fails_its_condition(arguments: dict[str, Any]) -> None:
    verdict = write_rule({"glob": "reports/**"}, pointer="/edits/1/path").decide("fs", "write_file", None, arguments)
    assert verdict.decision == "deny"
    assert "/edits/1/path is missing" in verdict.reason


@pytest.mark.parametrize("token", ["01", "-", "+1", " 1", "1.0"])
def test_array_indices_must_be_canonical(token: str) -> None:
    assert resolve_pointer({"a": [5, 6]}, ("a", token)) is MISSING
    policy = write_rule({"min": 0}, pointer=f"/a/{token}")
    assert decision(policy, {"a": [5, 6]}) == "deny"


def test_an_object_key_that_looks_like_an_index_is_a_key() -> None:
    assert decision(write_rule({"min": 0}, pointer="/a/0"), {"a": {"0": 1}}) == "allow"


# --- otherwise and several conditions -------------------------------------------------------------------


def test_otherwise_decides_when_a_condition_fails_and_is_deny_by_default() -> None:
    asks = write_rule({"glob": "reports/**"}, otherwise="ask")
    assert decision(asks, {"path": "notes/x"}) == "ask"
    assert decision(asks, {}) == "ask"
    assert decision(write_rule({"glob": "reports/**"}), {}) == "deny"


def test_every_condition_must_hold_and_the_first_failure_is_reported() -> None:
    policy = book(
        {
            "tools": {
                "write_file": {
                    "decision": "allow",
                    "when": {"/path": {"glob": "reports/**"}, "/size": {"max": 1000}},
                    "otherwise": "ask",
                }
            }
        }
    )
    assert decision(policy, {"path": "reports/a", "size": 10}) == "allow"
    assert decision(policy, {"path": "reports/a", "size": 5000}) == "ask"
    reason = policy.decide("fs", "write_file", None, {"path": "x", "size": 5000}).reason
    assert "/path" in reason and "/size" not in reason


def test_a_conditional_deny_can_ask_otherwise() -> None:
    policy = book(
        {"tools": {"write_file": {"decision": "deny", "when": {"/path": {"glob": ".git/**"}}, "otherwise": "ask"}}}
    )
    assert decision(policy, {"path": ".git/config"}) == "deny"
    assert decision(policy, {"path": "src/a.py"}) == "ask"


def test_long_or_multiline_argument_values_are_shown_on_one_short_line() -> None:
    reason = write_rule({"glob": "reports/**"}).decide("fs", "write_file", None, {"path": "x\n" * 200}).reason
    assert "\n" not in reason and len(reason) < 160 and "…" in reason


# --- static, limits, gated, describe --------------------------------------------------------------------


def test_static_is_what_is_known_without_arguments() -> None:
    policy = book(
        {
            "default": "ask",
            "tools": {
                "read_*": "allow",
                "write_file": {"decision": "allow", "when": {"/path": {"glob": "reports/**"}}},
                "edit_file": {"decision": "ask", "when": {"/path": {"glob": "src/**"}}, "otherwise": "ask"},
                "delete_*": "deny",
            },
        }
    )
    assert policy.static("fs", "read_file") == "allow"
    assert policy.static("fs", "write_file") == "conditional"
    assert policy.static("fs", "edit_file") == "ask"  # both outcomes are ask
    assert policy.static("fs", "delete_file") == "deny"
    assert policy.static("fs", "move_file") == "ask"
    assert policy.static("fs", "move_file", READ_ONLY) == "ask"  # explicit mode ignores annotations


def test_limits_are_the_matching_entrys_caps() -> None:
    policy = book({"tools": {"write_*": {"decision": "allow", "maxPerRun": 20, "perMinute": 60}, "read_*": "allow"}})
    assert policy.limits("fs", "write_file") == (20, 60)
    assert policy.limits("fs", "read_file") == (None, None)
    assert policy.limits("fs", "move_file") == (None, None)
    assert policy.limits("other", "write_file") == (None, None)


def test_gated_says_whether_a_server_can_ask_or_deny() -> None:
    assert book({"tools": {"read_*": "allow"}}).gated("fs") is False
    assert book(None).gated("fs") is False
    assert book({"default": "ask"}).gated("fs") is True
    assert book({"tools": {"delete_*": "deny"}}).gated("fs") is True
    assert book({"tools": {"w": {"decision": "allow", "when": {"/p": {"glob": "x"}}}}}).gated("fs") is True
    assert book({"tools": {"w": {"decision": "allow", "maxPerRun": 1}}}).gated("fs") is False  # a cap is no gate
    # with the tools listed, exact: the deny entry matches none of them
    assert book({"tools": {"delete_*": "deny"}}).gated("fs", {"read_file": None}) is False
    assert book(None, "annotations").gated("fs") is True  # any tool might be destructive
    annotated = book(None, "annotations")
    assert annotated.gated("fs", {"read_file": READ_ONLY, "plain": None}) is False
    assert annotated.gated("fs", {"read_file": READ_ONLY, "rm": DESTRUCTIVE}) is True


def test_describe_lists_each_servers_default_and_entries_in_order_as_json() -> None:
    policy = PolicyBook(
        {
            "fs": ServerPolicy.model_validate(
                {
                    "default": "ask",
                    "tools": {
                        "read_*": "allow",
                        "write_file": {
                            "decision": "allow",
                            "when": {"/path": {"glob": "reports/**"}, "/n": {"min": 1, "max": 2.5}},
                            "maxPerRun": 20,
                            "perMinute": 60,
                        },
                        "*": "deny",
                    },
                }
            ),
            "memory": None,
        },
        "annotations",
    )
    assert policy.describe() == {
        "mode": "annotations",
        "servers": {
            "fs": {
                "default": "ask",
                "tools": [
                    {"tool": "read_*", "decision": "allow"},
                    {
                        "tool": "write_file",
                        "decision": "allow",
                        "when": {"/path": {"glob": "reports/**"}, "/n": {"min": 1, "max": 2.5}},
                        "otherwise": "deny",
                        "maxPerRun": 20,
                        "perMinute": 60,
                    },
                    {"tool": "*", "decision": "deny"},
                ],
            },
            "memory": {"default": "allow", "tools": []},
        },
    }


# --- annotations mode -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected", "rule"),
    [
        (READ_ONLY, "allow", "annotations: readOnlyHint"),
        ({"readOnlyHint": True, "destructiveHint": True}, "allow", "annotations: readOnlyHint"),
        (DESTRUCTIVE, "ask", "annotations: destructiveHint"),
        ({"destructiveHint": True, "openWorldHint": True}, "ask", "annotations: destructiveHint"),
        (OPEN_WORLD, "ask", "annotations: openWorldHint"),
        ({"idempotentHint": True, "title": "x"}, "deny", "fs: default"),
        ({"readOnlyHint": False, "destructiveHint": False}, "deny", "fs: default"),
        ({"readOnlyHint": "true"}, "deny", "fs: default"),  # only a JSON true counts
        ({}, "deny", "fs: default"),
        (None, "deny", "fs: default"),
    ],
)
def test_annotations_mode_decides_a_tool_without_an_entry_by_its_hints(
    annotations: dict[str, Any] | None, expected: str, rule: str
) -> None:
    verdict = book({"default": "deny"}, "annotations").decide("fs", "some_tool", annotations, {})
    assert (verdict.decision, verdict.rule) == (expected, rule)


def test_an_annotation_verdict_explains_itself() -> None:
    verdict = book(None, "annotations").decide("fs", "delete_note", DESTRUCTIVE, {})
    assert (
        verdict.reason
        == "delete_note: needs approval, its server marks it destructiveHint (annotations: destructiveHint)"
    )


def test_explicit_entries_win_over_annotations() -> None:
    policy = book({"tools": {"delete_note": "allow", "read_note": "deny"}}, "annotations")
    assert policy.decide("fs", "delete_note", DESTRUCTIVE).decision == "allow"
    assert policy.decide("fs", "read_note", READ_ONLY).decision == "deny"
    assert policy.static("fs", "read_note", READ_ONLY) == "deny"
    assert policy.static("fs", "fetch_url", OPEN_WORLD) == "ask"


def test_explicit_mode_ignores_annotations() -> None:
    policy = book({"default": "ask"})
    assert policy.decide("fs", "read_note", READ_ONLY).decision == "ask"
    assert book(None).decide("fs", "delete_note", DESTRUCTIVE).decision == "allow"


# --- the per-run cap ------------------------------------------------------------------------------------


def test_the_run_counter_allows_max_per_run_calls_then_names_the_entry() -> None:
    counter = RunCounter()
    rule = 'fs: tools["write_file"]'
    assert [counter.check_and_count("fs", "write_file", 3, rule=rule) for _ in range(3)] == [None] * 3
    assert counter.check_and_count("fs", "write_file", 3, rule=rule) == (
        'write_file: the run made 3 calls, the most maxPerRun allows (fs: tools["write_file"])'
    )
    assert counter.calls("fs", "write_file") == 3  # a refused call is not counted


def test_the_run_counter_counts_each_tool_and_server_apart() -> None:
    counter = RunCounter()
    assert counter.check_and_count("fs", "write_a", 1) is None
    assert counter.check_and_count("fs", "write_b", 1) is None  # one pattern, two tools: a cap each
    assert counter.check_and_count("other", "write_a", 1) is None
    assert counter.check_and_count("fs", "write_a", 1) is not None
    assert counter.check_and_count("fs", "write_a", None) is None  # no cap
    assert RunCounter().check_and_count("fs", "write_a", 1) is None  # a new run starts at zero


# --- the rate across runs -------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_rate_limiter_allows_per_minute_calls_in_any_sliding_minute() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    rule = 'fs: tools["fetch"]'
    for _ in range(3):
        assert limiter.check_and_count("fs", "fetch", 3, rule=rule) is None
        clock.now += 10
    assert limiter.check_and_count("fs", "fetch", 3, rule=rule) == (
        'fetch: 3 calls in the last minute (all runs), the most perMinute allows (fs: tools["fetch"])'
    )
    assert limiter.recent("fs", "fetch") == 3
    clock.now = 1000.0 + RATE_WINDOW_SECONDS - 0.001  # the first call is still inside the window
    assert limiter.check_and_count("fs", "fetch", 3) is not None
    clock.now = 1000.0 + RATE_WINDOW_SECONDS  # now it has left it
    assert limiter.check_and_count("fs", "fetch", 3) is None
    assert limiter.check_and_count("fs", "fetch", 3) is not None  # calls at 1010, 1020 and now
    clock.now += 25  # 1010 and 1020 leave
    assert limiter.recent("fs", "fetch") == 1


def test_the_rate_limiter_keys_by_server_and_tool_and_ignores_uncapped_tools() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    assert limiter.check_and_count("fs", "a", 1) is None
    assert limiter.check_and_count("fs", "b", 1) is None
    assert limiter.check_and_count("other", "a", 1) is None
    assert limiter.check_and_count("fs", "a", 1) is not None
    assert all(limiter.check_and_count("fs", "c", None) is None for _ in range(100))
    assert limiter.recent("fs", "c") == 0


def test_the_rate_limiter_forgets_tools_whose_window_is_empty() -> None:
    clock = FakeClock()
    limiter = RateLimiter(clock)
    limiter.check_and_count("fs", "a", 5)
    clock.now += RATE_WINDOW_SECONDS + 1
    assert limiter.recent("fs", "a") == 0
    assert limiter._times == {}


# --- the models in code ---------------------------------------------------------------------------------


def test_models_can_be_built_in_code_with_python_names() -> None:
    rule = ToolRule(decision="allow", max_per_run=3, per_minute=4)
    assert (rule.max_per_run, rule.per_minute) == (3, 4)
    assert ToolRule.model_validate("ask").decision == "ask"
    with pytest.raises(ValidationError):
        ToolRule(decision="allow", max_per_run=0)


def test_a_policy_compares_by_value() -> None:
    raw = {"tools": {"w": {"decision": "allow", "when": {"/p": {"regex": "a+"}}}}}
    assert ServerPolicy.model_validate(raw) == ServerPolicy.model_validate(raw)


# --- real annotations from a real server ----------------------------------------------------------------


@pytest.mark.anyio
async def test_a_real_servers_annotations_arrive_as_tool_info_annotations_and_decide_in_annotations_mode() -> None:
    entry = annotated_entry()
    params = StdioServerParameters(command=entry["command"], args=entry["args"])
    with anyio.fail_after(30):
        async with Client(params, mode="legacy", cache=None) as client:
            tools = {t.name: ToolInfo.from_mcp("notes", t) for t in (await client.list_tools()).tools}
            written = await client.call_tool("write_note", {"path": "a", "text": "hello"})
            read = await client.call_tool("read_note", {"path": "a"})
    assert tools["read_note"].annotations == {"title": "Read a note", "readOnlyHint": True}
    assert tools["delete_note"].annotations == {"destructiveHint": True}
    assert tools["fetch_url"].annotations == {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": True}
    assert tools["write_note"].annotations == {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}
    assert tools["plain"].annotations is None
    assert written.structured_content == {"path": "a", "text": "hello"}
    assert read.structured_content == {"result": "hello"}

    policy = PolicyBook({"notes": ServerPolicy(default="deny")}, "annotations")
    decisions = {name: policy.decide("notes", name, info.annotations, {}).decision for name, info in tools.items()}
    assert decisions == {
        "read_note": "allow",
        "write_note": "deny",
        "delete_note": "ask",
        "fetch_url": "ask",
        "plain": "deny",
    }
