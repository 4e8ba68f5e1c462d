"""The escape suite: one test per technique, each against the local and the cpython runner.

Every test asserts that nothing happened: no planted secret in any part of the result, no file
written outside the workspace, no connection counted by the loopback listener, the host alive, and
the next run clean. Whether the attempt fails at the interpreter (local) or at the OS (both) does
not matter; that it fails does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from mcp_code_mode.engine import CodeMode, RunResult
from mcp_code_mode.runners.sandboxed.cm_egress import PROXY_VARIABLES

from ..fixtures.loopback import Listener
from .conftest import Planted, assert_nothing_leaked

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Technique:
    name: str
    code: str
    """Formatted with: secret_file, dotenv_file, canary, home_file, port, host_pid."""


TECHNIQUES = [
    # --- reading host files outside the workspace ---
    Technique("read_etc_passwd", "print(open('/etc/passwd').read())"),
    Technique("read_etc_shadow", "print(open('/etc/shadow').read())"),
    Technique("read_project_dotenv", "print(open({dotenv_file!r}).read())"),
    Technique("read_secret_file_outside_workspace", "print(open({secret_file!r}).read())"),
    Technique("read_file_in_home", "print(open({home_file!r}).read())"),
    Technique("relative_traversal", "print(open('../../../../../../' + {secret_file!r}).read())"),
    Technique(
        "symlink_to_outside_file",
        "import os\nos.symlink({secret_file!r}, 'link')\nprint(open('link').read())",
    ),
    Technique(
        "walk_the_whole_filesystem_for_secrets",
        "import os\nfound = []\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('/proc', '/sys', '/dev', '/usr')]\n"
        "    for f in files:\n"
        "        p = os.path.join(root, f)\n"
        "        try:\n"
        "            if os.path.getsize(p) < 200000: found.append(open(p, errors='ignore').read())\n"
        "        except OSError: pass\n"
        "print(''.join(found))",
    ),
    Technique("list_home_and_project", "import os\nprint(os.listdir(os.path.dirname({dotenv_file!r})))"),
    # --- the host's environment ---
    Technique("environment_variables", "import os\nprint(dict(os.environ))"),
    Technique("proc_self_environ", "print(open('/proc/self/environ').read())"),
    Technique("proc_parent_environ", "import os\nprint(open(f'/proc/{{os.getppid()}}/environ').read())"),
    Technique(
        "proc_all_environ",
        "import os\nfor p in os.listdir('/proc'):\n"
        "    try: print(open(f'/proc/{{p}}/environ').read())\n    except Exception: pass",
    ),
    Technique("host_pid_environ", "print(open('/proc/{host_pid}/environ').read())"),
    # --- escaping the interpreter ---
    Technique(
        "subclass_walk_to_popen",
        "sub = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen'][0]\n"
        "print(sub(['cat', {secret_file!r}], stdout=-1).communicate())",
    ),
    Technique(
        "builtins_via_frames", "import sys\nb = sys._getframe().f_builtins\nprint(b['open']({secret_file!r}).read())"
    ),
    Technique(
        "builtins_via_traceback",
        "try:\n    1/0\nexcept Exception as e:\n"
        "    g = e.__traceback__.tb_frame.f_globals\n    print(g['__builtins__'])\n",
    ),
    Technique(
        "generator_frame_globals",
        "g = (x for x in [1])\nfg = g.gi_frame.f_globals\nprint(fg['builtins'].open({secret_file!r}).read())",
    ),
    Technique(
        "format_string_field_path",
        "print('{{0.__init__.__globals__}}'.format(call_tool))\n"
        "print('{{0.__class__.__base__.__subclasses__}}'.format(()))",
    ),
    Technique(
        "ctypes_libc",
        "import ctypes\nlibc = ctypes.CDLL(None)\nfd = libc.open({canary!r}.encode(), 0o101, 0o644)\n"
        "print(fd, libc.system(b'cat ' + {secret_file!r}.encode()))",
    ),
    Technique("sys_modules", "import sys\nos = sys.modules['os']\nprint(os.popen('cat ' + {secret_file!r}).read())"),
    Technique(
        "importlib_import_module",
        "import importlib\nos = importlib.import_module('os')\nprint(os.popen('cat ' + {secret_file!r}).read())",
    ),
    Technique("dunder_import", "print(__import__('os').popen('cat ' + {secret_file!r}).read())"),
    Technique("eval_exec_compile", 'exec("print(open(" + repr({secret_file!r}) + ").read())")'),
    Technique("getattr_dunder", "print(getattr(getattr((), '__class__'), '__subclasses__'))"),
    Technique("subprocess_shell", "import subprocess\nprint(subprocess.run('cat ' + {secret_file!r}, shell=True))"),
    # --- writing outside the workspace ---
    Technique("write_host_path", "open({canary!r}, 'w').write('escaped')"),
    Technique(
        "write_through_symlinked_directory",
        "import os\nos.symlink(os.path.dirname({canary!r}), 'out')\n"
        "open('out/' + os.path.basename({canary!r}), 'w').write('x')",
    ),
    Technique("write_system_library", "open('/usr/lib/escaped.txt', 'w').write('x')"),
    # --- the network, with networking off ---
    Technique(
        "connect_loopback", "import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint(s)"
    ),
    Technique(
        "http_to_loopback",
        "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2).read())",
    ),
    # --- processes and privileges ---
    Technique("signal_the_host", "import os, signal\nos.kill({host_pid}, signal.SIGKILL)"),
    Technique("signal_every_process", "import os, signal\nos.kill(-1, signal.SIGKILL)"),
    Technique("read_parent_memory", "import os\nprint(open(f'/proc/{{os.getppid()}}/mem', 'rb').read(16))"),
    Technique("become_root", "import os\nos.setuid(0)\nprint(open({secret_file!r}).read())"),
    Technique(
        "mount_via_unshare",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno())\n"
        "print(libc.mount(b'/', b'/tmp', None, 4096, None), ctypes.get_errno())\n"
        "print(open('/tmp' + {secret_file!r}).read())",
    ),
    Technique("raw_block_device", "import os\nprint(os.listdir('/dev'))\nprint(open('/dev/sda', 'rb').read(512))"),
]


def _ids() -> list[str]:
    return [t.name for t in TECHNIQUES]


@pytest.mark.parametrize("runner", ["local", "cpython"])
@pytest.mark.parametrize("technique", TECHNIQUES, ids=_ids())
async def test_escape_attempt_achieves_nothing(
    attacked: CodeMode, planted: Planted, listener: Listener, technique: Technique, runner: str
) -> None:
    before = listener.connections
    code = technique.code.format(
        secret_file=str(planted.secret_file),
        dotenv_file=str(planted.dotenv_file),
        canary=str(planted.canary),
        home_file=str(planted.home_file),
        port=listener.port,
        host_pid=os.getpid(),
    )
    result = await attacked.execute(code, runner=runner, allow_networking=False, timeout_ms=15000)
    assert_nothing_leaked(result, planted)
    assert listener.connections == before, "a script reached a loopback listener with networking off"
    after = await attacked.execute("print('next run')", runner=runner)
    assert after.success and after.output == "next run\n", after.error


async def test_a_network_attempt_fails_at_once_with_a_clear_error(attacked: CodeMode, listener: Listener) -> None:
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener.port}), timeout=20)"
    result = await attacked.execute(code, runner="cpython", allow_networking=False)
    assert not result.success
    assert result.error is not None and result.error.type in ("OSError", "ConnectionRefusedError")
    assert "unreachable" in result.error.message or "refused" in result.error.message
    assert result.execution_time < 2000


async def test_with_networking_allowed_a_direct_connection_to_the_hosts_loopback_reaches_nothing(
    attacked: CodeMode, listener: Listener
) -> None:
    """The sandbox has its own loopback whatever the run may do: the host's listener is not there."""
    before = listener.connections
    code = (
        "import socket\ntry:\n"
        f"    socket.create_connection(('127.0.0.1', {listener.port}), timeout=5).close()\n    print('connected')\n"
        "except OSError as e:\n    print(type(e).__name__)"
    )
    result = await attacked.execute(code, runner="cpython", allow_networking=True)
    assert result.success, result.error
    assert result.output == "ConnectionRefusedError\n"
    assert listener.connections == before


