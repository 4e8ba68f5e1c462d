"""Skills over MCP: saved from code or from a cached script, called from every runner of their language, marked
stale when a tool they call changes its schema, exported, deleted and imported again."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mcp_code_mode.cli import main
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import CACHE_DIR, fixture_entry, make_config, write_config

pytestmark = pytest.mark.anyio

PLUS_TWICE = (
    "def plus_twice(a: int, b: int = 1) -> int:\n"
    '    """Add a and b with the fixture, doubled."""\n'
    "    return fixture.add(a=a, b=b)['result'] * 2\n"
)
ADD_TS = (
    "export default async function ({ a, b }: { a: number; b: number }) {\n"
    "  return (await fixture.add({ a, b })).result;\n"
    "}\n"
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("skills")


@pytest.fixture(scope="module")
async def engine(base: Path) -> AsyncIterator[CodeMode]:
    config = make_config(
        {"fixture": fixture_entry(FIXTURE_RETYPE="1")},
        workspace_dir=base / "runs",
        cache_dir=base / "cache",
        pool_size=1,
        pyodide_pool_size=1,
        pyodide_cache_dir=CACHE_DIR / "pyodide",  # the suite's snapshot, shared with the other modules
    )
    yield CodeMode(config)


@pytest.fixture(scope="module")
async def client(engine: CodeMode) -> AsyncIterator[Client]:
    async with Client(build_server(engine), mode="legacy") as c:
        yield c


@pytest.fixture(scope="module")
async def saved(client: Client) -> dict[str, dict[str, Any]]:
    """The two skills most tests call, saved once through the client: what ``save_skill`` answered."""
    return {
        "plus_twice": await call(
            client, "save_skill", name="plus_twice", description="Add a and b, doubled.", code=PLUS_TWICE
        ),
        "add_ts": await call(
            client, "save_skill", name="add_ts", description="Add two numbers.", code=ADD_TS, language="ts"
        ),
    }


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    with anyio.fail_after(300):
        result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return "\n".join(getattr(b, "text", "") for b in result.content)


async def execute(client: Client, **arguments: Any) -> dict[str, Any]:
    """``execute_code``'s structured result, whether the run succeeded or not."""
    with anyio.fail_after(300):
        result = await client.call_tool("execute_code", {"cache": "off", **arguments})
    assert result.structured_content is not None, result.content
    return result.structured_content


async def run(client: Client, code: str, **arguments: Any) -> dict[str, Any]:
    return await execute(client, language="python", code=code, **arguments)


async def test_a_python_function_skill_gets_its_parameters_from_its_signature(
    saved: dict[str, dict[str, Any]],
) -> None:
    plus_twice = saved["plus_twice"]
    assert plus_twice["parameters"] == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 1}},
        "required": ["a"],
        "description": "Add a and b with the fixture, doubled.",
    }
    assert plus_twice["tools"] == ["fixture.add"]
    assert plus_twice["version"] == 1 and plus_twice["kind"] == "skill"
    assert plus_twice["call"] == "skills.plus_twice(...)" and plus_twice["author"]  # the client that saved it


@pytest.mark.parametrize("runner", ["cpython", "local", "pyodide"])
async def test_a_python_skill_runs_in_the_calling_run_and_its_tool_calls_are_audited(
    client: Client, engine: CodeMode, runner: str, saved: dict[str, dict[str, Any]]
) -> None:
    result = await run(client, "print(skills.plus_twice(2, b=3))\nskills.plus_twice(a=1)", runner=runner)
    assert result["success"], result["error"]
    assert result["output"] == "10\n" and result["returnValue"] == 4
    assert [(c["server"], c["tool"]) for c in result["calls"]] == [("fixture", "add"), ("fixture", "add")]
    assert engine.audit is not None
    logged = engine.audit.query(run=result["hash"], tool="fixture.add", tenant="default")
    assert len(logged) == 2, logged


@pytest.mark.parametrize("runner", ["cpython", "local"])
async def test_a_skill_call_is_checked_against_its_parameters_naming_the_parameter(
    client: Client, runner: str, saved: dict[str, dict[str, Any]]
) -> None:
    wrong = await run(client, "skills.plus_twice(a='x')", runner=runner)
    assert not wrong["success"] and "parameter 'a' must be integer, not str" in wrong["error"]["message"]
    missing = await run(client, "skills.plus_twice(b=2)", runner=runner)
    assert "missing the required parameter 'a'" in missing["error"]["message"]
    unknown = await run(client, "skills.plus_twice(a=1, c=2)", runner=runner)
    assert "has no parameter 'c'" in unknown["error"]["message"]
    nothing = await run(client, "skills.no_such_skill()", runner=runner)
    assert "no_such_skill" in nothing["error"]["message"] and "plus_twice" in nothing["error"]["message"]


