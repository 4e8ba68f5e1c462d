"""validate_code: planted mistakes are all reported at once, each with a line; nothing runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_code_mode.downstream.tools import ToolInfo
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.runners.local import SAFE_IMPORTS
from mcp_code_mode.server import build_server
from mcp_code_mode.stubs.index import StubIndex
from mcp_code_mode.validate import (
    VALIDATORS,
    Finding,
    check_python,
    code_size,
    oversize,
    validate_code,
    validate_python,
)

from .conftest import make_config

pytestmark = pytest.mark.anyio

SCHEMAS = Path(__file__).resolve().parent / "stubs" / "schemas"


def recorded(server: str) -> list[ToolInfo]:
    data = json.loads((SCHEMAS / f"{server}.json").read_text(encoding="utf-8"))
    return [ToolInfo(server=server, **tool) for tool in data]


INDEX = StubIndex.build([("filesystem", None), ("memory", None)], recorded("filesystem") + recorded("memory"))


def findings(code: str) -> list[Finding]:
    return validate_python(code, INDEX, SAFE_IMPORTS)


PLANTED = """\
import json
import os
from subprocess import run
text = filesystem.read_text_file(path="a.txt", head="10")
filesystem.read_txt_file(path="a.txt")
filesystem.write_file(path="b.txt")
filesystem.list_directory(path=".", recursive=True)
memory.create_entities(entities=[{"name": "x", "observations": ["y"]}])
github.create_issue(title="t")
call_tool("memory", "open_nodes", {"names": "x"})
call_tool("memory", "forget_everything", {})
filesystem.move_file("a", "b", "c")
"""


def test_every_planted_mistake_is_reported_at_once_with_its_line() -> None:
    found = findings(PLANTED)
    by_line: dict[int, list[str]] = {}
    for f in found:
        by_line.setdefault(f.line, []).append(f"{f.kind}: {f.message}")
    assert 1 not in by_line, "json is allowed"
    assert by_line[2] == [
        "import: import of 'os' is not allowed for this runner (allowed: " + by_line[2][0].split("(allowed: ")[1]
    ]
    assert by_line[3][0].startswith("import: import of 'subprocess' is not allowed")
    assert by_line[4] == ["arguments: filesystem.read_text_file(): head must be number, got str '10'"]
    assert by_line[5] == [
        "unknown-tool: server 'filesystem' has no tool 'read_txt_file' (did you mean read_text_file or read_file?)"
    ]
    assert by_line[6] == ["arguments: filesystem.write_file() is missing required argument(s): content"]
    assert by_line[7] == ["arguments: filesystem.list_directory() has no parameter 'recursive'"]
    assert by_line[8] == ["arguments: memory.create_entities(): entities[0] is missing the required key 'entityType'"]
    assert by_line[9][0].startswith("unknown-server: 'github' is not a connected server or a defined name")
    assert by_line[10] == [
        "arguments: call_tool('memory', 'open_nodes'): arguments['names'] must be array, got str 'x'"
    ]
    assert by_line[11] == ["unknown-tool: call_tool: server 'memory' has no tool 'forget_everything'"]
    assert by_line[12] == ["arguments: filesystem.move_file() takes 2 positional arguments, got 3"]
    assert all(f.column >= 1 for f in found)


def test_a_syntax_error_gives_its_line_and_column() -> None:
    [finding] = findings("x = 1\nprint(x\ny = 2\n")
    assert (finding.kind, finding.line) == ("syntax", 2)
    assert finding.column >= 1 and "never closed" in finding.message


def test_correct_scripts_have_no_findings() -> None:
    code = """
import json
from collections import Counter
import urllib.parse

def words(path: str) -> list[str]:
    return filesystem.read_text_file(path=path, head=10)["content"].split()

counts = Counter(w for p in ["a.txt", "b.txt"] for w in words(p))
graph = memory.read_graph()
memory.create_entities(entities=[{"name": n, "entityType": "word", "observations": []} for n in counts])
args = {"path": "x"}
filesystem.read_file(**args)
try:
    call_tool("filesystem", "list_directory", {"path": "."})
except ToolError as exc:
    print(exc)
