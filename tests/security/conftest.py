"""Planted secrets, a canary path, a counting loopback listener, and an engine to attack.

Secrets are planted where the isolation issue says a script must never reach them: the server's
environment, the project's .env, a downstream server's env, and files outside the workspace.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcp_code_mode.config import CodeModeConfig
from mcp_code_mode.engine import CodeMode, RunResult

from ..conftest import fixture_entry
from ..fixtures.loopback import Listener


@dataclass
class Planted:
    host_env: str
    dotenv: str
    server_env: str
    file: str
    secret_file: Path
    dotenv_file: Path
    canary: Path
    home_file: Path

    def all(self) -> list[str]:
        return [self.host_env, self.dotenv, self.server_env, self.file]


@pytest.fixture(scope="session")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Planted]:
    base = tmp_path_factory.mktemp("secrets")
    values = {name: f"{name}-{secrets.token_hex(12)}" for name in ("hostenv", "dotenv", "serverenv", "file")}
    secret_file = base / "outside" / "secret.txt"
    secret_file.parent.mkdir()
    secret_file.write_text(values["file"], encoding="utf-8")
    project = base / "project"
    project.mkdir()
    dotenv_file = project / ".env"
    dotenv_file.write_text(f"DOTENV_SECRET={values['dotenv']}\nCODE_MODE_LIMIT_MEMORY_MB=512\n", encoding="utf-8")
    home_file = Path.home() / ".mcp-code-mode-test-secret"
    home_file.write_text(values["file"], encoding="utf-8")
    os.environ["CODE_MODE_TEST_HOST_SECRET"] = values["hostenv"]
    try:
        yield Planted(
            host_env=values["hostenv"],
            dotenv=values["dotenv"],
            server_env=values["serverenv"],
            file=values["file"],
            secret_file=secret_file,
            dotenv_file=dotenv_file,
            canary=base / "canary-written-by-a-script",
            home_file=home_file,
        )
    finally:
        os.environ.pop("CODE_MODE_TEST_HOST_SECRET", None)
        home_file.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture(scope="module")
async def attacked(planted: Planted, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:
    """An engine loaded the way a user loads it: .env in the working directory, secrets in a server's env."""
    project = planted.dotenv_file.parent
    config_file = project / "mcp_servers.json"
    import json

    servers = {"fixture": fixture_entry(SERVER_SECRET=planted.server_env, DOTENV_COPY="${DOTENV_SECRET}")}
    config_file.write_text(json.dumps({"servers": servers}), encoding="utf-8")
    cwd = Path.cwd()
    os.chdir(project)
    try:
        config = CodeModeConfig.load(config_file)
    finally:
        os.chdir(cwd)
    assert config.env.get("DOTENV_SECRET") == planted.dotenv  # the .env really was read
    async with CodeMode(config) as cm:
        yield cm


def assert_nothing_leaked(result: RunResult, planted: Planted) -> None:
    blob = result.model_dump_json(by_alias=True)
    for secret in planted.all():
        assert secret not in blob, f"a planted secret reached the script's result: {blob[:2000]}"
    assert not planted.canary.exists(), "a script wrote a file outside its workspace"
