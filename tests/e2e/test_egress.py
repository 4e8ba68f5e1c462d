"""Networking through the egress proxy, as scripts use it, on every runner, with real traffic on this host.

The engine opens one loopback HTTP server to the proxy (``CODE_MODE_NETWORK_ALLOW_PRIVATE``, standing for an
internal API) and leaves another closed: each refusal is asserted in what the script saw (the rule named),
in the run's ``network`` figures, and in the server that never heard the request.
"""

from __future__ import annotations

import http.server
import re
import socket
import socketserver
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.engine import CodeMode

from ..conftest import fixture_entry, http_server, make_config, write_config

pytestmark = pytest.mark.anyio

MAX_CONNECTIONS = 8


@dataclass
class Upstream:
    port: int
    requests: list[str] = field(default_factory=list[str])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def upstream() -> Generator[Upstream]:
    """An HTTP server on the host's loopback: ``/hello`` answers JSON, ``/bytes/N`` sends N bytes."""
    state = Upstream(0)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            state.requests.append(self.path)
            if self.path.startswith("/bytes/"):
                size = int(self.path.rsplit("/", 1)[1])
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                chunk = b"x" * 65536
                try:
                    while size > 0:
                        self.wfile.write(chunk[: min(size, len(chunk))])
                        size -= len(chunk)
                except OSError:
                    pass
                return
            body = b'{"hello": "world"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    state.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def opened() -> Iterator[Upstream]:
    with upstream() as server:
        yield server


@pytest.fixture(scope="module")
def closed() -> Iterator[Upstream]:
    with upstream() as server:
        yield server


@pytest.fixture(scope="module")
async def cm(opened: Upstream, closed: Upstream, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CodeMode]:
    base = tmp_path_factory.mktemp("egress")
    config = make_config(
        {},
        workspace_dir=base / "runs",
        network_allow_private=f"127.0.0.1:{opened.port}",
        network_max_mb=1,
        network_max_connections=MAX_CONNECTIONS,
        pyodide_pool_size=1,
    )
    async with CodeMode(config) as engine:
        yield engine


def python_get(url: str) -> str:
    return (
        "import urllib.request\ntry:\n"
        f"    print(urllib.request.urlopen({url!r}, timeout=10).read().decode())\n"
        "except Exception as e:\n    print('failed:', e)\n"
    )


def javascript_get(url: str) -> str:
    answer = "r.status === 200 ? await r.text() : `failed: ${r.status} ${await r.text()}`"
    return f"const r = await fetch({url!r});\nconsole.log({answer});"


GETS = {"cpython": ("python", python_get), "deno": ("javascript", javascript_get)}


@pytest.mark.parametrize("runner", ["cpython", "deno"])
async def test_an_opened_address_is_reached_and_loopback_otherwise_refused_naming_the_rule(
    cm: CodeMode, opened: Upstream, closed: Upstream, runner: str
) -> None:
    language, get = GETS[runner]
    before = len(closed.requests)
    reached = await cm.execute(get(f"{opened.url}/hello"), language, runner=runner, cache="off")
    assert reached.success, reached.error
    assert reached.output == '{"hello": "world"}\n'
    assert reached.network is not None and reached.network.hosts == [f"127.0.0.1:{opened.port}"]
    assert reached.network.bytes_in > 0 and reached.network.bytes_out > 0

    refused = await cm.execute(get(f"{closed.url}/hello"), language, runner=runner, cache="off")
    assert refused.success, refused.error
    assert f"connection to 127.0.0.1:{closed.port} refused: 127.0.0.1 is loopback" in refused.output
    assert f"CODE_MODE_NETWORK_ALLOW_PRIVATE=127.0.0.1:{closed.port}" in refused.output
    assert refused.network is not None and refused.network.hosts == []
    rule = f"open it with CODE_MODE_NETWORK_ALLOW_PRIVATE=127.0.0.1:{closed.port}"
    assert refused.network.refused == [f"127.0.0.1:{closed.port}: 127.0.0.1 is loopback; {rule}"]
    assert len(closed.requests) == before


async def test_requests_and_httpx_work_unchanged_on_local_and_cpython(cm: CodeMode, opened: Upstream) -> None:
    code = (
        "import requests, httpx\n"
        f"a = requests.get('{opened.url}/hello').json()\nb = httpx.get('{opened.url}/hello').json()\n[a, b]"
    )
    for runner in ("local", "cpython"):
        result = await cm.execute(code, runner=runner, packages=["requests", "httpx"], cache="off")
        assert result.success, (runner, result.error)
        assert result.return_value == [{"hello": "world"}] * 2
        assert result.network is not None and result.network.hosts == [f"127.0.0.1:{opened.port}"]