async def test_the_script_sees_only_an_allow_listed_environment(attacked: CodeMode) -> None:
    result = await attacked.execute("import os\ndict(os.environ)", runner="cpython")
    env = result.return_value
    assert isinstance(env, dict)
    assert set(env) <= {
        "PATH",
        "LANG",
        "LC_ALL",
        "HOME",
        "TMPDIR",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "PWD",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        *PROXY_VARIABLES,  # a run with the network: they name its forwarder to the host's egress proxy
    }
    assert env["HOME"] == "/workspace"
    assert {env[name] for name in PROXY_VARIABLES} == {env["HTTP_PROXY"]}
    assert env["HTTP_PROXY"].startswith("http://127.0.0.1:")
    offline = (
        await attacked.execute("import os\nsorted(os.environ)", runner="cpython", allow_networking=False)
    ).return_value
    assert isinstance(offline, list) and not set(offline) & set(PROXY_VARIABLES)


async def test_the_script_runs_as_an_unprivileged_user_without_capabilities(attacked: CodeMode) -> None:
    code = (
        "import os\nstatus = open('/proc/self/status').read()\n"
        "caps = [l for l in status.splitlines() if l.startswith(('CapEff', 'CapPrm', 'NoNewPrivs'))]\n"
        "{'uid': os.getuid(), 'caps': caps}"
    )
    result = await attacked.execute(code, runner="cpython")
    assert result.success, result.error
    assert result.return_value["uid"] != 0
    assert "CapEff:\t0000000000000000" in result.return_value["caps"]
    assert "NoNewPrivs:\t1" in result.return_value["caps"]


