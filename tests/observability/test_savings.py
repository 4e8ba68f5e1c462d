"""The savings meter: exact o200k counts up to a bound, estimated beyond; and real runs that carry them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import mcp_types as types
import pytest

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import UnsupportedError
from mcp_code_mode.observability.savings import EXACT_CHARS, SavingsMeter, result_text
from mcp_code_mode.tokens import count_tokens

from ..conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio


def test_results_are_counted_exactly_within_the_bound_and_estimated_beyond() -> None:
    meter = SavingsMeter()
    assert meter.empty and meter.count() == 0
    text = "the quick brown fox jumps over the lazy dog. " * 100
    meter.add_text(text)
    assert meter.count() == count_tokens(text)
    big = SavingsMeter()
    word = "lorem ipsum dolor sit amet "
    big.add_text(word * (2 * EXACT_CHARS // len(word)))
    big.add_text(word * 10)  # wholly beyond the bound: estimated at the kept slice's rate
    assert big.kept_chars == EXACT_CHARS
    exact = count_tokens(word * (2 * EXACT_CHARS // len(word) + 10))
    assert abs(big.count() - exact) / exact < 0.02


def test_a_result_counts_as_its_text_blocks_else_its_structured_content() -> None:
    text = types.CallToolResult(
        content=[types.TextContent(type="text", text="a"), types.TextContent(type="text", text="b")]
    )
    assert result_text(text) == "a\nb"
    structured = types.CallToolResult(content=[], structured_content={"x": 1})
    assert result_text(structured) == '{"x":1}'


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[CodeMode]:
    async with CodeMode(make_config({"fixture": fixture_entry()}, pool_size=1, cpython_pool_size=0)) as cm:
        yield cm


async def test_a_run_carries_its_round_trips_and_the_tokens_that_stayed_in_the_sandbox(engine: CodeMode) -> None:
    code = "for i in range(5):\n    fixture.echo(text='hello world number ' + str(i))\nfixture.fail()\n"
    before = engine.cache_stats()["savings"]
    with anyio.fail_after(60):
        result = await engine.execute(code, "python", runner="local", cache="off")
    assert not result.success and result.error is not None and result.error.type == "ToolError"
    expected = sum(count_tokens(f"hello world number {i}") for i in range(5)) + count_tokens(
        "Error executing tool fail: deliberate failure"
    )
    assert result.savings.round_trips == 6 == result.tool_calls
    assert result.savings.tokens == expected
    wire = result.model_dump(mode="json")
    assert wire["savings"] == {"roundTrips": 6, "tokens": expected}
    after = engine.cache_stats()["savings"]
    assert after["roundTrips"] - before["roundTrips"] == 6
    assert after["tokens"] - before["tokens"] == expected


async def test_a_replay_saves_nothing_more_and_a_refused_call_is_no_round_trip(engine: CodeMode) -> None:
    code = "fixture.add(a=1, b=2)\ncall_tool('fixture', 'nope', {})\n"
    with anyio.fail_after(60):
        first = await engine.execute(code, "python", runner="local", cache="off")
    assert first.savings.round_trips == 1
    metrics = engine.metrics.render()
    assert 'codemode_tool_calls_total{server="fixture",decision="refused",ok="false"}' in metrics
    with pytest.raises(UnsupportedError):
        await engine.execute("1", "cobol")
    assert 'codemode_run_errors_total{type="UnsupportedError",stage="refused"} 1' in engine.metrics.render()
