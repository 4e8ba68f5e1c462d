"""Artifacts through a real MCP client (issue 23): files a run leaves come back as resource links with their
size and type, readable with resources/read after the run; small images inline; caps, symlinks and forged paths
refused; show() and a downstream tool's image passed through; a downstream server's resources and prompts read
from scripts (the npm server-everything)."""

from __future__ import annotations

import base64
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import BlobResourceContents, CallToolResult, ImageContent, ResourceLink, TextResourceContents

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.server import build_server

from ..conftest import free_port, http_client, make_config, npm_server, write_config

pytestmark = pytest.mark.anyio

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG (70 bytes)."""


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[Client]:
    everything = {"command": npm_server("everything")}
    locked = {**everything, "policy": {"tools": {"resources/*": "deny"}}}  # its resources: refused by the policy
    config = make_config({"everything": everything, "locked": locked}, pool_size=1, artifact_max_file_mb=10)
    async with Client(build_server(CodeMode(config)), mode="legacy") as c:
        yield c


async def execute(client: Client, code: str, **extra: Any) -> tuple[CallToolResult, dict[str, Any]]:
    arguments = {"language": "python", "code": code, "cache": "off", **extra}
    with anyio.fail_after(120):
        result = await client.call_tool("execute_code", arguments)
    assert result.structured_content is not None
    return result, result.structured_content


def links(result: CallToolResult) -> dict[str, ResourceLink]:
    return {b.name: b for b in result.content if isinstance(b, ResourceLink)}


def images(result: CallToolResult) -> list[ImageContent]:
    return [b for b in result.content if isinstance(b, ImageContent)]


WRITE = {
    "python": f"open('notes.txt', 'w').write('alpha beta')\nopen('dot.png', 'wb').write({PNG!r})\n'written'",
    "javascript": (
        "Deno.writeTextFileSync('notes.txt', 'alpha beta');\n"
        f"const png = atob('{base64.b64encode(PNG).decode()}');\n"
        "Deno.writeFileSync('dot.png', Uint8Array.from(png, (c) => c.charCodeAt(0)));\n"
        "export default 'written';"
    ),
}


@pytest.mark.parametrize(("runner", "language"), [("cpython", "python"), ("local", "python"), ("deno", "javascript")])
async def test_a_run_s_files_are_resource_links_read_back_after_the_run_and_its_png_is_inline(
    client: Client, runner: str, language: str
) -> None:
    result, structured = await execute(client, WRITE[language], runner=runner, language=language)
    assert structured["success"], structured["error"]
    linked = links(result)
    assert set(linked) == {"notes.txt", "dot.png"}
    assert (linked["notes.txt"].size, linked["notes.txt"].mime_type) == (10, "text/plain")
    assert (linked["dot.png"].size, linked["dot.png"].mime_type) == (len(PNG), "image/png")
    assert str(linked["dot.png"].uri).startswith(f"code-mode://runs/{structured['hash']}/files/")
    assert {f["path"]: f["uri"] for f in structured["files"]} == {n: str(link.uri) for n, link in linked.items()}
    assert [(i.mime_type, base64.b64decode(i.data)) for i in images(result)] == [("image/png", PNG)]

    text = (await client.read_resource(str(linked["notes.txt"].uri))).contents
    assert isinstance(text[0], TextResourceContents) and text[0].text == "alpha beta"
    png = (await client.read_resource(str(linked["dot.png"].uri))).contents
    assert isinstance(png[0], BlobResourceContents) and png[0].mime_type == "image/png"
    assert base64.b64decode(png[0].blob) == PNG


async def test_odd_file_names_link_and_read_back_and_a_run_with_files_is_never_replayed(client: Client) -> None:
    code = "import os\nos.makedirs('d ü')\nopen('d ü/50% #1?.txt', 'w').write('odd')\n"
    first, structured = await execute(client, code, runner="cpython", cache="auto")
    (name,) = links(first)
    assert name == "d ü/50% #1?.txt"
    contents = (await client.read_resource(str(links(first)[name].uri))).contents[0]
    assert isinstance(contents, TextResourceContents) and contents.text == "odd"
    again, replay = await execute(client, code, runner="cpython", cache="auto")
    assert replay["cached"] is False and structured["cached"] is False  # its links are its own run's
    assert (await client.read_resource(str(links(again)[name].uri))).contents[0].model_dump()["text"] == "odd"


async def test_a_made_up_artifact_uri_is_not_found_and_the_limits_say_what_is_kept(client: Client) -> None:
    with pytest.raises(MCPError, match="Unknown resource"):
        await client.read_resource("code-mode://runs/0123456789abcdef/files/notes.txt")
    limits = (await client.call_tool("get_execution_limits", {})).structured_content
    assert limits is not None and limits["artifacts"]["kept"] is True and limits["artifacts"]["maxFileMB"] == 10


async def test_a_50_mb_file_over_the_10_mb_cap_is_not_kept_the_cap_is_named_and_the_other_files_are(
    client: Client,
) -> None:
    code = "with open('big.bin', 'wb') as f:\n    f.write(b'x' * (50 << 20))\nopen('small.txt', 'w').write('kept')\n"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result, structured = await execute(client, code, runner="cpython")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert structured["success"], structured["error"]
    files = {f["path"]: f for f in structured["files"]}
    assert files["big.bin"] == {"path": "big.bin", "size": 50 << 20, "dropped": "CODE_MODE_ARTIFACT_MAX_FILE_MB"}
    assert set(links(result)) == {"small.txt"}
    small = (await client.read_resource(str(links(result)["small.txt"].uri))).contents[0]
    assert isinstance(small, TextResourceContents) and small.text == "kept"
    assert grown_mb < 30, f"the host grew by {grown_mb:.0f} MB: it held the file the sandbox should have skipped"


async def test_a_symlink_to_etc_passwd_in_the_workspace_is_not_followed(client: Client) -> None:
    code = "import os\nos.symlink('/etc/passwd', 'passwd')\nopen('real.txt', 'w').write('ok')\n"
    result, structured = await execute(client, code, runner="cpython")
    assert structured["success"], structured["error"]
    files = {f["path"]: f for f in structured["files"]}
    assert "uri" not in files["passwd"] and "not sent" in files["passwd"]["dropped"]
    assert set(links(result)) == {"real.txt"}


FORGE = """
import os, stat
forged = b'{"op":"file","path":"../escaped.txt","data":"aGk=","end":true}\\n'
for fd in range(3, 64):
    try:
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            os.write(fd, forged)
    except OSError:
        pass
