"""The server as a desktop MCP client starts it: over stdio, from anywhere, with only HOME, PATH, USER, SHELL
and TERM in its environment. Every runner runs a script that uses a downstream server, packages install
(uv and Deno behind this host's TLS-inspecting proxy trust the OS store), and validation works."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from ..conftest import filesystem_entry, fixture_entry, write_config

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("files").resolve()


@pytest.fixture(scope="module")
async def client(tmp_path_factory: pytest.TempPathFactory, files: Path) -> AsyncIterator[Client]:
    home = tmp_path_factory.mktemp("home")
    (files / "notes.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    config = write_config(
        home / "mcp_servers.json", {"filesystem": filesystem_entry(files), "fixture": fixture_entry()}
    )
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "USER": os.environ.get("USER", "root"),
        "SHELL": "/bin/sh",
        "TERM": "dumb",
    }
    params = StdioServerParameters(
        command=str(Path(sys.executable).with_name("mcp-code-mode")),
        args=["serve", "--config", str(config)],
        env=env,
        cwd="/",
    )
    with anyio.fail_after(600):
        async with Client(params, mode="legacy") as c:
            yield c


async def run(client: Client, **arguments: Any) -> dict[str, Any]:
    with anyio.fail_after(300):
        result = await client.call_tool("execute_code", {"timeout": 120000, **arguments})
    assert result.structured_content is not None
    return result.structured_content


READ = (
    "text = filesystem.read_text_file(path=PATH)\n"
    "text = text.get('content', text) if isinstance(text, dict) else text\n"
)


@pytest.mark.parametrize("runner", ["local", "cpython", "pyodide"])
async def test_each_python_runner_reads_through_the_filesystem_server(client: Client, files: Path, runner: str) -> None:
    code = f"PATH = {str(files / 'notes.txt')!r}\n" + READ + "text.split()"
    result = await run(client, language="python", runner=runner, code=code)
    assert result["success"], result["error"]
    assert result["returnValue"] == ["alpha", "beta"], result
    assert result["runner"] == runner


async def test_javascript_and_typescript_call_a_tool(client: Client) -> None:
    js = await run(client, language="javascript", code="export default await fixture.echo({ text: 'hi' });")
    assert js["success"], js["error"]
    assert "hi" in str(js["returnValue"])
    ts = await run(
        client, language="typescript", code="const n: number = 2;\nexport default (await fixture.add({ a: n, b: 3 }));"
    )
    assert ts["success"], ts["error"]
    assert "5" in str(ts["returnValue"])


async def test_packages_install_for_python_and_npm(client: Client) -> None:
    python = await run(client, language="python", runner="cpython", packages=["six"], code="import six\nsix.__name__")
    assert python["success"], python["error"]
    assert python["returnValue"] == "six"
    npm = await run(
        client,
        language="javascript",
        packages=["axios"],
        code="import axios from 'axios';\nexport default typeof axios.get;",
    )
    assert npm["success"], npm["error"]
    assert npm["returnValue"] == "function"


async def test_validate_code_reports_a_finding_for_each_language(client: Client) -> None:
    py = (await client.call_tool("validate_code", {"language": "python", "code": "fixture.nope()"})).structured_content
    assert py is not None and py["valid"] is False
    ts = await client.call_tool(
        "validate_code", {"language": "typescript", "code": "const x: number = 'a';\nexport default x;"}
    )
    assert ts.structured_content is not None and ts.structured_content["valid"] is False


SEED_TYPESCRIPT = """interface User {
  name: string;
  age: number;
  email?: string;
}
const users: User[] = [
  { name: "Alice", age: 30, email: "alice@example.com" },
  { name: "Bob", age: 25 }
];
users.forEach(user => {
  console.log(`${user.name} (${user.age}): ${user.email || 'No email'}`);
});"""

SEED_NUMPY = """import numpy as np
# Create array and perform calculations
data = np.array([1, 2, 3, 4, 5])
print(f"Mean: {np.mean(data)}")
print(f"Std Dev: {np.std(data)}")
print(f"Sum: {np.sum(data)}")"""

SEED_FILES = """# Write data to file in sandbox
with open('results.txt', 'w') as f:
    f.write('Processing complete!\\n')
    f.write('Total: 42\\n')
# Read it back
with open('results.txt', 'r') as f:
    print(f.read())"""

SEED_SCRAPING_OFFLINE = """from bs4 import BeautifulSoup
html = '<html><head><title>Example Domain</title></head><body></body></html>'
soup = BeautifulSoup(html, 'html.parser')
title = soup.find('title').text
print(f"Page title: {title}")"""


async def test_the_seed_examples_that_need_no_internet_run_on_the_default_runners(client: Client) -> None:
    """The original README's examples 3, 4, 6, and 5 on a page given inline (this host reaches no web site)."""
    ts = await run(client, language="typescript", code=SEED_TYPESCRIPT)
    assert ts["success"], ts["error"]
    assert ts["output"] == "Alice (30): alice@example.com\nBob (25): No email\n"
    numpy = await run(client, language="python", packages=["numpy"], code=SEED_NUMPY)
    assert numpy["success"], numpy["error"]
    assert numpy["output"] == "Mean: 3.0\nStd Dev: 1.4142135623730951\nSum: 15\n"
    files = await run(client, language="python", code=SEED_FILES)
    assert files["success"], files["error"]
    assert files["output"] == "Processing complete!\nTotal: 42\n\n"
    assert [(f["path"], f["size"]) for f in files["files"]] == [("results.txt", 31)]
    scraping = await run(client, language="python", packages=["beautifulsoup4"], code=SEED_SCRAPING_OFFLINE)
    assert scraping["success"], scraping["error"]
    assert scraping["output"] == "Page title: Example Domain\n"


async def test_a_file_the_script_leaves_is_a_link_read_back_over_stdio_and_its_png_comes_inline(client: Client) -> None:

    from mcp.types import ImageContent, ResourceLink, TextResourceContents

    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    code = f"import base64\nopen('dot.png', 'wb').write(base64.b64decode({png!r}))\nopen('n.txt', 'w').write('hi')"
    with anyio.fail_after(300):
        result = await client.call_tool("execute_code", {"language": "python", "runner": "cpython", "code": code})
        links = {b.name: b for b in result.content if isinstance(b, ResourceLink)}
        assert set(links) == {"dot.png", "n.txt"}, result.structured_content
        assert [b.data for b in result.content if isinstance(b, ImageContent)] == [png]
        text = (await client.read_resource(str(links["n.txt"].uri))).contents[0]
    assert isinstance(text, TextResourceContents) and text.text == "hi"