async def test_validate_code_checks_a_python_skill_call_against_its_parameters(
    client: Client, saved: dict[str, dict[str, Any]]
) -> None:
    checked = await call(client, "validate_code", language="python", code="x = 1\nskills.plus_twice(c=1)")
    messages = [(f["line"], f["kind"], f["message"]) for f in checked["findings"]]
    assert (2, "arguments", "skills.plus_twice has no parameter 'c' (parameters: a, b)") in messages
    assert (2, "arguments", "skills.plus_twice needs the parameter 'a'") in messages
    unknown = await call(client, "validate_code", language="python", code="skills.nope()")
    assert [f["kind"] for f in unknown["findings"]] == ["unknown-skill"]


@pytest.mark.parametrize("runner", ["cpython", "local"])
async def test_an_error_inside_a_skill_is_reported_at_the_script_line_that_called_it(
    client: Client, runner: str
) -> None:
    code = "def fails(n: int) -> float:\n    half = n / 2\n    return half / 0\n"
    await call(client, "save_skill", name=f"fails_{runner}", description="Always fails.", code=code)
    result = await run(client, f"a = 1\nb = 2\nskills.fails_{runner}(n=a)", runner=runner)
    assert not result["success"] and result["error"]["type"] == "ZeroDivisionError"
    assert result["error"]["line"] == 3, result["error"]


async def test_a_skill_has_the_calling_runs_restrictions_and_monty_refuses_skills(
    client: Client, engine: CodeMode
) -> None:
    code = "import os\n\ndef cwd() -> str:\n    return os.getcwd()\n"
    await call(client, "save_skill", name="cwd", description="The working directory.", code=code)
    assert (await run(client, "skills.cwd()", runner="cpython"))["success"]
    confined = await run(client, "skills.cwd()", runner="local")  # evaluated by local's interpreter
    assert not confined["success"] and "Import of os is not allowed" in confined["error"]["message"]
    if "monty" in engine.runners:
        refused_run = await run(client, "skills.cwd()", runner="monty")
        assert "the monty runner cannot call skills" in refused_run["error"]["message"]


async def test_a_cached_script_that_succeeded_becomes_a_skill_and_a_failed_one_is_refused(client: Client) -> None:
    proven = await call(
        client, "execute_code", language="python", code="total = fixture.add(a=20, b=22)['result']\ntotal"
    )
    assert proven["success"], proven["error"]
    answer = await call(
        client, "save_skill", name="answer", description="The answer, from the fixture.", fromHash=proven["hash"]
    )
    assert answer["tools"] == ["fixture.add"] and answer["language"] == "python"
    detail = await call(client, "get_skill", name="answer")
    assert detail["fromHash"] == proven["hash"] and "fixture.add(a=20, b=22)" in detail["code"]
    assert (await run(client, "skills.answer()"))["returnValue"] == 42
    failed = await execute(client, language="python", code="1 / 0")
    assert not failed["success"]
    message = await refused(client, "save_skill", name="broken", description="x", fromHash=failed["hash"])
    assert "only runs that succeeded are kept" in message


async def test_a_script_body_with_a_parameters_schema_sees_them_as_variables(client: Client) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    code = "doubled = fixture.add(a=n, b=n)['result']\ndoubled"
    await call(client, "save_skill", name="double", description="n + n.", code=code, parameters=schema)
    result = await run(client, "[skills.double(n=4), skills.double(5)]", runner="local")
    assert result["returnValue"] == [8, 10], result


async def test_invalid_code_and_names_are_refused_on_save(client: Client) -> None:
    assert "identifier" in await refused(client, "save_skill", name="2bad", description="x", code="1")
    message = await refused(
        client,
        "save_skill",
        name="bad_tool",
        description="x",
        code="def bad_tool() -> int:\n    return fixture.nope()\n",
    )
    assert "does not validate" in message and "nope" in message
    assert "does not parse" in await refused(client, "save_skill", name="bad_syntax", description="x", code="def (:")
    message = await refused(
        client, "save_skill", name="bad_schema", description="x", code="n", parameters={"type": "array"}
    )
    assert '"type" must be "object"' in message