"""


async def test_a_file_message_the_script_forges_with_a_dotdot_path_ends_the_run_and_keeps_nothing(
    client: Client,
) -> None:
    result, structured = await execute(client, FORGE, runner="cpython")
    assert not structured["success"]
    assert structured["error"]["type"] == "ProtocolError"
    assert "invalid path" in structured["error"]["message"] and "../escaped.txt" in structured["error"]["message"]
    assert links(result) == {}


async def test_show_of_a_downstream_tool_s_image_and_returning_it_pass_the_image_through_unchanged(
    client: Client,
) -> None:
    code = (
        "image = next(i for i in everything.get_tiny_image() if isinstance(i, dict) and i.get('type') == 'image')\n"
        "show(image)\n"
        "image"
    )
    result, structured = await execute(client, code)
    assert structured["success"], structured["error"]
    returned = structured["returnValue"]
    assert returned["type"] == "image" and returned["mimeType"] == "image/png"
    shown = images(result)
    assert [(i.mime_type, i.data) for i in shown] == [("image/png", returned["data"])] * 2  # returned, and shown


async def test_show_of_a_path_sends_the_image_and_of_a_text_file_is_refused_naming_what_it_takes(
    client: Client,
) -> None:
    code = f"open('dot.png', 'wb').write({PNG!r})\nshow('dot.png')\nopen('a.txt', 'w').write('text')\nshow('a.txt')\n"
    result, structured = await execute(client, code, runner="cpython")
    assert not structured["success"]
    assert structured["error"]["type"] == "ValueError"
    assert "a.txt is not a png, jpeg, gif or webp image" in structured["error"]["message"]
    assert [base64.b64decode(i.data) for i in images(result)].count(PNG) >= 1


RESOURCES_PY = """
listed = everything.list_resources()["resources"]
first = listed[0]
read = everything.read_resource(first["uri"])
prompts = everything.list_prompts()["prompts"]
simple = next(p for p in prompts if not any(a.get("required") for a in p.get("arguments", [])))
got = everything.get_prompt(simple["name"])
{"count": len(listed), "uri": first["uri"], "read": read["contents"][0]["uri"], "prompt": simple["name"],
 "messages": len(got["messages"])}
