"""The cache inside execute: replay rules per mode, the replay trap, invalidation, stale search results."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import UnsupportedError

from ..conftest import filesystem_entry, fixture_entry, make_config

pytestmark = pytest.mark.anyio

PURE = "total = sum(i * i for i in range(100))\nprint('total', total)\ntotal"


@pytest.fixture(scope="module")
async def cm(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:
    base = tmp_path_factory.mktemp("cache-engine")
    (base / "files").mkdir()
    config = make_config(
        {"filesystem": filesystem_entry(base / "files"), "fixture": fixture_entry()},
        workspace_dir=base / "runs",
        cache_dir=base / "cache",
    )
    async with CodeMode(config) as engine:
        yield engine


def calls_to(cm: CodeMode, server: str) -> int:
    return cm.pool.servers[server].calls


async def test_auto_replays_a_side_effect_free_run_from_the_cache(cm: CodeMode) -> None:
    code = PURE + "  # auto replay"
    first = await cm.execute(code, allow_networking=False)
    second = await cm.execute(code, allow_networking=False)
    assert first.success and not first.cached
    assert second.cached and second.success
    assert (second.output, second.return_value, second.hash) == ("total 328350\n", 328350, first.hash)
    stored = cm.scripts.get(first.hash, tenant="default")
    assert stored is not None and stored.hit_count == 1 and stored.run_count == 1


async def test_auto_runs_again_a_run_that_used_the_network_even_when_refused(cm: CodeMode) -> None:
    code = (
        "import urllib.request\ntry:\n    urllib.request.urlopen('http://127.0.0.1:9/', timeout=5)\n"
        "except Exception as e:\n    print(type(e).__name__)\n" + PURE + "  # networking used"
    )
    first = await cm.execute(code, allow_networking=True, runner="cpython")
    assert first.success and first.network is not None and len(first.network.refused) == 1
    again = await cm.execute(code, allow_networking=True, runner="cpython")
    assert not again.cached and again.network is not None and again.network.refused
    stored = cm.scripts.get(first.hash, tenant="default")
    assert stored is not None and stored.network and not stored.side_effect_free
    assert stored.network_use is not None and stored.network_use["refused"][0].startswith("127.0.0.1:9: ")
    offline = await cm.execute(code, allow_networking=False, runner="cpython")
    assert offline.success and not offline.cached and offline.hash != again.hash  # another policy, another key


async def test_a_run_granted_the_network_that_connected_nowhere_is_replayed(cm: CodeMode) -> None:
    """The proxy is the only way out of the sandbox, so "no connection" is what the host saw, not a guess."""
    for runner in ("local", "cpython"):
        code = PURE + f"  # {runner}, networking allowed, unused"
        first = await cm.execute(code, allow_networking=True, runner=runner)
        again = await cm.execute(code, allow_networking=True, runner=runner)
        assert first.success and not first.cached and again.cached, runner
        assert first.network is not None and not first.network.used
        stored = cm.scripts.get(first.hash, tenant="default")
        assert stored is not None and not stored.network and stored.side_effect_free


async def test_networking_allowed_and_not_allowed_never_replay_each_other(cm: CodeMode) -> None:
    code = PURE + "  # network policy in the key"
    online = await cm.execute(code, allow_networking=True, cache="reuse")
    offline = await cm.execute(code, allow_networking=False, cache="reuse")
    assert not online.cached and not offline.cached and online.hash != offline.hash
    assert (await cm.execute(code, allow_networking=True, cache="reuse")).hash == online.hash
    assert (await cm.execute(code, allow_networking=False, cache="reuse")).hash == offline.hash


async def test_a_run_of_one_runner_is_never_replayed_for_another(cm: CodeMode) -> None:
    code = PURE + "  # runner in the key"
    local = await cm.execute(code, allow_networking=False, cache="reuse")
    cpython = await cm.execute(code, allow_networking=False, runner="cpython", cache="reuse")
    assert not local.cached and not cpython.cached and cpython.runner == "cpython"
    assert local.hash != cpython.hash


def separated(separator: str) -> str:
    """A script printing how many lines its string has: 2 with a newline, 1 with any other separator."""
    return f'parts = """a{separator}b""".split("\\n")\nprint(len(parts))'


@pytest.mark.parametrize("separator", ["\x1c", "\u2028", "\x0c"])
async def test_a_program_differing_only_in_a_non_newline_separator_runs_instead_of_replaying(
    cm: CodeMode, separator: str
) -> None:
    with_newline = await cm.execute(separated("\n") + f"  # {ord(separator)}", allow_networking=False)
    assert with_newline.success and with_newline.output == "2\n"
    other = await cm.execute(separated(separator) + f"  # {ord(separator)}", allow_networking=False)
    assert other.success and not other.cached and other.output == "1\n"


async def test_trailing_spaces_inside_a_triple_quoted_string_run_instead_of_replaying(cm: CodeMode) -> None:
    plain = await cm.execute('print(len("""a\nb"""))  # spaces', allow_networking=False)
    spaced = await cm.execute('print(len("""a   \nb"""))  # spaces', allow_networking=False)
    assert (plain.output, spaced.output) == ("3\n", "6\n")
    assert not spaced.cached


async def test_only_trailing_newlines_are_ignored_by_the_key(cm: CodeMode) -> None:
    code = PURE + "  # trailing newlines"
    first = await cm.execute(code, allow_networking=False)
    again = await cm.execute(code + "\n\n", allow_networking=False)
    assert again.cached and again.hash == first.hash
    indented = await cm.execute("    " + code, allow_networking=False)
    assert not indented.cached and not indented.success  # an indented program is an IndentationError


async def test_a_script_that_calls_no_tool_runs_again_when_the_stubs_it_sees_change(cm: CodeMode) -> None:
    code = "print(hasattr(fixture, 'echo'))  # stubs"
    first = await cm.execute(code, allow_networking=False)
    assert first.success and first.tool_calls == 0 and first.output == "True\n"
    assert (await cm.execute(code, allow_networking=False)).cached
    server = cm.pool.servers["fixture"]
    original = list(server.tools)
    server.tools = [t for t in original if t.name != "echo"]
    cm.pool._changed()
    try:
        without_echo = await cm.execute(code, allow_networking=False)
        assert not without_echo.cached and without_echo.output == "False\n"
    finally:
        server.tools = original
        cm.pool._changed()
    assert (await cm.execute(code, allow_networking=False)).cached


async def test_a_script_that_writes_through_a_tool_runs_again_so_the_write_happens_again(cm: CodeMode) -> None:
    code = """
