"""A denied tool stays denied whatever a script calls it, on every runner; the downstream server sees no call.

The server is named ``fix-ture`` (its namespace in a script is ``fix_ture``), its ``echo`` is denied, so are its
tools matching ``danger-*`` (``danger-zone`` is added at run time through the fixture's ``add_tool``: its function
is ``danger_zone``), and ``echo_json`` is allowed only for a ``value`` under ``reports/``. Each attempt asserts the
refusal the script sees and that the server's call counter did not move (``ToolPool`` counts every call it sends).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Literal

import anyio
import pytest

from mcp_code_mode.bridge import RunResult
from mcp_code_mode.engine import CodeMode

from ..conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio

SERVER = "fix-ture"
WAIT = 60
DENIED_ECHO = 'denied: fix-ture.echo: denied (fix-ture: tools["echo"])'
DENIED_DANGER = 'denied: fix-ture.danger-zone: denied (fix-ture: tools["danger-*"])'


@pytest.fixture(scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:
    config = make_config(
        {
            SERVER: {
                **fixture_entry(),
                "policy": {
                    "default": "allow",
                    "tools": {
                        "echo": "deny",
                        "danger-*": "deny",
                        "echo_json": {
                            "decision": "allow",
                            "when": {"/value": {"glob": "reports/**"}},
                            "otherwise": "deny",
                        },
                    },
                },
            }
        },
        workspace_dir=tmp_path_factory.mktemp("bypass-runs"),
    )
    async with CodeMode(config) as cm:
        yield cm


@pytest.fixture(scope="module")
async def danger(engine: CodeMode) -> str:
    """The tool ``danger-zone``, added to the server at run time (the fixture announces tools/list_changed)."""
    if engine.pool.find(SERVER, "danger-zone") is None:
        result = await engine.execute("fix_ture.add_tool(name='danger-zone')", cache="off")
        assert result.success, result.error
        with anyio.fail_after(10):
            while engine.pool.find(SERVER, "danger-zone") is None:
                await anyio.sleep(0.02)  # the pool refreshes its tools in the background: nothing to wait on
    return "danger-zone"


async def attempt(
    engine: CodeMode, code: str, runner: str, mode: Literal["run", "plan"] = "run"
) -> tuple[RunResult, int]:
    """Run ``code`` on ``runner``; the result and how many calls reached the server meanwhile."""
    language = "javascript" if runner == "deno" else "python"
    before = engine.pool.servers[SERVER].calls
    with anyio.fail_after(WAIT):
        result = await engine.execute(code, language, runner=runner, cache="off", timeout_ms=20000, mode=mode)
    return result, engine.pool.servers[SERVER].calls - before


def trying(call: str, runner: str) -> str:
    """A script that makes ``call`` and prints ``REACHED``, or the ToolError it got."""
    if runner == "deno":
        return f"try {{ await {call}; console.log('REACHED') }} catch (e) {{ console.log(e.name + ': ' + e.message) }}"
    return f"try:\n    {call}\n    print('REACHED')\nexcept ToolError as e:\n    print('ToolError: ' + str(e))\n"


PYTHON_ECHO = {
    "stub": "fix_ture.echo(text='x')",
    "call_tool-original-names": "call_tool('fix-ture', 'echo', {'text': 'x'})",
    "call_tool-namespace": "call_tool('fix_ture', 'echo', {'text': 'x'})",
    "getattr-on-the-namespace": "getattr(fix_ture, 'echo')(text='x')",
    "call_tool-keyword-arguments": "call_tool(server='fix-ture', tool='echo', arguments={'text': 'x'})",
}
JS_ECHO = {
    "stub": "fix_ture.echo({text: 'x'})",
    "bracket-on-the-namespace": "fix_ture['echo']({text: 'x'})",
    "callTool-original-names": "callTool('fix-ture', 'echo', {text: 'x'})",
    "callTool-namespace": "callTool('fix_ture', 'echo', {text: 'x'})",
}


def cases(python: dict[str, str], javascript: dict[str, str]) -> list[object]:
    return [
        *(
            pytest.param(runner, call, id=f"{runner}-{name}")
            for runner in ("local", "cpython")
            for name, call in python.items()
        ),
        *(pytest.param("deno", call, id=f"deno-{name}") for name, call in javascript.items()),
    ]


@pytest.mark.parametrize(("runner", "call"), cases(PYTHON_ECHO, JS_ECHO))
@pytest.mark.parametrize("mode", ["run", "plan"])
async def test_a_denied_tool_is_denied_by_every_name_a_script_can_use(
    engine: CodeMode, runner: str, call: str, mode: Literal["run", "plan"]
) -> None:
    result, reached = await attempt(engine, trying(call, runner), runner, mode=mode)
    assert result.success, result.error
    assert result.output == f"ToolError: {DENIED_ECHO}\n"
    assert reached == 0
    assert [(c.server, c.tool, c.decision) for c in result.calls] == [(SERVER, "echo", "denied")]  # original names
    if mode == "plan":
        assert result.plan is not None and result.plan.calls == []  # denied, not planned


PYTHON_DANGER = {
    "stub-sanitised": "fix_ture.danger_zone(text='x')",
    "call_tool-original-names": "call_tool('fix-ture', 'danger-zone', {'text': 'x'})",
    "call_tool-sanitised-names": "call_tool('fix_ture', 'danger_zone', {'text': 'x'})",
    "call_tool-mixed": "call_tool('fix-ture', 'danger_zone', {'text': 'x'})",
}
JS_DANGER = {
    "stub-sanitised": "fix_ture.danger_zone({text: 'x'})",
    "callTool-original-names": "callTool('fix-ture', 'danger-zone', {text: 'x'})",
    "callTool-sanitised-names": "callTool('fix_ture', 'danger_zone', {text: 'x'})",
}


@pytest.mark.parametrize(("runner", "call"), cases(PYTHON_DANGER, JS_DANGER))
async def test_a_denied_tool_whose_name_is_sanitised_is_denied_by_each_spelling(
    engine: CodeMode, danger: str, runner: str, call: str
) -> None:
    result, reached = await attempt(engine, trying(call, runner), runner)
    assert result.output == f"ToolError: {DENIED_DANGER}\n", result.error
    assert reached == 0
    assert [(c.server, c.tool, c.decision) for c in result.calls] == [(SERVER, danger, "denied")]


UNKNOWN = {
    "server-upper-case": ("FIX-TURE", "echo", "unknown server 'FIX-TURE'"),
    "namespace-upper-case": ("FIX_TURE", "echo", "unknown server 'FIX_TURE'"),
    "tool-upper-case": ("fix-ture", "ECHO", "server 'fix-ture' has no tool 'ECHO'"),
    "tool-title-case": ("fix-ture", "Echo", "server 'fix-ture' has no tool 'Echo'"),
    "tool-trailing-space": ("fix-ture", "echo ", "server 'fix-ture' has no tool 'echo '"),
    "tool-leading-space": ("fix-ture", " echo", "server 'fix-ture' has no tool ' echo'"),
    "server-trailing-space": ("fix-ture ", "echo", "unknown server 'fix-ture '"),
    "tool-zero-width-space": ("fix-ture", "echo\u200b", "server 'fix-ture' has no tool 'echo\\u200b'"),
    "tool-trailing-newline": ("fix-ture", "echo\n", "server 'fix-ture' has no tool 'echo\\n'"),
    "server-dotted": ("fix-ture.echo", "echo", "unknown server 'fix-ture.echo'"),
}


def unknown_cases() -> list[object]:
    out: list[object] = []
    for runner in ("local", "cpython", "deno"):
        for name, (server, tool, message) in UNKNOWN.items():
            out.append(pytest.param(runner, server, tool, message, id=f"{runner}-{name}"))
    return out


def call_by_name(runner: str, server: str, tool: str) -> str:
    function = "callTool" if runner == "deno" else "call_tool"
    arguments = "{text: 'x'}" if runner == "deno" else "{'text': 'x'}"
    return f"{function}({server!r}, {tool!r}, {arguments})"


@pytest.mark.parametrize(("runner", "server", "tool", "message"), unknown_cases())
async def test_a_name_no_tool_has_reaches_no_server(
    engine: CodeMode, runner: str, server: str, tool: str, message: str
) -> None:
    result, reached = await attempt(engine, trying(call_by_name(runner, server, tool), runner), runner)
    assert result.success, result.error
    assert result.output.startswith(f"ToolError: {message}"), result.output
    assert "REACHED" not in result.output
    assert reached == 0


async def test_a_call_by_a_name_no_tool_has_is_in_the_audit_log_as_refused(engine: CodeMode) -> None:
    result, reached = await attempt(engine, trying(call_by_name("cpython", "FIX-TURE", "ECHO"), "cpython"), "cpython")
    assert reached == 0 and result.output.startswith("ToolError: unknown server")
    assert [c.decision for c in result.calls] == ["refused"]
    assert engine.audit is not None
    assert [e["decision"] for e in engine.audit.query(run=result.hash, tenant="default")] == ["refused"]


RAW_CHANNEL = (
    "import gc\n"
    "channels = [o for o in gc.get_objects() if hasattr(o, '_next_id') and hasattr(o, 'send')]\n"
    "out = [len(channels) > 0]\n"
    "for server, tool in (('fix-ture', 'echo'), ('fix_ture', 'echo'), ('fix-ture', 'danger-zone')):\n"
    "    try:\n"
    "        channels[0].call(server, tool, {'text': 'raw'})\n"
    "        out.append('REACHED')\n"
    "    except ToolError as e:\n"
    "        out.append(str(e))\n"
    "out\n"
)


async def test_a_call_sent_on_the_raw_channel_still_passes_the_gate(engine: CodeMode, danger: str) -> None:
    result, reached = await attempt(engine, RAW_CHANNEL, "cpython")
    assert result.success, result.error
    assert result.return_value == [True, DENIED_ECHO, DENIED_ECHO, DENIED_DANGER]
    assert reached == 0


OWN_FUNCTION_PY = """
def echo(text):
    return 'mine:' + text

