"""TLS behind a TLS-inspecting proxy, with the server started the way desktop clients start it.

Deno has its own certificate bundle: unless told to use the operating system's store (where such a proxy's
CA is installed) every `deno cache` of an npm package fails with ``UnknownIssuer``. And a worker that is
handed ``NODE_EXTRA_CA_CERTS`` fails every TLS request of a script with ``NotCapable`` (Deno's node layer
asks for the "sys" permission to read it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.packages import Whitelist
from mcp_code_mode.runners.deno import DenoRunner, deno_env, tls_env
from mcp_code_mode.sandbox import detect_sandbox

from ..conftest import fixture_entry, make_config

pytestmark = pytest.mark.anyio

SYSTEM_BUNDLE = next(
    (p for p in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt") if Path(p).is_file()), None
)
MINIMAL_ENV = ("HOME", "PATH", "USER", "SHELL", "TERM")


def test_deno_trusts_the_system_store_and_one_named_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "extra.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n", encoding="utf-8")
    assert tls_env({}) == {"DENO_TLS_CA_STORE": "system,mozilla"}
    assert tls_env({"NODE_EXTRA_CA_CERTS": str(bundle)}) == {
        "DENO_TLS_CA_STORE": "system,mozilla",
        "DENO_CERT": str(bundle),
    }
    assert tls_env({"SSL_CERT_FILE": str(bundle), "DENO_CERT": "/missing"})["DENO_TLS_CA_STORE"] == "system,mozilla"
    assert "DENO_CERT" not in tls_env({"DENO_CERT": str(tmp_path / "missing.pem")})


def test_a_worker_is_never_handed_node_extra_ca_certs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", str(SYSTEM_BUNDLE or "/etc/hosts"))
    env = deno_env(tmp_path)
    assert "NODE_EXTRA_CA_CERTS" not in env
    assert env["DENO_TLS_CA_STORE"] == "system,mozilla"


@pytest.mark.skipif(SYSTEM_BUNDLE is None, reason="no system CA bundle on this host")
async def test_a_script_makes_tls_requests_when_the_server_has_node_extra_ca_certs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", str(SYSTEM_BUNDLE))
    config = make_config({"fixture": fixture_entry()}, workspace_dir=tmp_path)
    code = (
        'import https from "node:https";\n'
        "const outcome = await new Promise((ok) => {\n"
        '  const req = https.get("https://127.0.0.1:9/", () => ok("answered"));\n'
        '  req.on("error", (e) => ok(String(e)));\n'
        "});\n"
        "console.log(outcome);"
    )
    async with CodeMode(config) as cm:
        result = await cm.execute(code, "javascript", timeout_ms=20000)
    assert result.success, result.error
    assert "NotCapable" not in result.output
    assert "ECONNREFUSED" in result.output  # the request was made: nothing listens on port 9


async def test_npm_packages_install_with_a_desktop_clients_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in list(os.environ):
        if name not in MINIMAL_ENV:
            monkeypatch.delenv(name)
    settings = make_config({}, workspace_dir=tmp_path).settings
    runner = DenoRunner(
        sandbox=detect_sandbox(settings),
        pool_size=0,
        deno_dir=tmp_path / "deno",
        whitelist=Whitelist.load(settings.allowed_packages),
    )
    problem = await runner.ensure_cached(["npm:ms@2.1.3"])
    assert problem is None
    assert any((tmp_path / "deno").rglob("ms"))