async def test_a_typescript_skill_is_called_from_javascript_and_typescript_and_typed_in_validate(
    client: Client, saved: dict[str, dict[str, Any]]
) -> None:
    assert saved["add_ts"]["parameters"]["required"] == ["a", "b"]
    assert saved["add_ts"]["call"] == "await skills.add_ts({...})"
    for language in ("javascript", "typescript"):
        result = await call(
            client, "execute_code", language=language, code="export default await skills.add_ts({ a: 1, b: 2 });"
        )
        assert result["success"] and result["returnValue"] == 3, result
    script = "const r = await fixture.add({ a: 40, b: 2 });\nexport default r.result;"
    proven = await execute(client, language="javascript", code=script, cache="auto")
    assert proven["success"], proven["error"]
    await call(client, "save_skill", name="answer_js", description="The answer.", fromHash=proven["hash"])
    answered = await execute(client, language="typescript", code="export default await skills.answer_js();")
    assert answered["returnValue"] == 42, answered
    wrong = await execute(client, language="javascript", code="await skills.add_ts({ a: 'x', b: 1 });")
    assert "parameter 'a' must be number" in wrong["error"]["message"]
    checked = await call(client, "validate_code", language="typescript", code="await skills.add_ts({ a: 1 });")
    assert not checked["valid"] and "b: number" in checked["findings"][0]["message"]
    stubs = await call(client, "get_tool_stubs", language="typescript")
    assert "add_ts(args: { a: number; b: number }): Promise<any>;" in stubs["result"]
    python_stubs = await call(client, "get_tool_stubs", language="python")
    assert "def plus_twice(a: int, b: int = 1) -> Any:" in python_stubs["result"]
    assert "add_ts" not in python_stubs["result"]  # a JS/TS skill is not one of Python's
    one = await call(client, "get_tool_stubs", names=["skills.plus_twice", "fixture.add"])
    assert "def plus_twice(a: int, b: int = 1)" in one["result"] and "def add(" in one["result"]
    assert "def double(" not in one["result"]
    assert "no skill add_ts for python" in await refused(client, "get_tool_stubs", names=["skills.add_ts"])


async def test_a_skill_whose_tool_changes_its_schema_is_stale_everywhere_still_runs_or_is_refused(
    client: Client, engine: CodeMode, base: Path, saved: dict[str, dict[str, Any]]
) -> None:
    await run(client, "fixture.add_tool(name='greet')")
    await _until(engine, lambda: engine.index.tool("fixture", "greet") is not None)
    code = "def greet_loud(text: str) -> str:\n    return fixture.greet(text=text.upper())['result']\n"
    await call(client, "save_skill", name="greet_loud", description="Greet loudly.", code=code)
    assert "stale" not in (await call(client, "get_skill", name="greet_loud"))
    twice = "def greet_twice(text: str) -> str:\n    return skills.greet_loud(text=text) * 2\n"
    nested = await call(client, "save_skill", name="greet_twice", description="Greet loudly, twice.", code=twice)
    assert nested["tools"] == ["fixture.greet"]  # the tools of the skill it calls

    await run(client, "fixture.retype_tool(name='greet')")
    await _until(engine, lambda: bool(engine.skills and engine.skills.find("greet_loud").stale))  # pyright: ignore[reportOptionalMemberAccess]

    listed = {s["name"]: s for s in (await call(client, "list_skills"))["skills"]}
    assert listed["greet_loud"]["stale"] == "fixture.greet changed" and "stale" not in listed["plus_twice"]
    assert listed["greet_twice"]["stale"] == "fixture.greet changed"
    assert (await call(client, "get_skill", name="greet_loud"))["stale"] == "fixture.greet changed"
    found = await call(client, "search_tools", query="greet loudly")
    hit = next(s for s in found["skills"] if s["tool"] == "skills.greet_loud")
    assert hit["kind"] == "skill" and hit["stale"] == "fixture.greet changed"
    checked = await call(client, "validate_code", language="python", code="skills.greet_loud(text='a')")
    assert [f["kind"] for f in checked["findings"]] == ["stale-skill"]
    assert "fixture.greet changed" in checked["findings"][0]["message"]
    stubs = await call(client, "get_tool_stubs")
    assert "Greet loudly. (stale: fixture.greet changed)" in stubs["result"]
    still = await run(client, "skills.greet_loud(text='hi')")
    assert still["success"] and still["returnValue"] == "greet:HI", still
    both = await run(client, "skills.greet_twice(text='a')", runner="local")  # a skill calling a skill
    assert both["returnValue"] == "greet:Agreet:A", both

    # Another server on the same database, refusing stale skills; its fixture (slow to start) has no greet.
    strict = CodeMode(
        make_config(
            {"fixture": fixture_entry(FIXTURE_START_DELAY="1")},
            workspace_dir=base / "strict-runs",
            cache_dir=base / "cache",
            pool_size=1,
            stale_skills="refuse",
        )
    )
    async with Client(build_server(strict), mode="legacy") as other:
        first = await run(other, "skills.plus_twice(a=1)", runner="cpython")  # its server still starting
        assert first["success"] and first["returnValue"] == 4, first
        listed = {s["name"]: s for s in (await call(other, "list_skills"))["skills"]}
        assert listed["greet_loud"]["stale"] == "fixture.greet is gone"
        result = await run(other, "skills.greet_loud(text='hi')", runner="cpython")
        assert not result["success"] and "CODE_MODE_STALE_SKILLS=refuse" in result["error"]["message"]


