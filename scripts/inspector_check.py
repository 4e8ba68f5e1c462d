"""Drive every tool of mcp-code-mode through the MCP Inspector CLI (v2) and check the answers.

    .venv/bin/python scripts/inspector_check.py        (or: make inspector)

Installs Node 22 and the pinned Inspector into ./.tools (scripts/node_tools.py). Starts the server
over streamable HTTP with a bearer token, against the pinned npm filesystem and memory servers on a
temporary folder, and calls each tool with ``inspector --cli``. Also checks that a call without the
token is refused and that the stdio command a desktop client would run answers ``tools/list``.

Every tool the server lists must have a check in ``CHECKS``: a new tool without one fails the run.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import node_tools

TOOL_ERROR_EXIT = 5
"""The Inspector CLI's exit status for a tool result with ``isError``."""
CONNECT_TIMEOUT_MS = "120000"  # a loaded 2-core machine can take a while to start the downstream servers


class Inspector:
    def __init__(self, env: dict[str, str], url: str, token: str) -> None:
        self.env = env
        self.url = url
        self.token = token

    def run(self, *args: str, token: str | None = None, target: list[str] | None = None) -> tuple[int, Any, str]:
        """``inspector --cli ARGS`` against the HTTP server (or ``target``); exit code, parsed JSON, stderr."""
        command = ["inspector", "--cli", "--connect-timeout", CONNECT_TIMEOUT_MS, *args]
        if target is None:
            command += ["--transport", "http", "--server-url", self.url]
            if token is not None:
                command += ["--header", f"Authorization: Bearer {token}"]
        else:
            command += ["--", *target]
        proc = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=300)
        try:
            data = json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError:
            data = proc.stdout
        return proc.returncode, data, proc.stderr

    def call(self, tool: str, *, failing: bool = False, **arguments: str) -> dict[str, Any]:
        """Call a tool; the Inspector exits 5 when the result has ``isError``, which ``failing`` expects."""
        pairs = [f"{key}={value}" for key, value in arguments.items()]
        args = ["--tool-arg", *pairs] if pairs else []  # a bare --tool-arg would swallow the next options
        code, data, err = self.run("--method", "tools/call", "--tool-name", tool, *args, token=self.token)
        expected = TOOL_ERROR_EXIT if failing else 0
        expect(code == expected and isinstance(data, dict), f"tools/call {tool}: exit {code}: {data or err}")
        return data  # pyright: ignore[reportReturnType]


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block.get("text", "") for block in result.get("content", []) if block.get("type") == "text")


# ----- one check per tool ------------------------------------------------------------------------


def check_execute_code(inspector: Inspector, files: Path) -> None:
    code = (
        "filesystem.write_file(path='inspector.txt', content='written by a script')\n"
        "text = filesystem.read_text_file(path='inspector.txt')['content']\n"
        "memory.create_entities(entities=[{'name': 'inspector', 'entityType': 'check', 'observations': [text]}])\n"
        "print('read:', text)\n"
        "{'length': len(text), 'nodes': len(memory.open_nodes(names=['inspector'])['entities'])}"
    )
    result = inspector.call("execute_code", language="python", code=code)
    data = result.get("structuredContent") or {}
    expect(data.get("success") is True, f"the script failed: {data.get('error')}")
    expect(data.get("output") == "read: written by a script\n", f"unexpected output {data.get('output')!r}")
    expect(data.get("returnValue") == {"length": 19, "nodes": 1}, f"unexpected returnValue {data.get('returnValue')}")
    expect(data.get("toolCalls") == 4, f"expected 4 tool calls, got {data.get('toolCalls')}")
    expect(result.get("isError") is False, "isError should be false")
    expect("read: written by a script" in text_of(result), "the text content lacks the output")
    written = files / "inspector.txt"
    expect(written.read_text(encoding="utf-8") == "written by a script", "the file was not written through the tool")

    failed = inspector.call("execute_code", failing=True, language="python", code="x = 1\n1 / 0\n")
    error = (failed.get("structuredContent") or {}).get("error") or {}
    expect(failed.get("isError") is True, "a failing script must set isError")
    expect(error.get("type") == "ZeroDivisionError" and error.get("line") == 2, f"unexpected error {error}")

    refused = inspector.call("execute_code", failing=True, language="cobol", code="DISPLAY 'HI'.")
    expect(refused.get("isError") is True and "not supported" in text_of(refused), "cobol should be refused")