async def test_axios_from_npm_goes_through_the_proxy(cm: CodeMode, opened: Upstream, closed: Upstream) -> None:
    code = (
        "import axios from 'axios';\n"
        f"const ok = (await axios.get('{opened.url}/hello')).data;\n"
        f"let refused = '';\ntry {{ await axios.get('{closed.url}/hello'); }} catch (e) {{ refused = String(e); }}\n"
        "export default [ok, refused];"
    )
    result = await cm.execute(code, "javascript", packages=["axios"], cache="off", timeout_ms=120_000)
    assert result.success, result.error
    assert result.return_value == [{"hello": "world"}, "AxiosError: Request failed with status code 403"]
    assert result.network is not None and len(result.network.refused) == 1


async def test_connect_to_a_port_that_is_not_opened_is_refused(cm: CodeMode, opened: Upstream) -> None:
    """``https://`` goes through ``CONNECT``: the opened address's other port is refused before any TLS."""
    other = opened.port + 1 if opened.port < 65535 else opened.port - 1
    code = (
        "import requests\ntry:\n"
        f"    requests.get('https://127.0.0.1:{other}/', timeout=10)\n"
        "except requests.exceptions.ProxyError as e:\n    print('ProxyError', e)"
    )
    result = await cm.execute(code, runner="cpython", packages=["requests"], cache="off")
    assert result.success, result.error
    assert result.output.startswith("ProxyError")
    assert f"403 connection to 127.0.0.1:{other} refused: 127.0.0.1 is loopback" in result.output
    assert result.network is not None and result.network.refused[0].startswith(f"127.0.0.1:{other}: ")


async def test_a_refused_tunnel_in_deno_fetch_names_the_host_and_the_rule(cm: CodeMode, opened: Upstream) -> None:
    """Deno alone reports a refused ``CONNECT`` as "unsuccessful tunnel": the worker asks the proxy why."""
    other = opened.port + 1 if opened.port < 65535 else opened.port - 1
    code = f"try {{ await fetch('https://127.0.0.1:{other}/'); }} catch (e) {{ console.log(String(e)); }}"
    result = await cm.execute(code, "javascript", cache="off")
    assert result.success, result.error
    assert result.output.startswith(f"TypeError: fetch failed: connection to 127.0.0.1:{other} refused: ")
    assert f"CODE_MODE_NETWORK_ALLOW_PRIVATE=127.0.0.1:{other}" in result.output
    assert result.network is not None and len(result.network.refused) == 1  # asking why is not a connection


@pytest.mark.parametrize("name", ["localhost", socket.gethostname()])
async def test_a_name_that_resolves_to_a_private_address_is_refused(cm: CodeMode, closed: Upstream, name: str) -> None:
    result = await cm.execute(python_get(f"http://{name}:{closed.port}/hello"), runner="cpython", cache="off")
    assert result.success, result.error
    assert result.output.startswith(f"failed: HTTP Error 403: connection to {name}:{closed.port} refused: ")
    assert re.search(r"refused: \S+ is (loopback|a private network)", result.output), result.output
    assert result.network is not None and result.network.hosts == []


async def test_the_byte_cap_ends_a_download_and_the_result_says_so(cm: CodeMode, opened: Upstream) -> None:
    code = (
        "import urllib.request\ngot = 0\ntry:\n"
        f"    with urllib.request.urlopen('{opened.url}/bytes/3000000', timeout=20) as r:\n"
        "        while chunk := r.read(65536):\n            got += len(chunk)\n"
        "except Exception as e:\n    print(type(e).__name__)\ngot"
    )
    result = await cm.execute(code, runner="cpython", cache="off")
    assert result.success, result.error
    assert isinstance(result.return_value, int) and 0 < result.return_value < 3_000_000  # cut short
    network = result.network
    assert network is not None and network.limit is not None and "CODE_MODE_NETWORK_MAX_MB" in network.limit
    assert (1 << 20) <= network.bytes_in + network.bytes_out < (1 << 20) + 4 * 65536


async def test_the_connection_cap_refuses_the_next_connection(cm: CodeMode, opened: Upstream) -> None:
    code = (
        "import urllib.request\nout = []\n"
        f"for i in range({MAX_CONNECTIONS + 3}):\n    try:\n"
        f"        out.append(urllib.request.urlopen('{opened.url}/hello', timeout=10).status)\n"
        "    except Exception as e:\n        out.append(str(e))\nout"
    )
    result = await cm.execute(code, runner="cpython", cache="off")
    assert result.success, result.error
    answers = result.return_value
    assert isinstance(answers, list)
    assert answers[:MAX_CONNECTIONS] == [200] * MAX_CONNECTIONS
    assert all("CODE_MODE_NETWORK_MAX_CONNECTIONS" in str(a) for a in answers[MAX_CONNECTIONS:]), answers
    assert result.network is not None and "CODE_MODE_NETWORK_MAX_CONNECTIONS" in (result.network.limit or "")


