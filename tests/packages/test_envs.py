"""Content-addressed environments installed with uv: once, atomically, with failures summarised."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from mcp_code_mode.errors import PackageError
from mcp_code_mode.packages import PythonEnvironments
from mcp_code_mode.packages.envs import COMPLETE

pytestmark = pytest.mark.anyio


async def test_an_environment_installs_once_and_is_reused(tmp_path: Path) -> None:
    envs = PythonEnvironments(tmp_path / "envs")
    first = await envs.ensure("cpython", ["six"])
    assert first.installed
    assert (first.path / "six.py").is_file()
    assert (first.path / COMPLETE).is_file()
    again = await envs.ensure("cpython", ["six"])
    assert not again.installed and again.path == first.path
    other_runner = await envs.ensure("local", ["six"])
    assert other_runner.path != first.path  # the key includes the runner
    assert envs.stats()["count"] == 2


async def test_concurrent_requests_for_the_same_set_install_once(tmp_path: Path) -> None:
    envs = PythonEnvironments(tmp_path / "envs")
    results = []

    async def ask() -> None:
        results.append(await envs.ensure("cpython", ["six==1.16.0"]))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(ask)
    assert sum(r.installed for r in results) == 1
    assert len({r.path for r in results}) == 1


def test_another_process_installing_the_same_set_is_waited_for_not_repeated(tmp_path: Path) -> None:
    code = (
        "import anyio, sys\nfrom pathlib import Path\nfrom mcp_code_mode.packages import PythonEnvironments\n"
        "env = anyio.run(PythonEnvironments(Path(sys.argv[1])).ensure, 'cpython', ['six==1.16.0'])\n"
        "print('INSTALLED' if env.installed else 'REUSED')\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "envs")], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert sorted(outputs) == ["INSTALLED", "REUSED", "REUSED"]


async def test_a_failed_install_leaves_no_half_made_environment_and_is_summarised(tmp_path: Path) -> None:
    envs = PythonEnvironments(tmp_path / "envs")
    with pytest.raises(PackageError) as info:
        await envs.ensure("cpython", ["six==0.0.0.404"])
    assert "installing six==0.0.0.404 failed" in str(info.value)
    assert len(str(info.value)) < 2000
    leftovers = [p.name for p in (tmp_path / "envs").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
    assert envs.stats()["count"] == 0


async def test_prune_removes_environments_unused_for_a_while(tmp_path: Path) -> None:
    envs = PythonEnvironments(tmp_path / "envs")
    old = await envs.ensure("cpython", ["six"])
    fresh = await envs.ensure("local", ["six"])
    past = time.time() - 3 * 86400
    os.utime(old.path / COMPLETE, (past, past))
    removed = envs.prune(unused_for=86400)
    assert len(removed) == 1 and old.key in removed[0]
    assert not old.path.exists() and fresh.path.exists()


INSTALL_SIX = (
    "import anyio, sys\nfrom pathlib import Path\nfrom mcp_code_mode.packages import PythonEnvironments\n"
    "env = anyio.run(PythonEnvironments(Path(sys.argv[1])).ensure, 'cpython', ['six'])\n"
    "print((env.path / 'six.py').is_file())\n"
)


def test_an_install_from_a_server_started_with_a_minimal_environment_trusts_the_system_certificates(
    tmp_path: Path,
) -> None:
    # What an MCP client passes a server it starts: no SSL_CERT_FILE, no proxy settings, an empty uv cache. Behind
    # a TLS-inspecting proxy (as here) uv's own bundle does not know the proxy's issuer; the OS store does.
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "USER": "nobody", "SHELL": "/bin/sh", "TERM": "dumb"}
    proc = subprocess.run(
        [sys.executable, "-c", INSTALL_SIX, str(tmp_path / "envs")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True"


def test_uv_gets_the_system_store_unless_told_otherwise_and_keeps_ssl_cert_file() -> None:
    from mcp_code_mode.packages.envs import uv_environment

    env = uv_environment({"PATH": "/bin", "SSL_CERT_FILE": "/etc/my-ca.pem", "UV_NATIVE_TLS": "0"})
    assert env == {"PATH": "/bin", "SSL_CERT_FILE": "/etc/my-ca.pem", "UV_NATIVE_TLS": "0", "UV_SYSTEM_CERTS": "1"}
