"""A runner added as one module: it shows everywhere a runner is shown, and runs, with no other file changed.

The module is written into a folder added to the ``mcp_code_mode.runners`` package's path, which is what
dropping a file into ``src/mcp_code_mode/runners/`` amounts to, without touching the source tree.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

import mcp_code_mode.runners as runners_package
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.runners import registry
from mcp_code_mode.server import build_server

from ..conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio

SCRATCH = '''
"""A runner for a test: CPython on the zygote, under another name."""

from mcp_code_mode.runners._zygote import ZygoteRunner
from mcp_code_mode.runners.base import Diagnosis, RunnerInfo, RunnerPlugin
from mcp_code_mode.sandbox import Profile

INFO = RunnerInfo(
    name="scratch",
    languages=("python",),
    stub_language="python",
    summary="CPython once more, added as one module",
    packages="environment",
    package_manager="uv",
    order=90,
)


def build(context):
    return ZygoteRunner(
        INFO, kind="cpython", sandbox=context.sandbox, pool_size=0, default_profile=Profile(network=True)
    )


def diagnose(settings):
    return [Diagnosis("ok", "scratch", "nothing to install")]


PLUGIN = RunnerPlugin(INFO, build, diagnose)
'''


@pytest.fixture(scope="module")
def scratch_runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    folder = tmp_path_factory.mktemp("more_runners")
    (folder / "scratch_runner.py").write_text(SCRATCH, encoding="utf-8")
    runners_package.__path__.append(str(folder))
    registry.plugins.cache_clear()
    try:
        yield
    finally:
        runners_package.__path__.remove(str(folder))
        registry.plugins.cache_clear()


@pytest.fixture(scope="module")
async def client(scratch_runner: None, tmp_path_factory: pytest.TempPathFactory) -> Any:
    config = make_config({"fixture": fixture_entry()}, workspace_dir=tmp_path_factory.mktemp("runs"))
    async with Client(build_server(CodeMode(config)), mode="legacy") as c:
        yield c


def test_the_registry_finds_it_after_the_built_in_runners(scratch_runner: None) -> None:
    assert registry.names() == ["local", "cpython", "monty", "pyodide", "deno", "scratch"]


async def test_it_is_listed_with_its_language_isolation_and_summary(client: Client) -> None:
    result = await client.call_tool("list_supported_languages", {})
    languages = {entry["language"]: entry for entry in result.structured_content["result"]}  # type: ignore[index]
    scratch = next(r for r in languages["python"]["runners"] if r["name"] == "scratch")
    assert scratch["summary"] == "CPython once more, added as one module"
    assert scratch["isolation"].startswith(("namespaces", "process"))
    assert scratch["default"] is False
    assert all(r["name"] != "scratch" for r in languages["javascript"]["runners"])


async def test_it_is_in_the_limits_and_the_execute_code_description(client: Client) -> None:
    limits = (await client.call_tool("get_execution_limits", {})).structured_content or {}
    assert limits["runners"]["scratch"]["languages"] == ["python"]
    tools = {t.name: t for t in (await client.list_tools()).tools}
    execute_code = tools["execute_code"]
    runner = execute_code.input_schema["properties"]["runner"]["description"]
    assert "scratch (CPython once more, added as one module)" in runner


async def test_it_validates_and_runs(client: Client) -> None:
    checked = await client.call_tool(
        "validate_code", {"language": "python", "code": "import os\n1", "runner": "scratch"}
    )
    assert checked.structured_content is not None and checked.structured_content["valid"] is True
    assert checked.structured_content["runner"] == "scratch"
    ran = await client.call_tool(
        "execute_code", {"language": "python", "runner": "scratch", "code": "import sys\nsys.version_info[0]"}
    )
    assert ran.structured_content is not None
    assert ran.structured_content["success"] is True, ran.structured_content
    assert ran.structured_content["runner"] == "scratch"
    assert ran.structured_content["returnValue"] == 3


async def test_the_local_runner_still_refuses_what_scratch_allows(client: Client) -> None:
    checked = await client.call_tool("validate_code", {"language": "python", "code": "import os\n1"})
    assert checked.structured_content is not None and checked.structured_content["valid"] is False


def test_a_name_taken_twice_stops_start_up(tmp_path: Path) -> None:
    (tmp_path / "local_again.py").write_text(SCRATCH.replace('name="scratch"', 'name="local"'), encoding="utf-8")
    runners_package.__path__.append(str(tmp_path))
    registry.plugins.cache_clear()
    try:
        with pytest.raises(Exception, match="two runners are named 'local'"):
            registry.plugins()
    finally:
        runners_package.__path__.remove(str(tmp_path))
        registry.plugins.cache_clear()
