"""Every runner against test hosts in network namespaces of the suite's own (``tests/egress/netns.py``): the
host opened with ``CODE_MODE_NETWORK_ALLOW_PRIVATE`` is reached through the proxy; another host of the same
private range, and the opened host's other port, are refused, and their servers hear nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from mcp_code_mode.engine import CodeMode

from ..conftest import make_config
from ..egress.conftest import netns_host, netns_other_host  # noqa: F401  # pyright: ignore[reportUnusedImport]  (fixtures)
from ..egress.netns import NetnsHost

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def cm(netns_host: NetnsHost, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:  # noqa: F811
    config = make_config(
        {},
        workspace_dir=tmp_path_factory.mktemp("egress-netns") / "runs",
        network_allow_private=netns_host.authority(),
        pyodide_pool_size=1,
    )
    async with CodeMode(config) as engine:
        yield engine


def script(runner: str, url: str) -> tuple[str, str, list[str]]:
    """(language, code, packages): fetch ``url`` as a script on ``runner`` would, printing the answer or why not."""
    if runner == "deno":
        code = (
            f"try {{ const r = await fetch({url!r}); console.log(r.status, await r.text()); }}\n"
            "catch (e) { console.log('failed', String(e)); }"
        )
        return "javascript", code, []
    if runner == "local":
        code = f"import requests\ntry:\n    r = requests.get({url!r}, timeout=10)\n    print(r.status_code, r.text)\n"
        code += "except requests.RequestException as e:\n    print('failed', e)"
        return "python", code, ["requests"]
    code = (
        "import urllib.request, urllib.error\ntry:\n"
        f"    r = urllib.request.urlopen({url!r}, timeout=10)\n    print(r.status, r.read().decode())\n"
        "except (urllib.error.URLError, OSError) as e:\n    print('failed', e)"
    )
    return "python", code, []


@pytest.mark.parametrize("runner", ["local", "cpython", "deno"])
async def test_the_opened_host_is_reached_and_the_other_private_host_refused(
    cm: CodeMode,
    netns_host: NetnsHost,  # noqa: F811
    netns_other_host: NetnsHost,  # noqa: F811
    runner: str,
) -> None:
    seen, other_seen = len(netns_host.requests()), len(netns_other_host.requests())
    language, code, packages = script(runner, netns_host.url("/hello"))
    reached = await cm.execute(code, language, runner=runner, packages=packages, cache="off")
    assert reached.success, reached.error
    assert reached.output.startswith("200 ") and netns_host.name in reached.output
    assert reached.network is not None and reached.network.hosts == [netns_host.authority()]
    requests = netns_host.requests()[seen:]
    assert [r["path"] for r in requests] == ["/hello"]
    assert requests[0]["peer"] == netns_host.gateway  # from the host's proxy, not from inside a sandbox

    language, code, packages = script(runner, netns_other_host.url("/hello"))
    refused = await cm.execute(code, language, runner=runner, packages=packages, cache="off")
    assert refused.success, refused.error
    rule = f"{netns_other_host.address} is a private network (RFC 1918)"
    assert f"connection to {netns_other_host.authority()} refused: {rule}" in refused.output
    assert refused.network is not None and refused.network.hosts == []
    assert len(netns_other_host.requests()) == other_seen


@pytest.mark.parametrize("runner", ["cpython", "deno"])
async def test_connect_to_the_opened_hosts_other_port_is_refused(
    cm: CodeMode,
    netns_host: NetnsHost,  # noqa: F811
    runner: str,
) -> None:
    other = netns_host.ports[1]
    seen = len(netns_host.requests(other))
    language, code, packages = script(runner, f"https://{netns_host.address}:{other}/hello")
    result = await cm.execute(code, language, runner=runner, packages=packages, cache="off")
    assert result.success, result.error
    assert f"connection to {netns_host.address}:{other} refused: " in result.output
    assert result.network is not None and result.network.refused[0].startswith(f"{netns_host.address}:{other}: ")
    assert len(netns_host.requests(other)) == seen


async def test_pyodide_reaches_not_even_the_opened_host(cm: CodeMode, netns_host: NetnsHost) -> None:  # noqa: F811
    seen = len(netns_host.requests())
    language, code, _ = script("pyodide", netns_host.url("/hello"))
    result = await cm.execute(code, language, runner="pyodide", allow_networking=True, cache="off")
    assert result.success, result.error
    assert result.output.startswith("failed")
    assert len(netns_host.requests()) == seen
