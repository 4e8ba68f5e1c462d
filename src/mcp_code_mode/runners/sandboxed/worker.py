"""The worker program of the ``local`` and ``cpython`` runners: a zygote that forks one child per run.

It is started as a plain script (``python -I worker.py KIND ...``, under bubblewrap where it can
run) and imports only the standard library (and, for ``local``, smolagents' interpreter). It speaks
two channels with the host (see ``mcp_code_mode.bridge.messages``):

- the **control channel**, on duplicates of its original stdin and stdout (fds 0 and 1 then point at
  /dev/null): ``prepare`` and ``run`` from the host, ``ready`` and ``exit`` from the zygote. Only the
  zygote holds it; a child closes its copies before anything of the run is read.
- a **run channel** per run: a new socket pair made for each pre-forked child. The child keeps one
  end; the zygote passes the other to the host over the ``--runs-fd`` socket (SCM_RIGHTS) before it
  says ``ready``, and closes its copy. The script can write on its own run channel, and on nothing
  else: what it says there is about its own run only, and the host treats it as untrusted.

The zygote never runs a script. It drops to its sandbox uid first (``--drop``), makes itself
undumpable, installs the seccomp filter (``cm_os``), then waits. For each ``run`` it compiles the
stubs if they changed and hands the message to the pre-forked child (a new session), which applies
the run's rlimits, runs the script with a copy-on-write copy of the warm interpreter, reports
``done`` on its run channel, and exits. The zygote then kills everything the run left (every process
of its uid inside the sandbox's pid namespace, or the child's process group without one), reports
``exit``, wipes the workspace, /tmp and /dev/shm, forks the next child and says ``ready`` again, so
every run starts from the same pristine state in about a millisecond.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import signal
import socket
import sys
import threading
from typing import Any

# The sibling modules (cm_runtime, cm_protocol, ...) are found next to this file, in or out of a sandbox.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cm_interpreters import dispatch, import_interpreter, patch_line_tracking, run_cpython, run_local
from cm_os import (
    PR_SET_DUMPABLE,
    apply_limits,
    die_with_parent,
    drop_privileges,
    install_seccomp,
    join_cgroup,
    prctl,
    set_name,
    wipe,
    yield_to_the_server,
)
from cm_protocol import Channel, Output
from cm_runtime import DEFAULT_MAX_OUTPUT, ProgressReports, Shower, jsonable, list_files, send_files


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


def _next_run(run: Channel) -> dict[str, Any]:
    """In a session's child, after a run's ``done``: the host's next ``run`` message on the run channel (answers
    to calls of the last run that arrive late are skipped; the process exits when the host closes it)."""
    while True:
        message = run.receive()
        if message.get("op") == "run":
            return message


def _child(run: Channel, kind: str, reader: int, stubs: dict[str, Any], workspace: str, egress: str | None) -> None:
    """Wait (forked ahead of time) for one run, run it in this process, report it, and exit; or, for a session's
    first run, report it and wait for the session's next run on the run channel, with the same globals."""
    os.setsid()
    die_with_parent()
    os.chdir(workspace)
    set_name(WAITING_NAME)
    output = Output(run, 0)  # ready before the run arrives: its cap comes with the message
    output.start_flusher()
    message = _await_run(reader)
    if message is None:
        return
    set_name(RUNNING_NAME)
    limits = message.get("limits")
    if isinstance(limits, dict):
        apply_limits({str(k): int(v) for k, v in limits.items()})
    if egress:  # this worker's runs may use the network: only through the host's proxy (cm_egress)
        import cm_egress

        cm_egress.use_proxy(cm_egress.start(egress))
    progress = ProgressReports(run.send)
    output.also_flush(progress.flush)  # a report kept back goes out within a tick
    run.output = output

    def call_tool(server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """Call any tool by its server and tool names."""
        return dispatch(run.tools, server, tool, {} if arguments is None else arguments, sys._getframe(1))

    def parallel(functions: Any) -> list[Any]:
        """Call each function (each makes one tool call) with every call in flight at once; the results
        in order, or the first failed call's ToolError once all are answered."""
        return run.tools.parallel(functions)

    def report_progress(done: float, total: float | None = None, message: str | None = None) -> None:
        """Tell the client how far the script is (MCP progress, when it asked for it); a few reports a
        second go out, the newest of each moment."""
        progress.report(done, total, message)

    session = message.get("session") is True
    kept: dict[str, Any] | None = {} if session else None
    """A session's globals (cpython) or interpreter state (local), kept from run to run."""
    while True:
        cap = int(message.get("max_output", DEFAULT_MAX_OUTPUT))
        output.arm(cap)
        tools = {name: stubs[name] for name in message.get("namespaces", []) if name in stubs}
        tools["call_tool"] = call_tool
        tools["parallel"] = parallel
        tools["report_progress"] = report_progress
        caps = message.get("artifacts")
        tools.setdefault("show", Shower(run.send, caps, workspace))  # a server whose namespace is show wins
        skills = message.get("skills")
        if kind == "cpython":
            result = run_cpython(message["code"], tools, output, kept, skills)
        else:
            imports = list(message.get("imports", []))
            result = run_local(message["code"], tools, output, workspace, imports, kept, skills)
        result["returnValue"], cut = jsonable(result.pop("value", None), cap)
        result["files"] = list_files(workspace)
        progress.flush()  # the last report goes out before done
        output.flush()
        send_files(workspace, caps, result["files"], run.send)  # before done: the host keeps what arrives whole
        result["dropped"] = output.dropped + (1 if cut else 0)
        if isinstance(message.get("run"), int):
            result["run"] = message["run"]
        output.finish({"op": "done", **result})  # the last output and done in one write
        if not session:
            return
        message = _next_run(run)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="worker.py")
    parser.add_argument("kind", nargs="?", default="local", choices=["local", "cpython"])
    parser.add_argument("--preload", action="append", default=[], help="modules to import before the first run")
    parser.add_argument("--workspace", default=None, help="the run's working directory")
    parser.add_argument("--sys-path", action="append", default=[], help="directories to put on sys.path")
    parser.add_argument("--drop", default=None, help="UID:GID to become before anything else")
    parser.add_argument("--pidns", action="store_true", help="in a pid namespace: clean up with kill(-1)")
    parser.add_argument("--cgroup", default=None, help="the worker's own cgroup directory, to join first")
    parser.add_argument("--runs-fd", type=int, default=None, help="the socket that takes each run's channel")
    parser.add_argument("--egress", default=None, help="the host's egress proxy socket (runs may use the network)")
    parser.add_argument("--probe", action="store_true", help="check the sandbox works, print sandbox-ok, exit")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.cgroup:
        join_cgroup(args.cgroup)
    yield_to_the_server()
    if args.drop:
        uid, gid = (int(part) for part in args.drop.split(":"))
        drop_privileges(uid, gid)
    die_with_parent()
    try:
        prctl(PR_SET_DUMPABLE, 0)  # a run (same uid) cannot ptrace this zygote or open its /proc files
    except (OSError, AttributeError):
        pass
    if sys.platform == "linux":
        install_seccomp()
    for path in reversed([p for entry in args.sys_path for p in entry.split(":") if p]):
        sys.path.insert(0, path)
    if args.kind == "local":
        import_interpreter()
        patch_line_tracking()
    if args.probe:
        print("sandbox-ok", os.getuid())
        return
    if args.runs_fd is None:
        raise SystemExit("worker.py needs --runs-fd: the socket that takes each run's channel")
    control = Channel.from_stdio()
    runs = socket.socket(fileno=args.runs_fd)
    workspace = os.path.realpath(args.workspace or os.getcwd())
    preloads = [n for entry in args.preload for n in entry.split(",") if n]

    def preload() -> None:
        """Import the modules scripts commonly import, so that each later child has them (a cache only: a child
        without them imports what its script asks for, as any run may). Done once, while the first run runs,
        not before the zygote's first ``ready`` (about 25 ms sooner), on a thread of its own."""
        for name in preloads:
            try:
                module = importlib.import_module(name)
                if args.kind == "local":
                    from smolagents import local_python_executor as lpe

                    lpe.get_safe_module(module, [])
            except Exception:  # a cache only: whatever fails here, the zygote goes on serving
                continue
        preloads.clear()

    stub_namespace: dict[str, Any] = {}
    stub_version: int | None = None
    current: dict[str, Channel] = {}
    """The run channel of this process (set in each child before its run; the stubs call through it)."""

    def _call(server: str, tool: str, required: dict[str, Any], optional: dict[str, Any]) -> Any:
        arguments = dict(required)
        arguments.update({k: v for k, v in optional.items() if v is not None})
        return dispatch(current["run"].tools, server, tool, arguments, sys._getframe(2))  # the stub's caller

    def compile_stubs(source: str, version: int) -> None:
        nonlocal stub_namespace, stub_version
        namespace: dict[str, Any] = {"__name__": "mcp_code_mode_stubs", "_call": _call}
        exec(compile(source, "<tool stubs>", "exec"), namespace)
        stub_namespace, stub_version = namespace, version

    def prefork() -> tuple[int, int]:
        """Fork the next run's child now, off the run's path; it waits for its message on a pipe.
        Its run channel's other end goes to the host at once; the zygote keeps no copy."""
        gc.freeze()  # the child's collections then leave the zygote's objects (and their pages) alone
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                # Nothing of the zygote's channels stays in the child: only its own run channel.
                control.close()
                runs.close()
                host_end.close()
                os.close(writer)
                current["run"] = Channel.from_socket(child_end.detach())
                _child(current["run"], args.kind, reader, stub_namespace, workspace, args.egress)
            finally:
                os._exit(0)
        os.close(reader)
        child_end.close()
        socket.send_fds(runs, [b"R"], [host_end.fileno()])
        host_end.close()
        return pid, writer

    def discard(child: tuple[int, int]) -> None:
        os.close(child[1])  # the child reads end-of-file and exits
        os.waitpid(child[0], 0)

    def reap(pid: int) -> None:
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

    pending = prefork()
    control.send({"op": "ready", "child": pending[0]})
    while True:
        line = control.receive_line()
        message = json.loads(line)
        if message.get("stubs") is not None and message.get("version") != stub_version:
            compile_stubs(message["stubs"], message["version"])
            discard(pending)  # it was forked with the old stubs
            reap(pending[0])
            pending = prefork()
            control.send({"op": "ready", "child": pending[0]})
        if message.get("op") != "run":
            continue
        pid, writer = pending
        view = memoryview(line)
        while view:
            view = view[os.write(writer, view) :]
        os.close(writer)
        loading: threading.Thread | None = None
        if preloads:
            # The run's child has its message: the zygote's time until the run ends is its own. On a thread, so
            # that a slow preload (seconds on a loaded machine) never delays the run's ``exit`` past the host's
            # REAP_TIMEOUT; joined before the next fork, which must see one thread.
            loading = threading.Thread(target=preload, name="preload", daemon=True)
            loading.start()
        _, status = os.waitpid(pid, 0)
        reap(pid)
        control.send({"op": "exit", "status": _exit_status(status)})
        if loading is not None:
            loading.join()
        wipe(workspace)
        if args.pidns:
            wipe("/tmp")
            wipe("/dev/shm")
        pending = prefork()
        control.send({"op": "ready", "child": pending[0]})


if __name__ == "__main__":
    main()
