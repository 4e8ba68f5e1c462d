"""The worker program of the ``local`` and ``cpython`` runners: a zygote that forks one child per run.

It is started as a plain script (``python -I worker.py KIND ...``, under bubblewrap where it can
run), imports only the standard library (and, for ``local``, smolagents' interpreter), and talks to
the host over JSON lines on duplicates of its original stdin and stdout (see ``mcp_code_mode.bridge``);
fds 0 and 1 are pointed at /dev/null, so nothing a script writes can be mistaken for a message.

The zygote never runs a script. It drops to its sandbox uid first (``--drop``), makes itself
undumpable, then waits. For each ``run`` it compiles the stubs if they changed and forks: the child
(a new session) applies the run's rlimits, runs the script with a copy-on-write copy of the warm
interpreter, reports ``started`` and ``done`` itself, and exits. The zygote then kills everything the
run left (every process of its uid inside the sandbox's pid namespace, or the child's process group
without one), reports ``exit``, wipes the workspace and /tmp, and says ``ready`` again. So every run
starts from the same pristine state in about a millisecond instead of paying interpreter start-up.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import json
import os
import resource
import shutil
import signal
import stat
import sys
from typing import Any

# The sibling modules (cm_protocol, cm_interpreters) are found next to this file, in or out of a sandbox.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cm_interpreters import import_interpreter, patch_line_tracking, run_cpython, run_local
from cm_protocol import Channel, Output, jsonable


@functools.cache
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int | bytes) -> None:
    import ctypes

    if _libc().prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` for good: no groups, no capabilities, no way back, no new privileges."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("the sandbox could not drop privileges")
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:
        raise SystemExit("the sandbox could regain root: refusing to run")
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS: setuid binaries and file capabilities stay inert


def apply_limits(limits: dict[str, int]) -> None:
    names = {
        "as": resource.RLIMIT_AS,
        "cpu": resource.RLIMIT_CPU,
        "fsize": resource.RLIMIT_FSIZE,
        "nofile": resource.RLIMIT_NOFILE,
        "nproc": resource.RLIMIT_NPROC,
    }
    for key, value in limits.items():
        if key in names and value > 0:
            resource.setrlimit(names[key], (value, value))


def _wipe(directory: str) -> None:
    """Remove everything in ``directory``, including what a script made unwritable."""

    def retry(function: Any, path: str, _: Any) -> None:
        try:
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
            function(path)
        except OSError:
            pass

    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(directory, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=retry)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def _exit_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exit code {os.WEXITSTATUS(status)}"


WAITING_NAME = "cm-waiting"
RUNNING_NAME = "cm-run"
"""The process names (``/proc/PID/comm``, what ``ps`` shows) of a pre-forked child, before and during its run."""


def _name(name: str) -> None:
    """Set this process's name (PR_SET_NAME). Not through /proc/self/comm: an undumpable process's
    /proc files belong to root."""
    try:
        _prctl(15, name.encode())
    except (OSError, AttributeError):  # no prctl (macOS): the name is only for people and tests
        pass


def _await_run(reader: int) -> dict[str, Any] | None:
    """In a pre-forked child: the run message the zygote hands over, or None if it closed the pipe."""
    chunks: list[bytes] = []
    while True:
        chunk = os.read(reader, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(reader)
    return json.loads(b"".join(chunks)) if chunks else None


def _child(channel: Channel, kind: str, reader: int, stubs: dict[str, Any], workspace: str) -> None:
    """Wait (forked ahead of time) for one run, run it in this process, report it, and exit."""
    os.setsid()
    os.chdir(workspace)
    _name(WAITING_NAME)
    channel.forget_buffered()
    output = Output(channel, 0)  # ready before the run arrives: its cap comes with the message
    output.start_flusher()
    message = _await_run(reader)
    if message is None:
        return
    _name(RUNNING_NAME)
    channel.send({"op": "started", "pid": os.getpid()})
    limits = message.get("limits")
    if isinstance(limits, dict):
        apply_limits({str(k): int(v) for k, v in limits.items()})
    output.arm(int(message.get("max_output", 100_000)))
    channel.output = output

    def call_tool(server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """Call any tool by its server and tool names."""
        return channel.call(server, tool, {} if arguments is None else arguments)

    tools = {name: stubs[name] for name in message.get("namespaces", []) if name in stubs}
    tools["call_tool"] = call_tool
    if kind == "cpython":
        result = run_cpython(message["code"], tools, output)
    else:
        result = run_local(message["code"], tools, output, workspace, list(message.get("imports", [])))
    cap = int(message.get("max_output", 100_000))
    result["returnValue"], cut = jsonable(result.pop("value", None), cap)
    result["files"] = _list_files(workspace)
    result["dropped"] = output.dropped + (1 if cut else 0)
    output.finish({"op": "done", **result})  # the last output and done in one write


def _list_files(workspace: str, limit: int = 200) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(workspace):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                files.append({"path": os.path.relpath(path, workspace), "size": os.lstat(path).st_size})
            except OSError:
                continue
            if len(files) >= limit:
                return files
    return files


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="worker.py")
    parser.add_argument("kind", nargs="?", default="local", choices=["local", "cpython"])
    parser.add_argument("--preload", action="append", default=[], help="modules to import before the first run")
    parser.add_argument("--workspace", default=None, help="the run's working directory")
    parser.add_argument("--sys-path", action="append", default=[], help="directories to put on sys.path")
    parser.add_argument("--drop", default=None, help="UID:GID to become before anything else")
    parser.add_argument("--pidns", action="store_true", help="in a pid namespace: clean up with kill(-1)")
    parser.add_argument("--probe", action="store_true", help="check the sandbox works, print sandbox-ok, exit")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.drop:
        uid, gid = (int(part) for part in args.drop.split(":"))
        drop_privileges(uid, gid)
    if args.pidns:
        _prctl(4, 0)  # PR_SET_DUMPABLE=0: a run (same uid) cannot ptrace or read this zygote's memory
    for path in reversed([p for entry in args.sys_path for p in entry.split(":") if p]):
        sys.path.insert(0, path)
    if args.kind == "local":
        import_interpreter()
        patch_line_tracking()
    if args.probe:
        print("sandbox-ok", os.getuid())
        return
    channel = Channel()
    workspace = os.path.realpath(args.workspace or os.getcwd())
    for name in [n for entry in args.preload for n in entry.split(",") if n]:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if args.kind == "local":
            from smolagents import local_python_executor as lpe

            lpe.get_safe_module(module, [])

    stub_namespace: dict[str, Any] = {}
    stub_version: int | None = None

    def _call(server: str, tool: str, required: dict[str, Any], optional: dict[str, Any]) -> Any:
        arguments = dict(required)
        arguments.update({k: v for k, v in optional.items() if v is not None})
        return channel.call(server, tool, arguments)

    def compile_stubs(source: str, version: int) -> None:
        nonlocal stub_namespace, stub_version
        namespace: dict[str, Any] = {"__name__": "mcp_code_mode_stubs", "_call": _call}
        exec(compile(source, "<tool stubs>", "exec"), namespace)
        stub_namespace, stub_version = namespace, version

    def prefork() -> tuple[int, int]:
        """Fork the next run's child now, off the run's path; it waits for its message on a pipe."""
        gc.freeze()  # the child's collections then leave the zygote's objects (and their pages) alone
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(writer)
                _child(channel, args.kind, reader, stub_namespace, workspace)
            finally:
                os._exit(0)
        os.close(reader)
        return pid, writer

    def discard(child: tuple[int, int]) -> None:
        os.close(child[1])  # the child reads end-of-file and exits
        os.waitpid(child[0], 0)

    pending = prefork()
    channel.send({"op": "ready", "pid": os.getpid()})
    while True:
        line = channel.receive_line()
        message = json.loads(line)
        if message.get("stubs") is not None and message.get("version") != stub_version:
            compile_stubs(message["stubs"], message["version"])
            discard(pending)  # it was forked with the old stubs
            pending = prefork()
        if message.get("op") != "run":
            continue
        pid, writer = pending
        view = memoryview(line)
        while view:
            view = view[os.write(writer, view) :]
        os.close(writer)
        _, status = os.waitpid(pid, 0)
        if args.pidns:
            try:
                os.kill(-1, signal.SIGKILL)  # everything of this uid in the sandbox, except this zygote
            except ProcessLookupError:
                pass
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        channel.send({"op": "exit", "status": _exit_status(status)})
        _wipe(workspace)
        if args.pidns:
            _wipe("/tmp")
        pending = prefork()
        channel.send({"op": "ready", "pid": os.getpid()})


if __name__ == "__main__":
    main()