def check_get_tool_stubs(inspector: Inspector, _: Path) -> None:
    stubs = text_of(inspector.call("get_tool_stubs", server="filesystem"))
    expect("class filesystem:" in stubs and "def read_text_file(path: str" in stubs, "filesystem stubs missing")
    expect("class memory" not in stubs, "stubs for one server should not include the others")
    compile(stubs, "stubs", "exec")


def structured(result: dict[str, Any]) -> Any:
    data = result.get("structuredContent")
    return data.get("result", data) if isinstance(data, dict) and set(data) == {"result"} else data


def check_get_execution_limits(inspector: Inspector, _: Path) -> None:
    limits = structured(inspector.call("get_execution_limits"))
    expect(limits["timeoutMs"] == {"default": 30000, "max": 300000}, f"unexpected timeouts {limits.get('timeoutMs')}")
    expect(limits["isolation"]["isolation"] in ("namespaces", "process"), f"unexpected isolation {limits['isolation']}")
    states = {s["name"]: s["state"] for s in limits["servers"]}
    # Each Inspector call spawns a server, whose downstream servers connect in the background: ready or starting.
    expect(
        set(states) == {"filesystem", "memory"} and set(states.values()) <= {"ready", "starting"},
        f"unexpected server states {states}",
    )


def check_list_supported_languages(inspector: Inspector, _: Path) -> None:
    languages = {entry["language"]: entry for entry in structured(inspector.call("list_supported_languages"))}
    expect(set(languages) == {"python", "javascript", "typescript"}, f"unexpected languages {sorted(languages)}")
    runners = {r["name"] for r in languages["python"]["runners"]}
    expect({"local", "cpython", "pyodide"} <= runners, f"unexpected Python runners {runners}")


def check_list_allowed_packages(inspector: Inspector, _: Path) -> None:
    listing = structured(inspector.call("list_allowed_packages", language="python"))
    names = {p["name"] for p in listing["python"]}
    expect({"requests", "numpy"} <= names and "javascript" not in listing, f"unexpected whitelist {listing}")


def check_search_tools(inspector: Inspector, _: Path) -> None:
    found = text_of(inspector.call("search_tools", query="read the contents of a text file", detail="name"))
    expect("filesystem.read_text_file" in found, f"read_text_file not found: {found[:500]}")


def check_validate_code(inspector: Inspector, _: Path) -> None:
    answer = structured(
        inspector.call("validate_code", language="python", code="import os\nfilesystem.read_text_file()")
    )
    kinds = [(f["line"], f["kind"]) for f in answer["findings"]]
    expect(answer["valid"] is False and kinds == [(1, "import"), (2, "arguments")], f"unexpected findings {kinds}")


def check_cache_tools(inspector: Inspector, _: Path) -> None:
    code = "rows = [int(x) for x in '3,4,5'.split(',')]\nsum(rows)"
    first = structured(
        inspector.call("execute_code", language="python", code=code, description="sum a list of numbers")
    )
    found = structured(inspector.call("search_cached_scripts", query="add up numbers"))
    expect(found["scripts"] and found["scripts"][0]["hash"] == first["hash"], f"search missed the script: {found}")
    listed = structured(inspector.call("list_cached_scripts"))
    expect(first["hash"] in [s["hash"] for s in listed["scripts"]], "list_cached_scripts misses the script")
    shown = structured(inspector.call("get_cached_script", hash=first["hash"]))
    expect(shown["code"] == code and shown["returnValue"] == 12, f"get_cached_script: {shown}")
    stats = structured(inspector.call("get_cache_stats"))
    expect(stats["scripts"] >= 1 and "environments" in stats, f"get_cache_stats: {stats}")


CHECKS: dict[str, Callable[[Inspector, Path], None]] = {
    "execute_code": check_execute_code,
    "get_tool_stubs": check_get_tool_stubs,
    "get_execution_limits": check_get_execution_limits,
    "list_supported_languages": check_list_supported_languages,
    "list_allowed_packages": check_list_allowed_packages,
    "search_tools": check_search_tools,
    "validate_code": check_validate_code,
    "search_cached_scripts": check_cache_tools,
    "list_cached_scripts": lambda inspector, files: None,  # checked with search_cached_scripts
    "get_cached_script": lambda inspector, files: None,  # checked with search_cached_scripts
    "get_cache_stats": lambda inspector, files: None,  # checked with search_cached_scripts
}


# ----- the run -----------------------------------------------------------------------------------