async def test_a_skill_exported_deleted_and_imported_again_is_callable_again(
    client: Client,
    base: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    saved: dict[str, dict[str, Any]],
) -> None:
    monkeypatch.setenv("CODE_MODE_CACHE_DIR", str(base / "cache"))
    folders = base / "exported"
    assert main(["skills", "export", str(folders), "--name", "plus_twice", "--name", "add_ts"]) == 0
    skill_md = (folders / "plus_twice" / "SKILL.md").read_text(encoding="utf-8")
    assert skill_md.startswith('---\nname: plus-twice\ndescription: "Add a and b, doubled."\n')
    assert "skills.plus_twice(...)" in skill_md
    assert (folders / "plus_twice" / "skill.py").read_text(encoding="utf-8") == PLUS_TWICE
    assert (folders / "add_ts" / "skill.ts").read_text(encoding="utf-8") == ADD_TS

    for name in ("plus_twice", "add_ts"):
        assert (await call(client, "delete_skill", name=name))["deleted"] == name
    gone = await run(client, "skills.plus_twice(a=1)")
    assert not gone["success"] and "plus_twice" in gone["error"]["message"]
    assert "no skill 'plus_twice'" in await refused(client, "get_skill", name="plus_twice")

    capsys.readouterr()
    assert main(["skills", "import", str(folders)]) == 0
    out = capsys.readouterr().out
    assert "imported add_ts (version 1, typescript)" in out and "imported plus_twice (version 1, python)" in out
    assert (await run(client, "skills.plus_twice(a=2, b=3)"))["returnValue"] == 10
    again = await call(
        client, "execute_code", language="javascript", code="export default await skills.add_ts({ a: 2, b: 2 });"
    )
    assert again["returnValue"] == 4
    detail = await call(client, "get_skill", name="plus_twice")
    assert detail["tools"] == ["fixture.add"] and detail["author"] == "import" and "stale" not in detail


async def test_a_server_started_as_a_subprocess_saves_and_runs_a_skill(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(home / "mcp_servers.json", {"fixture": fixture_entry()})
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/sh",
        "TERM": "dumb",
    }
    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("mcp-code-mode")), args=["serve", "--config", str(config)], env=env
    )
    with anyio.fail_after(300):
        async with Client(params, mode="legacy") as c:
            await call(c, "save_skill", name="plus_twice", description="Add, doubled.", code=PLUS_TWICE)
            result = await execute(c, language="python", code="skills.plus_twice(a=4)")
            assert result["success"] and result["returnValue"] == 10, result
            listed = await call(c, "list_skills")
            assert [s["name"] for s in listed["skills"]] == ["plus_twice"]
    assert (home / ".cache" / "mcp-code-mode" / "scripts.db").exists()


async def _until(engine: CodeMode, done: Any) -> None:
    """Wait for the downstream tools to change until ``done()`` (checked before each wait: no change is missed)."""
    with anyio.fail_after(30):
        while not done():
            await engine.tools_changed()
