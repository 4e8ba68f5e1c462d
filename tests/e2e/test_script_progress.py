"""A script's ``report_progress`` reaches the MCP client as progress, on every runner (issue 23, point 4).

One engine with every runner warm, behind a real MCP client (in process); the last test starts
``mcp-code-mode serve`` over stdio with a minimal environment. The host decides the pace (at most one report
every 100 ms per run, the newest wins, the last one before ``done`` is sent), never sends a decrease as
progress, and masks the message like any other text of the run.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import fixture_entry, make_config, write_config
from ..contract.conftest import PYODIDE_CACHE, available

pytestmark = pytest.mark.anyio

WAIT = 120
"""The longest one call here may take, in seconds (a first Pyodide snapshot takes a while)."""
SECRET = "prog-tok-5e8c1a9f3b7d2046"
"""An env value of the downstream server: a secret wherever it appears."""

Report = tuple[float, float | None, str | None]

THREE_STEPS = {
    "python": (
        "import time\n"
        "for step in (1, 2, 3):\n"
        "    report_progress(step, 3, f'step {step}')\n"
        "    time.sleep(0.15)\n"
        "'ok'\n"
    ),
    "javascript": (
        "for (const step of [1, 2, 3]) {\n"
        "  reportProgress(step, 3, `step ${step}`);\n"
        "  await new Promise((r) => setTimeout(r, 150));\n"
        "}\n"
        "export default 'ok';\n"
    ),
}


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    config = make_config(
        {"fixture": fixture_entry(PROGRESS_API_TOKEN=SECRET)},
        workspace_dir=tmp_path_factory.mktemp("progress-runs"),
        pool_size=1,
        cpython_pool_size=1,
        pyodide_pool_size=1,
        pyodide_cache_dir=PYODIDE_CACHE,
        progress_interval_ms=60_000,  # the elapsed-time report at the start only
        warmup_timeout=WAIT,
    )
    async with Client(build_server(CodeMode(config)), mode="legacy") as connected:
        yield connected


async def run(client: Client, code: str, runner: str, *, asks: bool = True) -> tuple[dict[str, object], list[Report]]:
    reports: list[Report] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    language = "javascript" if runner == "deno" else "python"
    arguments = {"language": language, "code": code, "runner": runner, "cache": "off"}
    with anyio.fail_after(WAIT):
        result = await client.call_tool("execute_code", arguments, progress_callback=on_progress if asks else None)
    assert result.structured_content is not None
    return result.structured_content, reports


def script_reports(reports: list[Report]) -> list[Report]:
    """The reports of the script (the engine's own say ``running: ...``, ``starting: ...`` or ``queued: ...``)."""
    return [r for r in reports if not (r[2] or "").startswith(("running: ", "starting: ", "queued: "))]


@pytest.mark.parametrize("runner", ["local", "cpython", "monty", "pyodide", "deno"])
async def test_three_reports_of_a_script_reach_the_client_in_order_with_total_and_message(
    client: Client, runner: str
) -> None:
    available(runner)
    code = THREE_STEPS["javascript" if runner == "deno" else "python"]
    result, reports = await run(client, code, runner)
    assert result["success"], result
    assert script_reports(reports) == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")], reports
    values = [value for value, _, _ in reports]
    assert values == sorted(values) and len(set(values)) == len(values), "progress must strictly increase"


@pytest.mark.parametrize("runner", ["cpython", "deno"])
async def test_a_flood_of_reports_ends_quickly_with_few_notifications_and_the_last_one_sent(
    client: Client, runner: str
) -> None:
    available(runner)
    if runner == "deno":
        code = "for (let i = 1; i <= 100000; i++) reportProgress(i, 100000, `item ${i}`);\nexport default 'ok';\n"
    else:
        code = "for i in range(1, 100001):\n    report_progress(i, 100000, f'item {i}')\n'ok'\n"
    started = time.perf_counter()
    result, reports = await run(client, code, runner)
    assert result["success"], result
    assert time.perf_counter() - started < 10
    mine = script_reports(reports)
    assert 1 <= len(mine) <= 50, len(mine)
    assert mine[-1] == (100000, 100000, "item 100000"), "the last report before done is sent"


async def test_a_decreasing_done_is_not_sent_as_progress(client: Client) -> None:
    code = "import time\nfor done in (5, 3, 6):\n    report_progress(done, 10, f'at {done}')\n    time.sleep(0.15)\n"
    result, reports = await run(client, code, "cpython")
    assert result["success"], result
    assert script_reports(reports) == [(5, 10, "at 5"), (6, 10, "at 6")]


async def test_a_secret_in_a_progress_message_reaches_the_client_masked(client: Client) -> None:
    result, reports = await run(client, f"report_progress(1, None, 'using {SECRET} now')\n", "cpython")
    assert result["success"], result
    assert script_reports(reports) == [(1, None, "using [SECRET] now")]
    assert SECRET not in repr(reports)


async def test_report_progress_without_a_progress_token_is_harmless(client: Client) -> None:
    result, reports = await run(client, THREE_STEPS["python"], "cpython", asks=False)
    assert result["success"] and result["returnValue"] == "ok", result
    assert reports == []


@pytest.mark.parametrize("runner", ["cpython", "monty", "deno"])
async def test_figures_that_are_not_finite_numbers_are_the_scripts_error(client: Client, runner: str) -> None:
    available(runner)
    code = "reportProgress('half');\n" if runner == "deno" else "report_progress(float('nan'))\n"
    result, reports = await run(client, code, runner)
    assert not result["success"]
    error = result["error"]
    assert isinstance(error, dict) and error["type"] in ("TypeError", "ValueError"), error
    assert script_reports(reports) == []


async def test_a_serve_process_over_stdio_sends_a_scripts_progress(tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    env = {name: os.environ[name] for name in ("HOME", "PATH", "USER", "SHELL", "TERM") if name in os.environ}
    env["CODE_MODE_CACHE_DIR"] = os.environ["CODE_MODE_CACHE_DIR"]
    env["CODE_MODE_PROGRESS_INTERVAL_MS"] = "60000"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_code_mode.cli", "serve", "--config", str(config)], env=env
    )
    async with Client(params, mode="legacy") as served:
        result, reports = await run(served, THREE_STEPS["python"], "cpython")
    assert result["success"], result
    assert script_reports(reports) == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")], reports


async def test_figures_below_the_elapsed_seconds_already_sent_keep_their_ratio_and_still_rise(client: Client) -> None:
    code = "import time\nreport_progress(0.001, 0.004, 'a')\ntime.sleep(0.15)\nreport_progress(0.002, 0.004, 'b')\n"
    result, reports = await run(client, code, "cpython")
    assert result["success"], result
    mine = script_reports(reports)
    assert [(m, v / (t or 1)) for v, t, m in mine] == [("a", 0.25), ("b", 0.5)], reports
    values = [value for value, _, _ in reports]
    assert values == sorted(values) and len(set(values)) == len(values), "progress must strictly increase"


@pytest.mark.parametrize(
    ("language", "code", "valid"),
    [
        ("python", "report_progress(1, 2, 'half')\nreport_progress(2)\n", True),
        ("typescript", "reportProgress(1, 2, 'half');\nreport_progress(2);\nreportProgress(3, null, null);\n", True),
    ],
)
async def test_validate_code_knows_report_progress(client: Client, language: str, code: str, valid: bool) -> None:
    if language == "typescript":
        available("deno")
    with anyio.fail_after(WAIT):
        result = await client.call_tool("validate_code", {"language": language, "code": code})
    assert result.structured_content is not None
    assert result.structured_content["valid"] is valid, result.structured_content["findings"]