def run_checks(inspector: Inspector, files: Path, stdio_target: list[str]) -> list[str]:
    failures: list[str] = []

    def step(name: str, action: Callable[[], None]) -> None:
        try:
            action()
        except AssertionError as exc:
            failures.append(f"{name}: {exc}")
            print(f"FAIL {name}: {exc}", flush=True)
        else:
            print(f"ok   {name}", flush=True)

    code, listed, err = inspector.run("--method", "tools/list", token=inspector.token)
    if code != 0 or not isinstance(listed, dict):
        return [f"tools/list failed (exit {code}): {listed or err}"]
    tools = [tool["name"] for tool in listed.get("tools", [])]
    print(f"tools: {', '.join(tools)}", flush=True)
    for name in tools:
        check = CHECKS.get(name)
        if check is None:
            failures.append(f"{name}: no check for this tool; add one to CHECKS in scripts/inspector_check.py")
            continue
        step(f"tool {name}", lambda check=check: check(inspector, files))
    failures.extend(f"{name}: has a check but the server does not list it" for name in set(CHECKS) - set(tools))

    # On a 401 the Inspector wants to start OAuth; --stored-auth-only makes it report auth_required instead.
    def no_token() -> None:
        code, data, err = inspector.run("--stored-auth-only", "--method", "tools/list")
        expect(code != 0 and "auth_required" in f"{data}{err}", f"not refused without a token: {data or err}")

    def wrong_token() -> None:
        code, data, err = inspector.run("--stored-auth-only", "--method", "tools/list", token="not-the-token")
        expect(code != 0 and "auth_required" in f"{data}{err}", f"a wrong token was not refused: {data or err}")

    def set_level() -> None:
        code, data, err = inspector.run("--method", "logging/setLevel", "--log-level", "debug", token=inspector.token)
        expect(code == 0, f"logging/setLevel failed (exit {code}): {data or err}")

    def stdio() -> None:
        code, data, err = inspector.run("--method", "tools/list", target=stdio_target)
        expect(code == 0 and isinstance(data, dict), f"stdio tools/list failed (exit {code}): {data or err}")
        names = {tool["name"] for tool in data.get("tools", [])}  # pyright: ignore[reportAttributeAccessIssue]
        expect(names == set(tools), f"stdio lists {sorted(names)}, HTTP lists {sorted(tools)}")

    step("no token gets 401", no_token)
    step("a wrong token gets 401", wrong_token)
    step("logging/setLevel", set_level)
    step("stdio serve answers tools/list", stdio)
    return failures


def main() -> int:
    env = node_tools.ensure()
    version = subprocess.run(["inspector", "--version"], env=env, capture_output=True, text=True, timeout=120)
    print(f"MCP Inspector {version.stdout.strip()} on Node {env_node_version(env)}", flush=True)
    servers_bin = node_tools.ROOT / "node_modules" / ".bin"
    with tempfile.TemporaryDirectory(prefix="inspector-") as tmp:
        folder = Path(tmp)
        files = folder / "files"
        files.mkdir()
        config = folder / "servers.json"
        servers = {
            "filesystem": {"command": str(servers_bin / "mcp-server-filesystem"), "args": [str(files)]},
            "memory": {
                "command": str(servers_bin / "mcp-server-memory"),
                "env": {"MEMORY_FILE_PATH": str(folder / "memory.jsonl")},
            },
        }
        config.write_text(json.dumps({"servers": servers}), encoding="utf-8")
        token = secrets.token_urlsafe(24)
        server_env = {k: v for k, v in env.items() if not k.startswith("CODE_MODE_")} | {
            "CODE_MODE_AUTH_TOKEN": token,
            "CODE_MODE_CACHE_DIR": str(folder / "cache"),
        }
        stdio_target = [str(node_tools.VENV_BIN / "mcp-code-mode"), "serve", "--config", str(config)]
        with node_tools.running_server(config, folder / "server.log", env=server_env) as (url, _):
            failures = run_checks(Inspector(env, url, token), files, stdio_target)
        log = (folder / "server.log").read_text(encoding="utf-8", errors="replace")
        if token in log:
            failures.append("the token appears in the server log")
        if log.count('"POST /mcp HTTP/1.1" 401') < 2:
            failures.append("the server log does not show the two requests it refused with 401")
    print(f"\ninspector: {'OK' if not failures else 'FAILED'}", flush=True)
    for failure in failures:
        print(f"  - {failure}")
    return 1 if failures else 0


def env_node_version(env: dict[str, str]) -> str:
    return subprocess.run(["node", "--version"], env=env, capture_output=True, text=True, check=True).stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