async def test_a_run_that_names_its_hosts_reaches_only_those(cm: CodeMode, opened: Upstream) -> None:
    code = python_get(f"{opened.url}/hello")
    mine = await cm.execute(code, runner="cpython", allow_networking=[f"127.0.0.1:{opened.port}"], cache="off")
    assert mine.output == '{"hello": "world"}\n'
    other = await cm.execute(code, runner="cpython", allow_networking=["api.example.com"], cache="off")
    assert "is not among the hosts the run's allowNetworking names" in other.output
    assert other.network is not None and other.network.hosts == []


async def test_the_sandbox_shows_none_of_the_hosts_sockets_and_its_own_listener_is_unreachable(
    cm: CodeMode, opened: Upstream
) -> None:
    listing = await cm.execute(
        "open('/proc/net/tcp').read() + open('/proc/net/tcp6').read()", runner="cpython", cache="off"
    )
    assert listing.success, listing.error
    assert f":{opened.port:04X} " not in str(listing.return_value)  # the host's listener is not there

    ports: list[int] = []

    async def seen(text: str) -> None:
        ports.extend(int(p) for p in re.findall(r"listening (\d+)", text))

    code = (
        "import socket, time\ns = socket.socket()\ns.bind(('0.0.0.0', 0))\ns.listen()\n"
        "print('listening', s.getsockname()[1], flush=True)\ntime.sleep(3)"
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: cm.execute(code, runner="cpython", cache="off", on_output=seen))
        with anyio.fail_after(10):
            while not ports:
                await anyio.sleep(0.05)
        with pytest.raises(OSError):
            await anyio.connect_tcp("127.0.0.1", ports[0])


async def test_pyodide_scripts_reach_nothing_even_with_networking_allowed(cm: CodeMode, opened: Upstream) -> None:
    before = len(opened.requests)
    code = (
        python_get(f"{opened.url}/hello")
        + f"import micropip\ntry:\n    await micropip.install('{opened.url}/evil-1.0-py3-none-any.whl')\n"
        "except Exception as e:\n    print('micropip:', type(e).__name__)"
    )
    result = await cm.execute(code, runner="pyodide", allow_networking=True, cache="off")
    assert result.success, result.error
    assert result.output.startswith("failed: ") and "micropip: " in result.output
    assert len(opened.requests) == before


async def test_a_runs_gate_is_gone_once_it_ends(cm: CodeMode, opened: Upstream) -> None:
    """Nothing left behind by a run can use the next one's network: the socket exists only during a run."""
    runner = cm.runners["cpython"]
    result = await cm.execute(python_get(f"{opened.url}/hello"), runner="cpython", cache="off")
    assert result.success
    await runner.ready()  # the zygote is back in its pool, ready for another run
    gates = [w.spec.egress for w in runner.pool.idle_workers if w.spec.egress is not None]  # pyright: ignore[reportAttributeAccessIssue]
    assert gates and all(not any(Path(g).iterdir()) for g in gates)


async def test_the_executors_own_http_endpoint_is_refused(tmp_path: Path, cm: CodeMode) -> None:
    """A token-less ``serve --http`` on loopback: a script must not reach it (it would read every client's cache)."""
    config = write_config(tmp_path / "servers.json", {"fixture": fixture_entry()})
    with http_server(config, tmp_path / "server.log") as running:
        url = running.url
        body = '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
        code = (
            "import urllib.request\ntry:\n"
            f"    urllib.request.urlopen(urllib.request.Request({url!r}, data={body!r}.encode()), timeout=10)\n"
            "except Exception as e:\n    print(e)"
        )
        result = await cm.execute(code, runner="cpython", cache="off")
        js = await cm.execute(javascript_get(url), "javascript", cache="off")
    port = url.split(":")[2].split("/")[0]
    assert f"connection to 127.0.0.1:{port} refused: 127.0.0.1 is loopback" in result.output
    assert js.output.startswith("failed: 403 connection to 127.0.0.1")
    assert "POST /mcp" not in running.log_text()


async def test_a_gate_belongs_to_its_workers_uid_alone(cm: CodeMode, opened: Upstream) -> None:
    """As root, the gate's directory and socket are the worker's uid's, mode 0500 and 0600: another local user
    (another worker's uid among them) cannot use a run's egress."""
    import os
    import stat

    if os.geteuid() != 0:
        pytest.skip("as another user the gate is simply this user's (mkdtemp's 0700)")
    runner = cm.runners["cpython"]
    await runner.ready()
    specs = [w.spec for w in runner.pool.idle_workers if w.spec.egress is not None]  # pyright: ignore[reportAttributeAccessIssue]
    assert specs
    for spec in specs:
        info = os.stat(spec.egress)
        assert info.st_uid == spec.uid and stat.S_IMODE(info.st_mode) == 0o500
    code = (
        "import os, stat\ns = os.stat('/sandbox/egress/proxy.sock')\n"
        "[s.st_uid == os.getuid(), oct(stat.S_IMODE(s.st_mode))]"
    )
    result = await cm.execute(code, runner="cpython", cache="off")
    assert result.return_value == [True, "0o600"]