async def test_another_runs_workspace_is_invisible(attacked: CodeMode, planted: Planted) -> None:
    import anyio

    marker = planted.file + "-in-another-workspace"
    holder = (
        f"open('held.txt', 'w').write({marker!r})\nprint('holding', flush=True)\n"
        "import time\ntime.sleep(30)\nprint('held')"
    )
    seeker = (
        "import os\nseen, found = 0, False\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('/proc', '/sys', '/dev', '/usr')]\n"
        "    for f in files:\n"
        "        try:\n"
        "            if 'held' in f or os.path.getsize(os.path.join(root, f)) < 100000:\n"
        "                seen += 1\n"
        f"                found = found or {marker!r} in open(os.path.join(root, f), errors='ignore').read()\n"
        "        except OSError: pass\n"
        "print(seen)\n"
        "found"
    )
    holding = anyio.Event()
    output: list[str] = []
    results: list[RunResult] = []

    async def on_output(text: str) -> None:
        output.append(text)
        if "holding" in "".join(output):
            holding.set()

    async def hold(cancel: anyio.CancelScope) -> None:
        with cancel:
            await attacked.execute(holder, runner="cpython", on_output=on_output, timeout_ms=60000)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            cancel = anyio.CancelScope()
            tg.start_soon(hold, cancel)
            await holding.wait()  # the holder's file exists now, in its own workspace, for as long as it sleeps
            results.append(await attacked.execute(seeker, runner="cpython", timeout_ms=20000))
            cancel.cancel()  # the holder's worker is killed; it never prints 'held'
    assert results[0].success, results[0].error
    assert results[0].return_value is False
    assert "".join(output) == "holding\n"  # the holder was still running, its file in place, all along
