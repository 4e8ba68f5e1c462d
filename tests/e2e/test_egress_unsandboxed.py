"""A host without a network namespace (``CODE_MODE_SANDBOX=process``, as on macOS): a run that asks for the
network is refused unless ``CODE_MODE_ALLOW_UNSANDBOXED_NETWORK``, never given the host's network silently,
and ``get_execution_limits`` says so."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mcp_code_mode.config import CodeModeConfig
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import UnsupportedError
from mcp_code_mode.presentation import execution_limits

from ..conftest import make_config
from ..fixtures.loopback import Loopback, loopback_server

pytestmark = pytest.mark.anyio

PURE = "total = sum(range(10))\ntotal"


def config(base: Path, **settings: object) -> CodeModeConfig:
    return make_config({}, workspace_dir=base / "runs", sandbox="process", pool_size=1, cpython_pool_size=0, **settings)


@pytest.fixture(scope="module")
async def refusing(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:
    async with CodeMode(config(tmp_path_factory.mktemp("refusing"))) as engine:
        yield engine


@pytest.fixture(scope="module")
def http() -> Iterator[Loopback]:
    with loopback_server() as server:
        yield server


async def test_the_limits_say_networked_runs_are_refused_here(refusing: CodeMode) -> None:
    network = execution_limits(refusing)["network"]
    assert network["offIsEnforced"] is False
    assert network["defaultForRuns"] == "off"
    assert "runs with the network are refused" in network["enforcement"]
    assert "CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true" in network["enforcement"]
    assert refusing.isolation()["network"].startswith("no network namespace here")


@pytest.mark.parametrize(("language", "runner"), [("python", "local"), ("javascript", "deno")])
async def test_a_run_that_asks_for_the_network_is_refused_naming_the_setting(
    refusing: CodeMode, language: str, runner: str
) -> None:
    for asked in (True, ["api.example.com"]):
        with pytest.raises(UnsupportedError, match="CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true") as refused:
            await refusing.execute("1", language, runner=runner, allow_networking=asked)
        assert "host's own network" in str(refused.value)


async def test_a_run_that_does_not_ask_gets_no_network(refusing: CodeMode, http: Loopback) -> None:
    code = f"try {{ await fetch({http.url!r}); console.log('reached'); }} catch (e) {{ console.log(e.name); }}"
    result = await refusing.execute(code, "javascript")
    assert result.success, result.error
    assert result.output == "NotCapable\n" and result.network is None
    assert http.connections == []
    assert (await refusing.execute(PURE)).network is None  # local: the default runner, without the network


async def test_allowed_unsandboxed_a_run_has_the_network_and_is_never_replayed(tmp_path: Path, http: Loopback) -> None:
    async with CodeMode(config(tmp_path, allow_unsandboxed_network=True, network_allow_private="127.0.0.1")) as engine:
        network = execution_limits(engine)["network"]
        assert network["defaultForRuns"] == "allowed" and network["enforcement"].startswith("UNSANDBOXED")
        code = f"const r = await fetch({http.url!r});\nconsole.log(r.status, Deno.env.get('HTTP_PROXY') !== undefined);"
        result = await engine.execute(code, "javascript")
        assert result.success, result.error
        assert result.output == "200 true\n"  # through the proxy, which the client honoured
        first = await engine.execute(PURE + "  # unsandboxed", allow_networking=True)
        again = await engine.execute(PURE + "  # unsandboxed", allow_networking=True)
        assert first.success and not again.cached  # the proxy is not its only way out: granted counts as used