try:
    n = int(filesystem.read_text_file(path="counter.txt")["content"])
except ToolError:
    n = 0
filesystem.write_file(path="counter.txt", content=str(n + 1))
n + 1
"""
    first = await cm.execute(code, allow_networking=False)
    second = await cm.execute(code, allow_networking=False)
    assert (first.return_value, second.return_value) == (1, 2)
    assert not first.cached and not second.cached
    assert first.hash == second.hash


@pytest.mark.parametrize("runner", ["local", "cpython"])
async def test_files_written_in_the_workspace_prevent_an_auto_replay_whatever_the_runner(
    cm: CodeMode, runner: str
) -> None:
    code = "with open('out.txt', 'w') as f:\n    f.write('x')\nprint('wrote')"
    first = await cm.execute(code, allow_networking=False, runner=runner)
    assert first.success and [f.path for f in first.files] == ["out.txt"]
    stored = cm.scripts.get(first.hash, tenant="default")
    assert stored is not None and not stored.side_effect_free
    assert not (await cm.execute(code, allow_networking=False, runner=runner)).cached


@pytest.mark.parametrize("runner", ["local", "cpython"])
async def test_a_run_with_a_tool_call_is_not_stored_as_replayable_whatever_the_runner(
    cm: CodeMode, runner: str
) -> None:
    code = "fixture.echo(text='side effect')  # tool call"
    first = await cm.execute(code, allow_networking=False, runner=runner)
    assert first.success and first.tool_calls == 1
    stored = cm.scripts.get(first.hash, tenant="default")
    assert stored is not None and not stored.side_effect_free
    calls = calls_to(cm, "fixture")
    again = await cm.execute(code, allow_networking=False, runner=runner)
    assert not again.cached and calls_to(cm, "fixture") == calls + 1


async def test_reuse_replays_a_run_with_tool_calls_without_calling_the_tool(cm: CodeMode) -> None:
    code = "fixture.now()['result']  # reuse"
    first = await cm.execute(code, cache="reuse")
    calls = calls_to(cm, "fixture")
    second = await cm.execute(code, cache="reuse")
    assert second.cached and second.return_value == first.return_value
    assert calls_to(cm, "fixture") == calls


async def test_refresh_runs_again_and_overwrites_the_stored_result(cm: CodeMode) -> None:
    code = "fixture.now()['result']  # refresh"
    first = await cm.execute(code)
    refreshed = await cm.execute(code, cache="refresh")
    assert not refreshed.cached and refreshed.return_value != first.return_value
    replay = await cm.execute(code, cache="reuse")
    assert replay.cached and replay.return_value == refreshed.return_value


async def test_off_neither_reads_nor_writes(cm: CodeMode) -> None:
    code = PURE + "  # off"
    before = cm.scripts.stats(tenant="default")["stored"]
    result = await cm.execute(code, cache="off", allow_networking=False)
    assert result.success and len(result.hash) == 64
    assert cm.scripts.stats(tenant="default")["stored"] == before
    assert cm.scripts.get(result.hash, tenant="default") is None
    await cm.execute(code, allow_networking=False)
    assert not (await cm.execute(code, cache="off", allow_networking=False)).cached


async def test_failed_runs_are_not_stored_and_unknown_modes_are_refused(cm: CodeMode) -> None:
    result = await cm.execute("1/0", allow_networking=False)
    assert not result.success and cm.scripts.get(result.hash, tenant="default") is None
    with pytest.raises(UnsupportedError, match="cache must be one of"):
        await cm.execute("1", cache="sometimes")


async def test_a_description_is_derived_from_the_code_when_none_is_given(cm: CodeMode) -> None:
    code = '"""Add two numbers with the fixture."""\nfixture.add(a=1, b=2)'
    result = await cm.execute(code)
    stored = cm.scripts.get(result.hash, tenant="default")
    assert stored is not None
    assert stored.description == "Add two numbers with the fixture. (calls fixture.add)"
    given = await cm.execute(code + "\n# v2", description="add numbers")
    assert (s := cm.scripts.get(given.hash, tenant="default")) is not None and s.description == "add numbers"


async def test_a_changed_tool_schema_ends_exact_hits_and_marks_search_results_stale(cm: CodeMode) -> None:
    code = "fixture.echo(text='stale check')"
    first = await cm.execute(code, description="echo a stale check")
    assert (await cm.execute(code, cache="reuse")).cached
    [hit] = [r for r in cm.scripts.search("echo stale check", tenant="default") if r.script.hash == first.hash]
    assert hit.stale is False

    server = cm.pool.servers["fixture"]
    original = list(server.tools)
    server.tools = [
        dataclasses.replace(t, input_schema={**t.input_schema, "required": ["text", "volume"]})
        if t.name == "echo"
        else t
        for t in original
    ]
    cm.pool._changed()  # what a tools/list_changed refresh does
    try:
        rerun = await cm.execute(code, cache="reuse")
        assert not rerun.cached and rerun.hash != first.hash
        [old] = [
            r for r in cm.scripts.search("echo stale check", limit=10, tenant="default") if r.script.hash == first.hash
        ]
        assert old.stale is True
    finally:
        server.tools = original
        cm.pool._changed()


async def test_a_replay_is_counted_in_the_hit_rate(cm: CodeMode) -> None:
    before = cm.scripts.stats(tenant="default")
    code = PURE + "  # hit rate"
    await cm.execute(code, allow_networking=False)
    await cm.execute(code, allow_networking=False)
    after = cm.scripts.stats(tenant="default")
    assert after["lookups"] == before["lookups"] + 2
    assert after["hits"] == before["hits"] + 1
    assert after["perLanguage"]["python"]["scripts"] >= 1


async def test_a_broken_cache_file_never_fails_a_run(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / "scripts.db").write_bytes(b"garbage" * 1000)
    config = make_config({}, workspace_dir=tmp_path / "runs", cache_dir=cache_dir)
    async with CodeMode(config) as engine:
        with anyio.fail_after(60):
            result = await engine.execute("print('still runs')", allow_networking=False)
        assert result.success and result.output == "still runs\n"
        stats = engine.scripts.stats(tenant="default")
        assert stats["enabled"] and "corrupt" in stats["problems"][0]
    assert [p.name.startswith("scripts.db.corrupt-") for p in cache_dir.iterdir()].count(True) == 1
