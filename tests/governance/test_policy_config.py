"""``policy`` in the servers file: a valid one loads; every kind of mistake stops loading, naming server and entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.config import CodeModeConfig, ServerConfig, Settings, load_servers, parse_servers
from mcp_code_mode.errors import ConfigError
from mcp_code_mode.governance import PolicyBook

EXAMPLE: dict[str, Any] = {
    "servers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "./workspace"],
            "policy": {
                "default": "ask",
                "tools": {
                    "read_*": "allow",
                    "list_*": "allow",
                    "write_file": {
                        "decision": "allow",
                        "when": {"/path": {"glob": "reports/**"}},
                        "otherwise": "ask",
                        "maxPerRun": 20,
                        "perMinute": 60,
                    },
                    "edit_file": {"decision": "allow", "when": {"/edits/0/oldText": {"regex": "TODO.*"}}},
                    "move_file": {"decision": "ask", "maxPerRun": 5},
                    "delete_*": "deny",
                },
            },
        },
        "search": {
            "url": "https://search.example/mcp",
            "policy": {"tools": {"query": {"decision": "allow", "when": {"/limit": {"min": 1, "max": 50}}}}},
        },
        "memory": {"command": "mcp-server-memory"},
    }
}


def parse(data: object) -> dict[str, ServerConfig]:
    return parse_servers(json.dumps(data), source="cfg.json", base_dir=Path("/base"))


def error_of(policy: object, server: str = "fs") -> str:
    with pytest.raises(ConfigError) as info:
        parse({"servers": {server: {"command": "x", "policy": policy}}})
    return str(info.value)


def test_a_servers_file_with_a_policy_loads(tmp_path: Path) -> None:
    path = tmp_path / "mcp_servers.json"
    path.write_text(json.dumps(EXAMPLE), encoding="utf-8")
    servers = load_servers(path)
    fs = servers["filesystem"].policy
    assert fs is not None and fs.default == "ask"
    assert list(fs.tools) == ["read_*", "list_*", "write_file", "edit_file", "move_file", "delete_*"]
    assert fs.tools["write_file"].max_per_run == 20 and fs.tools["write_file"].otherwise == "ask"
    assert servers["memory"].policy is None

    book = PolicyBook({name: s.policy for name, s in servers.items()}, "explicit")
    assert book.decide("filesystem", "write_file", None, {"path": "reports/a.md"}).decision == "allow"
    assert book.decide("filesystem", "write_file", None, {"path": "a.md"}).decision == "ask"
    assert book.decide("filesystem", "edit_file", None, {"edits": [{"oldText": "TODO: x"}]}).decision == "allow"
    assert book.decide("search", "query", None, {"limit": 500}).decision == "deny"
    assert book.decide("memory", "delete_entities").decision == "allow"
    assert book.limits("filesystem", "move_file") == (5, None)


def test_a_config_built_in_code_carries_the_policy_and_the_mode() -> None:
    config = CodeModeConfig.from_servers(
        {"fs": {"command": "x", "policy": {"default": "deny"}}}, settings=Settings(policy="annotations"), env={}
    )
    book = PolicyBook({name: s.policy for name, s in config.servers.items()}, config.settings.policy)
    assert book.decide("fs", "read_file", {"readOnlyHint": True}).decision == "allow"
    assert book.decide("fs", "write_file", {}).decision == "deny"


def test_the_shorthand_and_the_full_form_are_the_same_policy() -> None:
    short = parse({"servers": {"a": {"command": "x", "policy": {"tools": {"t": "ask"}}}}})
    full = parse({"servers": {"a": {"command": "x", "policy": {"tools": {"t": {"decision": "ask"}}}}}})
    assert short == full


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param(
            {"defualt": "deny"},
            "server 'fs', field 'policy': unknown key 'defualt' in a policy (did you mean 'default'?)",
            id="unknown-policy-key",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "wehn": {}}}},
            "server 'fs', field 'policy.tools.write_file': unknown key 'wehn' in a tool rule (did you mean 'when'?)",
            id="unknown-rule-key",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "when": {"/path": {"glob": "x", "colour": "red"}}}}},
            "server 'fs', field 'policy.tools.write_file.when./path': unknown key 'colour' in a condition "
            "(valid: glob, regex, min, max)",
            id="unknown-condition-key",
        ),
        pytest.param(
            {"default": "maybe"},
            "server 'fs', field 'policy.default': Input should be 'allow', 'ask' or 'deny' (got 'maybe')",
            id="bad-default",
        ),
        pytest.param(
            {"tools": {"write_file": "allwo"}},
            "server 'fs', field 'policy.tools.write_file.decision': Input should be 'allow', 'ask' or 'deny'",
            id="bad-shorthand-decision",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "yes"}}},
            "server 'fs', field 'policy.tools.write_file.decision': Input should be 'allow', 'ask' or 'deny'",
            id="bad-decision",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "otherwise": "allow"}}},
            "server 'fs', field 'policy.tools.write_file.otherwise': Input should be 'ask' or 'deny'",
            id="bad-otherwise",
        ),
        pytest.param(
            {"tools": {"write_file": {"when": {}}}},
            "server 'fs', field 'policy.tools.write_file': missing 'decision' ('allow', 'ask' or 'deny')",
            id="missing-decision",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "when": {"path": {"glob": "x"}}}}},
            "server 'fs', field 'policy.tools.write_file.when': JSON pointer 'path' must start with '/'",
            id="pointer-without-slash",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "when": {"/a~2": {"glob": "x"}}}}},
            "server 'fs', field 'policy.tools.write_file.when': JSON pointer '/a~2': '~' must be followed by 0 or 1",
            id="pointer-bad-escape",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "when": {"": {"glob": "x"}}}}},
            "server 'fs', field 'policy.tools.write_file.when': JSON pointer '' must start with '/'",
            id="pointer-to-everything",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "when": {"/name": {"regex": "(unclosed"}}}}},
            "server 'fs', field 'policy.tools.write_file.when./name': invalid regex '(unclosed': missing ),",
            id="bad-regex",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "when": {"/path": {"glob": "[z-a]"}}}}},
            "server 'fs', field 'policy.tools.write_file.when./path': invalid glob '[z-a]': bad character range",
            id="bad-glob",
        ),
        pytest.param(
            {"tools": {"write_file": {"decision": "allow", "when": {"/path": {"glob": []}}}}},
            "server 'fs', field 'policy.tools.write_file.when./path': an empty list of globs matches nothing",
            id="empty-glob-list",
        ),
        pytest.param(
            {"tools": {"q": {"decision": "allow", "when": {"/n": {"min": 10, "max": 1}}}}},
            "server 'fs', field 'policy.tools.q.when./n': min 10 is greater than max 1",
            id="min-above-max",
        ),
        pytest.param(
            {"tools": {"q": {"decision": "allow", "when": {"/n": {"min": "1"}}}}},
            "server 'fs', field 'policy.tools.q.when./n.min': a bound must be a number, got \"1\"",
            id="non-numeric-bound",
        ),
        pytest.param(
            {"tools": {"q": {"decision": "allow", "when": {"/n": {"glob": "x", "regex": "y"}}}}},
            "server 'fs', field 'policy.tools.q.when./n': a condition is one of {'glob': ...}, {'regex': ...} or "
            "{'min': ..., 'max': ...}; this one has glob and regex",
            id="two-kinds",
        ),
        pytest.param(
            {"tools": {"q": {"decision": "allow", "when": {"/n": {}}}}},
            "server 'fs', field 'policy.tools.q.when./n': a condition is one of",
            id="no-kind",
        ),
        pytest.param(
            {"tools": {"q": {"decision": "allow", "maxPerRun": 0}}},
            "server 'fs', field 'policy.tools.q.maxPerRun': Input should be greater than 0 (got 0)",
            id="zero-cap",
        ),
        pytest.param(
            {"tools": {"q": {"decision": "allow", "perMinute": -5}}},
            "server 'fs', field 'policy.tools.q.perMinute': Input should be greater than 0 (got -5)",
            id="negative-rate",
        ),
        pytest.param(
            {"tools": {"q": {"decision": "allow", "maxPerRun": 2.5}}},
            "server 'fs', field 'policy.tools.q.maxPerRun': Input should be a valid integer (got 2.5)",
            id="fractional-cap",
        ),
        pytest.param(
            {"tools": {"q": {"decision": "allow", "maxPerRun": True}}},
            "server 'fs', field 'policy.tools.q.maxPerRun': Input should be a valid integer (got True)",
            id="boolean-cap",
        ),
        pytest.param(
            {"tools": {"*": "allow", "delete_file": "deny"}},
            "server 'fs', field 'policy.tools': tools[\"delete_file\"] never applies: tools[\"*\"] comes first",
            id="shadowed-entry",
        ),
        pytest.param(
            {"tools": {"": "deny"}},
            "server 'fs', field 'policy.tools': an empty tool pattern matches no tool",
            id="empty-pattern",
        ),
        pytest.param(
            {"tools": ["read_*"]},
            "server 'fs', field 'policy.tools': Input should be a valid dictionary",
            id="tools-not-an-object",
        ),
        pytest.param("deny", "server 'fs', field 'policy': Input should be", id="policy-not-an-object"),
    ],
)
def test_a_policy_mistake_stops_loading_with_a_message_naming_the_server_and_the_entry(
    policy: object, expected: str
) -> None:
    message = error_of(policy)
    assert message.startswith("cfg.json: ")
    assert expected in message


def test_every_policy_mistake_in_the_file_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse(
            {
                "servers": {
                    "a": {"command": "x", "policy": {"default": "nope"}},
                    "b": {"command": "x", "policy": {"tools": {"t": {"decision": "allow", "maxPerRun": 0}}}},
                }
            }
        )
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert "server 'a', field 'policy.default'" in lines[0]
    assert "server 'b', field 'policy.tools.t.maxPerRun'" in lines[1]


def test_a_policy_error_stops_code_mode_config_load(tmp_path: Path) -> None:
    path = tmp_path / "mcp_servers.json"
    path.write_text(
        json.dumps(
            {
                "servers": {
                    "fs": {
                        "command": "x",
                        "policy": {"tools": {"w": {"decision": "allow", "when": {"/p": {"regex": "["}}}}},
                    }
                }
            }
        ),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"server 'fs', field 'policy.tools.w.when./p': invalid regex '\['"):
        CodeModeConfig.load(path, env={})


def test_a_literal_entry_after_a_pattern_that_does_not_match_it_is_fine() -> None:
    servers = parse(
        {
            "servers": {
                "fs": {"command": "x", "policy": {"tools": {"read_*": "allow", "write_file": "ask", "write_*": "deny"}}}
            }
        }
    )
    policy = servers["fs"].policy
    assert policy is not None and list(policy.tools) == ["read_*", "write_file", "write_*"]