def call_tool(server, tool, arguments):
    return 'my call_tool'

try:
    fix_ture.echo = echo
except Exception as e:
    print('assignment refused:', type(e).__name__)
replaced = fix_ture.echo(text='y') if fix_ture.echo is echo else 'not replaced'
[echo(text='x'), replaced, call_tool('fix-ture', 'echo', {})]
"""
OWN_FUNCTION_JS = """
async function echo(args) { return 'mine:' + args.text }
const callTool = async () => 'my callTool'
let assigned = 'replaced'
try { fix_ture.echo = echo } catch (e) { assigned = e.name }
export default [await echo({text: 'x'}), assigned, fix_ture.echo === echo, await callTool('fix-ture', 'echo', {})]
"""


@pytest.mark.parametrize("runner", ["local", "cpython"])
async def test_a_scripts_own_function_named_like_the_stub_reaches_no_server_python(
    engine: CodeMode, runner: str
) -> None:
    result, reached = await attempt(engine, OWN_FUNCTION_PY, runner)
    assert result.success, result.error
    assert result.return_value == ["mine:x", "mine:y", "my call_tool"]
    assert result.calls == [] and reached == 0


async def test_a_scripts_own_function_named_like_the_stub_reaches_no_server_javascript(engine: CodeMode) -> None:
    result, reached = await attempt(engine, OWN_FUNCTION_JS, "deno")
    assert result.success, result.error
    # the namespace's functions cannot be replaced: the script's own function is only its own
    assert result.return_value == ["mine:x", "TypeError", False, "my callTool"]
    assert result.calls == [] and reached == 0


PROC_PY = """
import os
seen = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            with open(f'/proc/{pid}/cmdline', 'rb') as f:
                seen.append(f.read().replace(b'\\0', b' ').decode(errors='replace'))
        except OSError:
            pass
{'servers': [c for c in seen if 'fixture_server' in c], 'count': len(seen)}
"""


async def test_the_sandbox_cannot_see_the_downstream_servers_process(engine: CodeMode) -> None:
    if engine.isolation()["isolation"] != "namespaces":
        pytest.skip("without namespaces a worker shares the host's process table (the isolation says so)")
    result, reached = await attempt(engine, PROC_PY, "cpython")
    assert result.success, result.error
    seen = result.return_value
    assert isinstance(seen, dict)
    assert seen["servers"] == []  # no process of the fixture server (nor of this host) is visible
    assert seen["count"] > 0
    assert reached == 0


CONDITIONS = {
    "under-reports": ("reports/a.txt", True),
    "dot-dot-climbs-out": ("reports/../secrets.txt", False),
    "dot-dot-deeper": ("reports/x/../../secrets.txt", False),
    "backslash-dot-dot": ("reports\\..\\secrets.txt", False),
    "prefix-not-a-folder": ("reports-old/a.txt", False),
    "other-casing": ("REPORTS/a.txt", False),
    "leading-slash": ("/reports/a.txt", False),
    "leading-space": (" reports/a.txt", False),
}


@pytest.mark.parametrize(("value", "allowed"), [pytest.param(v, a, id=k) for k, (v, a) in CONDITIONS.items()])
async def test_an_argument_condition_holds_against_path_tricks(engine: CodeMode, value: str, allowed: bool) -> None:
    result, reached = await attempt(engine, trying(f"fix_ture.echo_json(value={value!r})", "local"), "local")
    assert result.success, result.error
    if allowed:
        assert result.output == "REACHED\n" and reached == 1
        assert [c.decision for c in result.calls] == ["allowed"]
    else:
        assert result.output.startswith("ToolError: denied: fix-ture.echo_json: /value"), result.output
        assert reached == 0
        assert [c.decision for c in result.calls] == ["denied"]


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        pytest.param("{'value': ['reports/a.txt']}", "is not a string", id="a-list-of-a-good-value"),
        pytest.param("{'value': {'path': 'reports/a.txt'}}", "is not a string", id="an-object"),
        pytest.param("{}", "/value is missing", id="missing"),
        pytest.param("{'Value': 'reports/a.txt'}", "/value is missing", id="other-key-casing"),
    ],
)
async def test_an_argument_condition_holds_against_other_shapes(engine: CodeMode, arguments: str, why: str) -> None:
    result, reached = await attempt(
        engine, trying(f"call_tool('fix-ture', 'echo_json', {arguments})", "local"), "local"
    )
    assert result.success, result.error
    assert result.output.startswith("ToolError: denied: fix-ture.echo_json:") and why in result.output, result.output
    assert reached == 0
