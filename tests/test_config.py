"""The servers file and settings: what is accepted, and the messages for what is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_code_mode.config import (
    CodeModeConfig,
    ServerConfig,
    Settings,
    expand,
    load_servers,
    parse_servers,
    resolve_server,
)
from mcp_code_mode.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def parse(text: str) -> dict[str, ServerConfig]:
    return parse_servers(text, source="cfg.json", base_dir=Path("/base"))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text)
    return str(info.value)


def test_servers_key_and_claude_desktop_mcpservers_key_are_both_accepted() -> None:
    a = parse('{"servers": {"fs": {"command": "npx", "args": ["x"]}}}')
    b = parse('{"mcpServers": {"fs": {"command": "npx", "args": ["x"]}}}')
    assert a == b
    assert a["fs"].transport == "stdio"
    assert a["fs"].args == ["x"]


def test_url_entries_are_http_and_type_aliases_are_understood() -> None:
    servers = parse(
        '{"servers": {"a": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer t"}},'
        ' "b": {"type": "streamable-http", "url": "http://h/mcp"},'
        ' "c": {"type": "stdio", "command": "x"}}}'
    )
    assert servers["a"].transport == "http"
    assert servers["a"].headers == {"Authorization": "Bearer t"}
    assert servers["b"].transport == "http"
    assert servers["c"].transport == "stdio"


def test_disabled_timeout_and_description_are_read() -> None:
    server = parse('{"servers": {"a": {"command": "x", "disabled": true, "timeout": 5, "description": "d"}}}')["a"]
    assert server.disabled is True
    assert server.timeout == 5
    assert server.description == "d"


def test_invalid_json_names_the_file_and_position() -> None:
    message = error_of('{"servers": {"a": }')
    assert message.startswith("cfg.json: invalid JSON at line 1, column")


def test_a_key_given_twice_in_one_object_is_refused_naming_it() -> None:
    """A second ``default`` below the first would win silently in a plain JSON parser: a policy could open up unseen."""
    text = '{"servers": {"fs": {"command": "x", "policy": {"default": "deny", "tools": {}, "default": "allow"}}}}'
    message = error_of(text)
    assert message.startswith("cfg.json: the key 'default' appears twice in one object")
    assert "'tools'" in message
    assert error_of('{"servers": {"a": {"command": "x"}}, "servers": {}}').startswith("cfg.json: the key 'servers'")


def test_a_package_whitelist_with_a_package_twice_is_refused(tmp_path: Path) -> None:
    from mcp_code_mode.errors import PackageError
    from mcp_code_mode.packages import Whitelist

    path = tmp_path / "allowed.json"
    path.write_text('{"python": {"numpy": ["numpy"], "numpy": ["os"]}, "javascript": {}}')
    with pytest.raises(PackageError, match="the key 'numpy' appears twice"):
        Whitelist.load(path)


def test_unknown_transport_names_the_server_and_field() -> None:
    message = error_of('{"servers": {"remote": {"type": "sse", "url": "http://x"}}}')
    assert "cfg.json" in message
    assert "server 'remote'" in message
    assert "'type'" in message
    assert "unknown transport 'sse'" in message


def test_missing_command_names_the_server_and_field() -> None:
    message = error_of('{"servers": {"fs": {"args": ["x"]}}}')
    assert "server 'fs'" in message and "'command'" in message

    message = error_of('{"servers": {"fs": {"type": "stdio", "args": ["x"]}}}')
    assert "server 'fs', field 'command': missing" in message


def test_wrong_types_name_the_server_and_the_exact_field() -> None:
    message = error_of('{"servers": {"fs": {"command": "x", "args": "not-a-list"}}}')
    assert "server 'fs', field 'args'" in message
    message = error_of('{"servers": {"fs": {"command": "x", "args": ["ok", 3]}}}')
    assert "field 'args[1]'" in message
    message = error_of('{"servers": {"fs": {"command": "x", "env": {"A": 1}}}}')
    assert "field 'env.A'" in message
    message = error_of('{"servers": {"fs": {"command": "x", "timeout": -1}}}')
    assert "field 'timeout'" in message


def test_every_problem_in_the_file_is_reported_at_once() -> None:
    message = error_of('{"servers": {"a": {"args": []}, "b": {"command": "x", "disabled": "maybe"}}}')
    assert "server 'a'" in message
    assert "server 'b', field 'disabled'" in message


def test_top_level_shape_errors() -> None:
    assert "no 'servers' or 'mcpServers'" in error_of('{"tools": {}}')
    assert "must be an object" in error_of("[1, 2]")
    assert "both 'servers' and 'mcpServers'" in error_of('{"servers": {}, "mcpServers": {}}')
    assert "must be an object" in error_of('{"servers": {"a": "npx"}}')


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_servers(tmp_path / "absent.json")


def test_variables_expand_from_the_environment_with_defaults() -> None:
    env = {"TOKEN": "abc", "EMPTY": ""}
    assert expand("Bearer ${TOKEN}", env, where="w") == "Bearer abc"
    assert expand("${MISSING:-fallback}", env, where="w") == "fallback"
    assert expand("${EMPTY:-fallback}", env, where="w") == "fallback"
    assert expand("${EMPTY}", env, where="w") == ""
    assert expand("plain $TOKEN text", env, where="w") == "plain $TOKEN text"


def test_an_unset_variable_names_the_server_field_and_variable() -> None:
    server = parse('{"servers": {"gh": {"command": "x", "env": {"GITHUB_TOKEN": "${GH_TOKEN}"}}}}')["gh"]
    with pytest.raises(ConfigError) as info:
        resolve_server(server, {}, 60)
    assert "server 'gh', field 'env.GITHUB_TOKEN'" in str(info.value)
    assert "GH_TOKEN is not set" in str(info.value)


def test_resolve_expands_every_string_field_and_makes_cwd_absolute() -> None:
    server = parse(
        '{"servers": {"a": {"command": "${BIN}/run", "args": ["--dir", "${DIR:-/data}"],'
        ' "cwd": "sub", "env": {"K": "${K}"}}}}'
    )["a"]
    resolved = resolve_server(server, {"BIN": "/opt", "K": "v"}, 42)
    assert resolved.command == "/opt/run"
    assert resolved.args == ["--dir", "/data"]
    assert resolved.env == {"K": "v"}
    assert resolved.cwd == Path("/base/sub")
    assert resolved.timeout == 42


def test_config_dir_variable_is_the_directory_of_the_file() -> None:
    server = parse('{"servers": {"a": {"command": "x", "env": {"F": "${CONFIG_DIR}/m.jsonl"}}}}')["a"]
    assert resolve_server(server, {}, 1).env == {"F": "/base/m.jsonl"}


def test_dotenv_values_are_used_for_expansion_and_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("SECRET_TOKEN=from-dotenv\nCODE_MODE_POOL_SIZE=5\n", encoding="utf-8")
    (tmp_path / "servers.json").write_text(
        '{"servers": {"a": {"command": "x", "env": {"T": "${SECRET_TOKEN}"}}}}', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CODE_MODE_ENV_FILE", raising=False)
    monkeypatch.delenv("CODE_MODE_POOL_SIZE", raising=False)
    config = CodeModeConfig.load(tmp_path / "servers.json")
    assert config.settings.pool_size == 5
    assert resolve_server(config.servers["a"], config.env, 1).env == {"T": "from-dotenv"}
    monkeypatch.setenv("SECRET_TOKEN", "from-environment")
    config = CodeModeConfig.load(tmp_path / "servers.json")
    assert resolve_server(config.servers["a"], config.env, 1).env == {"T": "from-environment"}


def test_config_path_comes_from_code_mode_config(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere.json"
    path.write_text('{"mcpServers": {"z": {"command": "x"}}}', encoding="utf-8")
    config = CodeModeConfig.load(env={"CODE_MODE_CONFIG": str(path)})
    assert list(config.servers) == ["z"]


def test_bad_settings_are_named_and_unknown_ones_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError, match="CODE_MODE_POOL_SIZE"):
        Settings.from_env({"CODE_MODE_POOL_SIZE": "many"})
    assert Settings.from_env({"CODE_MODE_POOL_SIZ": "2"}) == Settings()
    assert "ignoring unknown setting(s) CODE_MODE_POOL_SIZ" in caplog.text


def test_env_example_lists_every_setting_with_its_default() -> None:
    lines = (ROOT / ".env.example").read_text(encoding="utf-8").splitlines()
    listed = dict(line.split("=", 1) for line in lines if line.startswith("CODE_MODE_"))
    for name, field in Settings.model_fields.items():
        key = f"CODE_MODE_{name.upper()}"
        assert key in listed, f"{key} is missing from .env.example"
        default = "" if field.default is None else str(field.default)
        default = default.lower() if isinstance(field.default, bool) else default
        assert listed[key] in (default, default.removesuffix(".0")), f"{key}: {listed[key]!r} != {default!r}"
    assert Settings.from_env(listed) == Settings()


def test_the_shipped_config_is_valid_and_uses_the_filesystem_server_on_workspace() -> None:
    servers = load_servers(ROOT / "mcp_servers.json")
    fs = servers["filesystem"]
    assert "@modelcontextprotocol/server-filesystem" in fs.args
    assert "./workspace" in fs.args


def test_a_misspelt_field_of_a_server_names_the_server_the_field_and_the_nearest_valid_one() -> None:
    message = error_of('{"servers": {"fs": {"command": "x", "arg": ["-y"], "enviroment": {"A": "1"}}}}')
    assert message.splitlines() == [
        "cfg.json: server 'fs': unknown field 'arg' (did you mean 'args'?)",
        "cfg.json: server 'fs': unknown field 'enviroment' (did you mean 'env'?)",
    ]


def test_an_unknown_field_far_from_any_valid_one_lists_the_valid_fields() -> None:
    message = error_of('{"servers": {"fs": {"command": "x", "colour": "red"}}}')
    assert "server 'fs': unknown field 'colour' (valid: command, args, env, cwd, url, headers, type" in message


def test_every_documented_field_is_accepted() -> None:
    entry = {
        "command": "x",
        "args": ["a"],
        "env": {"A": "1"},
        "cwd": ".",
        "type": "stdio",
        "disabled": False,
        "timeout": 5,
        "startupTimeout": 9,
        "description": "d",
    }
    http = {"url": "https://example.invalid/mcp", "headers": {"A": "b"}, "transport": "http"}

    servers = parse(json.dumps({"servers": {"a": entry, "b": http, "c": {"command": "y", "startup_timeout": 3}}}))
    assert servers["a"].startup_timeout == 9 and servers["c"].startup_timeout == 3
    assert servers["b"].headers == {"A": "b"}


def test_an_unknown_top_level_key_names_the_nearest_valid_one_and_vs_code_inputs_are_accepted() -> None:
    assert error_of('{"mcpServer": {}}').splitlines()[0] == (
        "cfg.json: unknown top-level key 'mcpServer' (did you mean 'mcpServers'?)"
    )
    assert parse('{"$schema": "x", "inputs": [], "servers": {"a": {"command": "x"}}}').keys() == {"a"}
