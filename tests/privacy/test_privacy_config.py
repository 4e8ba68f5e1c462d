"""The privacy parts of the config: a server's ``pii``, ``policy.pii.sinks``, the top-level ``pii`` and the
``CODE_MODE_PII*`` settings, each mistake named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode.config import CodeModeConfig, Settings, parse_document
from mcp_code_mode.engine._privacy import build_privacy, secret_values
from mcp_code_mode.errors import ConfigError


def document(servers: dict[str, Any], pii: Any = None) -> str:
    return json.dumps({"servers": servers, **({"pii": pii} if pii is not None else {})})


def error_of(servers: dict[str, Any], pii: Any = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse_document(document(servers, pii), source="cfg.json", base_dir=Path("/base"))
    return str(info.value)


def test_a_server_says_tokenize_or_off() -> None:
    servers, privacy = parse_document(
        document({"crm": {"command": "x", "pii": "tokenize"}, "wiki": {"command": "y", "pii": "off"}}),
        source="cfg.json",
        base_dir=Path("/base"),
    )
    assert servers["crm"].pii == "tokenize" and servers["wiki"].pii == "off"
    assert privacy.kinds() == ("email", "phone", "card", "iban", "ip", "ssn")
    assert "'pii'" in error_of({"crm": {"command": "x", "pii": "yes"}})


def test_the_top_level_pii_key() -> None:
    _, privacy = parse_document(
        document(
            {"crm": {"command": "x"}},
            {
                "detectors": {"ip": False},
                "custom": [{"kind": "employee_id", "regex": r"EMP-\d{6}"}],
                "phoneRegions": ["us", "GB"],
            },
        ),
        source="cfg.json",
        base_dir=Path("/base"),
    )
    assert privacy.kinds() == ("email", "phone", "card", "iban", "ssn", "employee_id")
    assert privacy.phone_regions == ["US", "GB"]


@pytest.mark.parametrize(
    ("pii", "expected"),
    [
        ({"detectors": {"mail": True}}, "unknown detector 'mail'"),
        ({"custom": [{"kind": "Employee", "regex": "E"}]}, "must be lower case"),
        ({"custom": [{"kind": "email", "regex": "E"}]}, "built-in kind"),
        ({"custom": [{"kind": "emp", "regex": "("}]}, "invalid regex"),
        ({"custom": [{"kind": "emp", "regex": "a*"}]}, "matches the empty string"),
        ({"custom": [{"kind": "emp", "regex": "a"}, {"kind": "emp", "regex": "b"}]}, "defined twice"),
        ({"phoneRegions": ["XX"]}, "unknown phone region 'XX'"),
        ({"detector": {}}, "detector"),
    ],
)
def test_mistakes_in_the_top_level_pii_are_named(pii: dict[str, Any], expected: str) -> None:
    message = error_of({"crm": {"command": "x"}}, pii)
    assert "top-level 'pii'" in message and expected in message


def test_sinks_name_known_kinds() -> None:
    ok = {"mail": {"command": "x", "policy": {"pii": {"sinks": {"send_*": ["email", "*"], "post": []}}}}}
    servers, _ = parse_document(document(ok), source="cfg.json", base_dir=Path("/base"))
    policy = servers["mail"].policy
    assert policy is not None and policy.pii is not None
    assert policy.pii.kinds_for("send_mail") == frozenset({"email", "*"})
    assert policy.pii.kinds_for("post") == frozenset()
    assert policy.pii.kinds_for("other") is None
    bad = {"mail": {"command": "x", "policy": {"pii": {"sinks": {"send": ["emails"]}}}}}
    assert "unknown kind 'emails'" in error_of(bad)
    custom = {"mail": {"command": "x", "policy": {"pii": {"sinks": {"send": ["employee_id"]}}}}}
    parse_document(
        document(custom, {"custom": [{"kind": "employee_id", "regex": "E\\d+"}]}),
        source="cfg.json",
        base_dir=Path("/base"),
    )
    typo = {"mail": {"command": "x", "policy": {"pii": {"sink": {}}}}}
    assert "did you mean 'sinks'" in error_of(typo)


def test_settings_the_vault_needs_a_key_and_a_bad_key_is_not_echoed() -> None:
    with pytest.raises(ConfigError, match="CODE_MODE_PII_VAULT=database needs CODE_MODE_PII_KEY"):
        Settings.from_env({"CODE_MODE_PII_VAULT": "database"})
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"CODE_MODE_PII_KEY": "tooshort-kEy-1"})
    assert "CODE_MODE_PII_KEY" in str(info.value) and "tooshort-kEy-1" not in str(info.value)
    settings = Settings.from_env({"CODE_MODE_PII_VAULT": "database", "CODE_MODE_PII_KEY": "a" * 64})
    assert settings.pii_vault == "database"


def test_secrets_are_every_env_and_header_value_but_paths(tmp_path: Path) -> None:
    config = CodeModeConfig.from_servers(
        {
            "crm": {
                "command": "x",
                "env": {"CRM_TOKEN": "${TOKEN}", "SHORT": "1234567", "FILE": f"{tmp_path}/m.jsonl"},
            },
            "api": {"url": "https://api.example.com/mcp", "headers": {"Authorization": "Bearer abcdef0123456789"}},
        },
        env={"TOKEN": "tok-0123456789abcdef"},
    )
    found = secret_values(config)
    assert "tok-0123456789abcdef" in found
    assert "Bearer abcdef0123456789" in found and "abcdef0123456789" in found
    assert f"{tmp_path}/m.jsonl" not in found
    privacy = build_privacy(config)
    run = privacy.run("c", tenant="default")
    assert run.mask_text("t=tok-0123456789abcdef s=1234567") == "t=[SECRET] s=1234567"  # under 8: not a secret


def test_who_tokenizes() -> None:
    servers = {"a": {"command": "x"}, "b": {"command": "x", "pii": "off"}, "c": {"command": "x", "pii": "tokenize"}}
    privacy = build_privacy(CodeModeConfig.from_servers(servers))
    assert privacy.tokenize == {"a": False, "b": False, "c": True} and privacy.active
    everywhere = build_privacy(CodeModeConfig.from_servers(servers, settings=Settings(pii="tokenize")))
    assert everywhere.tokenize == {"a": True, "b": False, "c": True}
    none = build_privacy(CodeModeConfig.from_servers({"a": {"command": "x"}}))
    assert not none.active


def test_doctor_says_what_is_tokenized() -> None:
    from mcp_code_mode.doctor import check_privacy
    from mcp_code_mode.engine import CodeMode

    from ..conftest import make_config

    quiet = check_privacy(CodeMode(make_config({"a": {"command": "x", "env": {"K": "0123456789ab"}}})))
    assert quiet.status == "info" and "not tokenized" in quiet.detail and "1 configured value" in quiet.detail
    loud = check_privacy(CodeMode(make_config({"a": {"command": "x", "pii": "tokenize"}})))
    assert loud.status == "ok" and "tokenized for a" in loud.detail and "vault in memory" in loud.detail