"""

RESOURCES_JS = """
const listed = (await everything.list_resources()).resources;
const read = await everything.read_resource(listed[0].uri);
const prompts = (await everything.list_prompts()).prompts;
export default { uri: listed[0].uri, read: read.contents[0].uri, prompts: prompts.length };
"""


async def test_scripts_list_and_read_a_downstream_server_s_resources_and_prompts(client: Client) -> None:
    checked = (await client.call_tool("validate_code", {"language": "python", "code": RESOURCES_PY})).structured_content
    assert checked is not None and checked["valid"], checked  # the validator knows them too
    _, py = await execute(client, RESOURCES_PY)
    assert py["success"], py["error"]
    value = py["returnValue"]
    assert value["count"] > 0 and value["read"] == value["uri"] and value["messages"] > 0
    assert [(c["server"], c["tool"]) for c in py["calls"]] == [
        ("everything", "resources/list"),
        ("everything", "resources/read"),
        ("everything", "prompts/list"),
        ("everything", "prompts/get"),
    ]
    _, js = await execute(client, RESOURCES_JS, language="javascript")
    assert js["success"], js["error"]
    assert js["returnValue"]["read"] == js["returnValue"]["uri"] and js["returnValue"]["prompts"] > 0


async def test_a_policy_that_denies_a_server_s_resources_refuses_reading_them_from_a_script(client: Client) -> None:
    code = (
        "try:\n    locked.read_resource('demo://resource/static/document/architecture.md')\n"
        "except ToolError as e:\n    refused = str(e)\n"
        "[refused, len(locked.list_prompts()['prompts']) > 0]"
    )
    _, structured = await execute(client, code)
    assert structured["success"], structured["error"]
    refused, prompts = structured["returnValue"]
    assert refused.startswith("denied: ") and "resources/read" in refused
    assert prompts is True  # what the policy does not deny still works
    assert [(c["tool"], c["decision"]) for c in structured["calls"]] == [
        ("resources/read", "denied"),
        ("prompts/list", "allowed"),
    ]


def minimal_env(home: Path) -> dict[str, str]:
    """What a desktop client gives the server it starts: HOME, PATH, USER, SHELL and TERM only."""
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/sh",
        "TERM": "dumb",
    }


@contextmanager
def serving_http(home: Path) -> Generator[str]:
    """``mcp-code-mode serve --http`` as a child with a minimal environment (its settings in the .env beside its
    servers file); the MCP endpoint's URL once /healthz answers."""
    config = write_config(home / "mcp_servers.json", {})
    (home / ".env").write_text(
        "CODE_MODE_CACHE_EMBEDDER=hashing\nCODE_MODE_ARTIFACT_TTL_S=2\nCODE_MODE_PYODIDE_POOL_SIZE=0\nCODE_MODE_EAGER_RUNNERS=none\n",
        encoding="utf-8",
    )
    port = free_port()
    argv = [str(Path(sys.executable).with_name("mcp-code-mode")), "serve", "--http", "--port", str(port)]
    log = home / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*argv, "--config", str(config)], stdin=subprocess.DEVNULL, stdout=sink, stderr=sink,
            env=minimal_env(home), cwd="/",
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text(encoding="utf-8", errors="replace")
            try:
                if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text(encoding="utf-8", errors="replace")
            time.sleep(0.05)  # polling a port: there is no event to wait on
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def test_over_http_only_the_session_that_ran_reads_its_artifact_and_only_until_its_ttl(
    tmp_path: Path,
) -> None:
    with serving_http(tmp_path) as url:
        async with http_client(url) as owner, http_client(url) as other:
            result, structured = await execute(owner, "open('a.txt', 'w').write('mine')", runner="cpython")
            assert structured["success"], structured["error"]
            uri = str(links(result)["a.txt"].uri)
            contents = (await owner.read_resource(uri)).contents[0]
            assert isinstance(contents, TextResourceContents) and contents.text == "mine"
            assert [str(r.uri) for r in (await owner.list_resources()).resources] == [uri]  # its recent artifacts
            assert (await other.list_resources()).resources == []
            with pytest.raises(MCPError, match="Unknown resource") as refused:
                await other.read_resource(uri)
            with pytest.raises(MCPError) as made_up:
                await other.read_resource(uri.replace("a.txt", "b.txt"))
            assert str(refused.value) == str(made_up.value).replace("b.txt", "a.txt")  # the same "not found"
            with anyio.fail_after(15):
                while True:  # readable until its TTL (2 s) has passed, then "not found" for its owner too
                    try:
                        await owner.read_resource(uri)
                    except MCPError as exc:
                        assert "Unknown resource" in str(exc)
                        break
                    await anyio.sleep(0.2)
