"""validate_code: planted mistakes are all reported at once, each with a line; nothing runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_code_mode.downstream.pool import ToolInfo
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.runners.local import SAFE_IMPORTS
from mcp_code_mode.stubs.index import StubIndex
from mcp_code_mode.validate import Finding, validate_code, validate_python

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


@pytest.mark.anyio
async def test_validation_runs_nothing_and_calls_no_tool(engine: CodeMode, shared_dirs: dict[str, Path]) -> None:
    canary = shared_dirs["files"] / "validate-canary.txt"
    before = {name: s.calls for name, s in engine.pool.servers.items()}
    code = f"filesystem.write_file(path={canary.name!r}, content='x')\nfixture.crash()\nopen('x', 'w')\n"
    answer = validate_code("python", code, engine.index, SAFE_IMPORTS)
    assert answer["valid"] is True
    assert not canary.exists()
    assert {name: s.calls for name, s in engine.pool.servers.items()} == before
    assert engine.pool.servers["fixture"].state == "ready"