final_answer(json.dumps(dict(counts)))
"""
    assert findings(code) == []


def test_a_local_name_that_shadows_nothing_is_not_taken_for_a_server() -> None:
    code = "class Repo:\n    name = 'x'\nrepo = Repo()\nprint(repo.name, Repo.name)\nfilesystem = None\n"
    assert findings(code) == []


def test_languages_without_a_checker_say_so() -> None:
    answer = validate_code("typescript", "const x: number = 'a';", INDEX, SAFE_IMPORTS)
    assert answer["supported"] is False and answer["valid"] is None and "not support" in answer["message"]
    ok = validate_code("py", "print(1)", INDEX, SAFE_IMPORTS)
    assert ok == {"language": "python", "supported": True, "valid": True, "findings": []}


async def test_validation_runs_nothing_and_calls_no_tool(engine: CodeMode, shared_dirs: dict[str, Path]) -> None:
    canary = shared_dirs["files"] / "validate-canary.txt"
    before = {name: s.calls for name, s in engine.pool.servers.items()}
    code = f"filesystem.write_file(path={canary.name!r}, content='x')\nfixture.crash()\nopen('x', 'w')\n"
    answer = validate_code("python", code, engine.index, SAFE_IMPORTS)
    assert answer["valid"] is True
    assert not canary.exists()
    assert {name: s.calls for name, s in engine.pool.servers.items()} == before
    assert engine.pool.servers["fixture"].state == "ready"


# ----- size cap, deep nesting, and the worker thread --------------------------------------------


def test_a_script_over_the_size_cap_gets_one_size_finding_and_one_at_the_cap_does_not() -> None:
    at_cap = "x = 1\n" * (2048 // 6) + "#" * (2048 % 6)
    assert code_size(at_cap) == 2048
    assert oversize("python", at_cap, 2048) is None
    answer = oversize("python", at_cap + "#", 2048)
    assert answer is not None and answer["valid"] is False
    [finding] = answer["findings"]
    assert finding["kind"] == "size"
    assert finding["message"].startswith("the script is 2,049 bytes; validate_code checks at most 2,048")
    assert "CODE_MODE_MAX_CODE_BYTES" in finding["message"]


def test_the_size_cap_counts_utf8_bytes_not_characters() -> None:
    code = "s = '" + "é" * 600 + "'\n"  # 607 characters, 1207 bytes
    assert oversize("python", code, 1024) is not None
    assert oversize("python", "s = '\ud800'\n", 1024) is None  # a lone surrogate (JSON can carry one) is no crash


@pytest.mark.parametrize(
    ("code", "kind", "words"),
    [
        pytest.param("(" * 100_000, "syntax", "too many nested parentheses", id="parentheses"),
        pytest.param("[" * 100_000, "syntax", "too many nested parentheses", id="brackets"),
        pytest.param("-" * 100_000 + "1", "nesting", "too deeply to parse", id="unary-minus"),
        pytest.param("not " * 100_000 + "a", "nesting", "too deeply to parse", id="not"),
        pytest.param("a+" * 100_000 + "a", "nesting", "too deeply to parse", id="binary-operators"),
        pytest.param("x" + ".a" * 100_000, "nesting", "too deeply to parse", id="attributes"),
        pytest.param("a" + "[0]" * 100_000, "nesting", "too deeply to parse", id="subscripts"),
        pytest.param("a+" * 700 + "a", "nesting", "too deeply to check", id="parses-but-too-deep-to-walk"),
    ],
)
async def test_deep_nesting_is_one_clear_finding_not_a_recursion_error(code: str, kind: str, words: str) -> None:
    with anyio.fail_after(30):
        answer = await check_python(code, INDEX, SAFE_IMPORTS, max_bytes=1_000_000)
    assert answer["valid"] is False
    [finding] = answer["findings"]
    assert finding["kind"] == kind and words in finding["message"], finding


async def test_an_oversize_script_through_the_tool_is_refused_with_a_size_finding() -> None:
    engine = CodeMode(make_config({}, pool_size=0, cpython_pool_size=0, warmup_timeout=0, max_code_bytes=4096))
    with anyio.fail_after(60):
        async with Client(build_server(engine), mode="legacy") as client:
            big = await client.call_tool("validate_code", {"language": "python", "code": "x = 1\n" * 1000})
            small = await client.call_tool("validate_code", {"language": "python", "code": "x = 1\n" * 10})
            deep = await client.call_tool("validate_code", {"language": "python", "code": "-" * 4000 + "1"})
    assert big.structured_content is not None and small.structured_content is not None
    assert big.structured_content["valid"] is False
    assert [f["kind"] for f in big.structured_content["findings"]] == ["size"]
    assert small.structured_content["valid"] is True
    assert deep.structured_content is not None
    assert [f["kind"] for f in deep.structured_content["findings"]] == ["nesting"]


async def test_while_a_python_check_runs_another_request_on_the_same_server_is_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started, release = threading.Event(), threading.Event()
    threads: list[int] = []
    finished: list[str] = []

    def slow_validator(code: str, index: StubIndex, allowed: Sequence[str] | None) -> list[Finding]:
        threads.append(threading.get_ident())
        started.set()
        release.wait(10)  # on the event loop this would block the other request until the timeout
        return validate_python(code, index, allowed)

    monkeypatch.setitem(VALIDATORS, "python", slow_validator)
    engine = CodeMode(make_config({}, pool_size=0, cpython_pool_size=0, warmup_timeout=0))
    with anyio.fail_after(60):
        async with Client(build_server(engine), mode="legacy") as client:

            async def validate() -> None:
                answer = await client.call_tool("validate_code", {"language": "python", "code": "print(1)"})
                assert answer.structured_content is not None and answer.structured_content["valid"] is True
                finished.append("validate_code")

            async with anyio.create_task_group() as tg:
                tg.start_soon(validate)
                await anyio.to_thread.run_sync(started.wait, 10)
                languages = await client.call_tool("list_supported_languages", {})
                assert not languages.is_error
                finished.append("list_supported_languages")
                release.set()
    assert finished == ["list_supported_languages", "validate_code"]
    assert threads and threads[0] != threading.get_ident(), "the check ran on the event loop's thread"
