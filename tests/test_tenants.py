"""The tokens file (CODE_MODE_AUTH_TOKENS): parsing, its errors, its permissions, the verifier and ``tokens add``."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from mcp_code_mode._clients import TenantAccessToken, scoped
from mcp_code_mode.cli import main
from mcp_code_mode.config import CodeModeConfig, Settings
from mcp_code_mode.errors import ConfigError
from mcp_code_mode.http_server import TenantTokenVerifier
from mcp_code_mode.tenants import DEFAULT_TENANT, Tenant, TenantBook, load_tenants, parse_tenants

pytestmark = pytest.mark.anyio

SERVERS = ("filesystem", "memory", "fixture")


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def write(path: Path, data: Any, mode: int = 0o600) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2), encoding="utf-8")
    path.chmod(mode)
    return path


def test_a_tokens_file_maps_each_token_to_its_tenant_with_its_servers_and_policy(tmp_path: Path) -> None:
    write(tmp_path / "acme.json", {"servers": {"filesystem": {"default": "deny"}}})
    book = load_tenants(
        write(
            tmp_path / "tokens.json",
            {
                "tenants": [
                    {
                        "name": "acme",
                        "token_sha256": [sha("a1"), sha("a2")],
                        "servers": ["filesystem"],
                        "policy": "acme.json",
                    },
                    {"name": "beta", "token_sha256": sha("b1")},
                ]
            },
        ),
        SERVERS,
    )
    acme = book.verify("a1")
    assert acme == book.verify("a2") == Tenant("acme", frozenset({"filesystem"}), (tmp_path / "acme.json").resolve())
    assert book.verify("b1") == Tenant("beta")
    assert book.verify("b2") is None and book.verify("") is None and book.verify(sha("a1")) is None


def test_every_problem_of_a_tokens_file_is_named_by_its_field(tmp_path: Path) -> None:
    text = json.dumps(
        {
            "tenants": [
                {"name": "Acme!", "token_sha256": sha("x")},
                {"name": "beta", "token_sha256": "not-a-hash", "servers": ["nope"], "colour": "red"},
                {"name": "gamma", "token_sha256": [sha("g")], "policy": "missing.json"},
                {"name": "delta"},
                {"name": "gamma", "token_sha256": sha("g2")},
                {"name": "eps", "token_sha256": sha("g")},
            ]
        }
    )
    with pytest.raises(ConfigError) as caught:
        parse_tenants(text, source="tokens.json", base=tmp_path, servers=SERVERS)
    message = str(caught.value)
    for expected in (
        "tokens.json: tenants[0].name: must match",
        "tenants[1] (beta).token_sha256[0]: must be 64 lower-case hex digits (a SHA-256, never the token itself), "
        "got 10 characters",
        "tenants[1] (beta).servers: no server 'nope' in the servers file (configured: filesystem, memory, fixture)",
        "tenants[1] (beta): unknown field 'colour' (valid: name, token_sha256, servers, policy)",
        "tenants[2] (gamma).policy: ",
        "missing.json: no such file",
        "tenants[3] (delta).token_sha256: missing",
        "tenants[4]: the tenant 'gamma' is listed twice",
        "tenants[5] (eps): a token hash is also 'gamma''s",
    ):
        assert expected in message, (expected, message)
    assert "not-a-hash" not in message  # what was given where a hash belongs may be a token: never echoed


def test_bad_json_a_duplicate_key_and_a_wrong_top_level_name_their_line_or_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tokens.json: invalid JSON at line 2, column 1"):
        parse_tenants('{"tenants": [\n}', source="tokens.json", base=tmp_path, servers=SERVERS)
    with pytest.raises(ConfigError, match="the key 'name' appears twice"):
        parse_tenants('{"tenants": [{"name": "a", "name": "b"}]}', source="tokens.json", base=tmp_path, servers=SERVERS)
    with pytest.raises(ConfigError, match=r'the top level must be \{"tenants": \[...\]\}'):
        parse_tenants('{"tenant": []}', source="tokens.json", base=tmp_path, servers=SERVERS)
    with pytest.raises(ConfigError, match="no tenants"):
        parse_tenants('{"tenants": []}', source="tokens.json", base=tmp_path, servers=SERVERS)


def test_a_tenant_policy_file_is_checked_at_load_naming_server_and_field(tmp_path: Path) -> None:
    write(tmp_path / "p.json", {"servers": {"memory": {"default": "allow"}, "filesystem": {"default": "maybe"}}})
    entry = {"name": "acme", "token_sha256": sha("a"), "servers": ["filesystem"], "policy": "p.json"}
    with pytest.raises(ConfigError) as caught:
        load_tenants(write(tmp_path / "tokens.json", {"tenants": [entry]}), SERVERS)
    assert "servers.memory: not a server of this tenant (its servers: filesystem)" in str(caught.value)
    assert "servers.filesystem.default: " in str(caught.value)


def test_a_tokens_file_others_may_write_is_refused_and_one_they_may_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = {"tenants": [{"name": "acme", "token_sha256": sha("a")}]}
    with pytest.raises(ConfigError, match="may be written by other users .*chmod 600"):
        load_tenants(write(tmp_path / "t.json", data, 0o622), SERVERS)
    with caplog.at_level(logging.WARNING):
        assert load_tenants(write(tmp_path / "t.json", data, 0o644), SERVERS).verify("a") == Tenant("acme")
    assert "may be read by other users (mode 644)" in caplog.text


def test_setting_both_the_shared_token_and_the_tokens_file_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="CODE_MODE_AUTH_TOKEN and CODE_MODE_AUTH_TOKENS are both set: use one"):
        Settings.from_env({"CODE_MODE_AUTH_TOKEN": "secret-token", "CODE_MODE_AUTH_TOKENS": str(tmp_path / "t.json")})


def test_the_config_loads_the_tokens_file_against_its_servers_and_the_shared_token_is_tenant_default(
    tmp_path: Path,
) -> None:
    tokens = write(tmp_path / "t.json", {"tenants": [{"name": "acme", "token_sha256": sha("a"), "servers": ["x"]}]})
    with pytest.raises(ConfigError, match="no server 'x' in the servers file"):
        CodeModeConfig.from_servers({}, settings=Settings(auth_tokens=tokens))
    config = CodeModeConfig.from_servers({}, settings=Settings(auth_token="shared-token"))  # pyright: ignore[reportArgumentType]
    assert config.tenants is not None and config.tenants.verify("shared-token") == DEFAULT_TENANT


async def test_the_verifier_names_the_tenant_and_binds_sessions_to_it() -> None:
    book = TenantBook((Tenant("acme"),), ((hashlib.sha256(b"a").digest(), Tenant("acme")),))
    verified = await TenantTokenVerifier(book).verify_token("a")
    assert isinstance(verified, TenantAccessToken)
    assert verified.tenant == Tenant("acme") and verified.client_id == "tenant:acme"
    assert await TenantTokenVerifier(book).verify_token("b") is None
    shared = await TenantTokenVerifier(TenantBook.shared("s")).verify_token("s")
    assert isinstance(shared, TenantAccessToken) and shared.client_id == "mcp-code-mode-client"


def test_a_client_identity_carries_its_tenant_except_the_default_one() -> None:
    assert scoped(DEFAULT_TENANT, "stdio") == "stdio"
    assert scoped(Tenant("acme"), "http-session:1") == "tenant:acme/http-session:1"
    assert scoped(Tenant("acme"), "http-session:1") != scoped(Tenant("beta"), "http-session:1")


def test_tokens_add_prints_a_token_once_and_writes_only_its_hash_with_mode_600(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.json"
    assert (
        main(["tokens", "add", "acme", "--servers", "filesystem, memory", "--policy", "acme.json", "--file", str(path)])
        == 0
    )
    first = capsys.readouterr().out.strip()
    assert main(["tokens", "add", "acme", "--file", str(path)]) == 0
    second = capsys.readouterr().out.strip()
    assert main(["tokens", "add", "beta", "--file", str(path)]) == 0
    third = capsys.readouterr().out.strip()
    assert len({first, second, third}) == 3 and all(len(t) >= 40 for t in (first, second, third))
    text = path.read_text(encoding="utf-8")
    assert first not in text and second not in text and third not in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    write(tmp_path / "acme.json", {"servers": {}})
    book = load_tenants(path, SERVERS)
    acme = Tenant("acme", frozenset({"filesystem", "memory"}), (tmp_path / "acme.json").resolve())
    assert book.verify(first) == book.verify(second) == acme
    assert book.verify(third) == Tenant("beta")
    assert main(["tokens", "list", "--file", str(path)]) == 0
    listed = capsys.readouterr().out
    assert "acme: 2 tokens; servers: filesystem, memory; policy: acme.json" in listed
    assert "beta: 1 token; servers: every server" in listed and first not in listed


def test_tokens_add_refuses_a_bad_name_and_a_file_that_is_not_a_tokens_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tokens", "add", "Not Valid", "--file", str(tmp_path / "t.json")]) == 2
    assert "a tenant's name must match" in capsys.readouterr().err
    (tmp_path / "other.json").write_text("[]", encoding="utf-8")
    assert main(["tokens", "add", "acme", "--file", str(tmp_path / "other.json")]) == 2
    assert "not a tokens file" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


def test_beyond_loopback_either_kind_of_token_will_do_and_none_is_refused(tmp_path: Path) -> None:
    from mcp_code_mode.http_server import HttpOptions, check_bind, describe

    wide = HttpOptions(host="0.0.0.0")
    with pytest.raises(ConfigError, match="CODE_MODE_AUTH_TOKEN or CODE_MODE_AUTH_TOKENS"):
        check_bind(wide, Settings())
    check_bind(wide, Settings(auth_token="shared-token"))  # pyright: ignore[reportArgumentType]
    tokens = Settings(auth_tokens=tmp_path / "tokens.json")
    check_bind(wide, tokens)
    assert f"bearer token of a tenant required ({tmp_path / 'tokens.json'})" in describe(wide, tokens)


def test_a_skills_tool_list_shows_a_tenant_with_servers_only_those_servers_tools() -> None:
    from mcp_code_mode._skill_tools import seen
    from mcp_code_mode.skills.model import SkillVersion, ToolRef
    from mcp_code_mode.tenants import acting_as

    tools = (ToolRef("fixture", "add", "h1"), ToolRef("extra", "echo", "h2"))
    skill = SkillVersion("both", 1, "python", "calls two servers", "def both():\n    pass", {}, tools)
    with acting_as(Tenant("gamma", frozenset({"fixture"}))):
        assert seen(skill)["tools"] == ["fixture.add"]
    assert seen(skill)["tools"] == ["fixture.add", "extra.echo"]
