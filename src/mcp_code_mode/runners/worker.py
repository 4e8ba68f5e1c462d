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
import ast
import builtins
import importlib
import io
import json
import os
import shutil
import signal
import stat
import sys
import threading
import time
import traceback
from typing import Any

CHUNK_CHARS = 8192
FLUSH_SECONDS = 0.05


class ToolError(Exception):
    """A downstream tool failed; ``server``, ``tool`` and the server's ``message`` are attributes."""

    def __init__(self, message: str, server: str | None = None, tool: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.server = server
        self.tool = tool


class _FinalAnswer(BaseException):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


class Channel:
    """The worker's end of the bridge."""

    def __init__(self) -> None:
        self._in = os.fdopen(os.dup(0), "rb")
        self._out = os.fdopen(os.dup(1), "wb")
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        self._next_id = 0
        self._send_lock = threading.Lock()  # the output flusher thread sends too
        self.output: Output | None = None

    def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._send_lock:
            self._out.write(line)
            self._out.flush()

    def receive(self) -> dict[str, Any]:
        line = self._in.readline()
        if not line:
            os._exit(0)  # the host is gone
        return json.loads(line)

    def call(self, server: str, tool: str, arguments: Any) -> Any:
        if self.output is not None:
            self.output.flush()
        try:
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"arguments of {server}.{tool} must be JSON values: {exc}") from None
        self._next_id += 1
        self.send({"op": "call", "id": self._next_id, "server": server, "tool": tool, "arguments": arguments})
        reply = self.receive()
        if "error" in reply:
            err = reply["error"]
            raise ToolError(err.get("message", "tool failed"), err.get("server"), err.get("tool"))
        return reply.get("value")


class Output(io.TextIOBase):
    """Printed text: kept up to a cap, sent to the host in chunks as it is printed.

    A chunk goes out when it reaches ``CHUNK_CHARS``, and a flusher thread sends whatever is pending
    every ``FLUSH_SECONDS``, so a line printed before a long sleep or computation arrives at once.
    It is also the script's ``sys.stdout`` and ``sys.stderr`` under the cpython runner.
    """

    encoding = "utf-8"

    def __init__(self, channel: Channel, cap: int) -> None:
        self._channel = channel
        self._cap = cap
        self._used = 0
        self._pending: list[str] = []
        self._pending_chars = 0
        self._lock = threading.Lock()
        self.dropped = 0

    def start_flusher(self) -> None:
        def flush_every_tick() -> None:
            while True:
                time.sleep(FLUSH_SECONDS)
                self.flush()

        threading.Thread(target=flush_every_tick, name="output-flusher", daemon=True).start()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:  # pyright: ignore[reportIncompatibleMethodOverride]
        if not isinstance(text, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            room = self._cap - self._used
            if room <= 0:
                self.dropped += len(text)
                return len(text)
            if len(text) > room:
                self.dropped += len(text) - room
                text = text[:room]
            self._used += len(text)
            self._pending.append(text)
            self._pending_chars += len(text)
            if self._pending_chars >= CHUNK_CHARS:
                self._flush_locked()
        return len(text)

    def __iadd__(self, text: str) -> Output:  # smolagents' print does `state["_print_outputs"] += text`
        self.write(str(text))
        return self

    def flush(self) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._pending:
            self._channel.send({"op": "output", "data": "".join(self._pending)})
            self._pending, self._pending_chars = [], 0

    def __str__(self) -> str:
        return ""


def _jsonable(value: Any, cap: int) -> tuple[Any, bool]:
    """The value as JSON (else its repr), and whether it had to be cut to ``cap`` characters."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        value = text = repr(value)
    if len(text) <= cap:
        return value, False
    return text[:cap], True


def _error(exc: BaseException, line: int | None, traceback: str | None = None) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc), "line": line, "traceback": traceback}


def _confined_open(workspace: str) -> Any:
    real_open = builtins.open

    def open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not isinstance(file, str | os.PathLike):
            raise TypeError("open() takes a path in the workspace")
        path = os.path.realpath(os.path.join(workspace, os.fspath(file)))
        if path != workspace and not path.startswith(workspace + os.sep):
            raise PermissionError(f"{file}: only files inside the run's workspace can be opened")
        return real_open(path, mode, *args, **kwargs)

    return open


# --- the local runner: smolagents' AST interpreter ----------------------------------------------


def _patch_line_tracking() -> None:
    """Make every exception remember the innermost AST node (the user's line) it passed through."""
    from smolagents import local_python_executor as lpe

    original = lpe.evaluate_ast

    def evaluate_ast(expression: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(expression, *args, **kwargs)
        except BaseException as exc:
            if getattr(exc, "_cm_line", None) is None and getattr(expression, "lineno", None) is not None:
                try:
                    exc._cm_line = expression.lineno  # type: ignore[attr-defined]
                except AttributeError:
                    pass
            raise

    lpe.evaluate_ast = evaluate_ast

    # smolagents copies a module's attributes (recursively) on every import, which takes over a second
    # for numpy or pandas. The copy depends only on the module, so make it once, in the zygote.
    copy_module = lpe.get_safe_module
    copies: dict[int, Any] = {}

    def get_safe_module(raw_module: Any, authorized_imports: Any, visited: Any = None) -> Any:
        if visited is not None:
            return copy_module(raw_module, authorized_imports, visited)
        key = id(raw_module)
        if key not in copies:
            copies[key] = copy_module(raw_module, authorized_imports)
        return copies[key]

    lpe.get_safe_module = get_safe_module


def run_local(code: str, tools: dict[str, Any], output: Output, workspace: str, imports: list[str]) -> dict[str, Any]:
    from smolagents import local_python_executor as lpe

    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return {"success": False, "error": _syntax_error(exc)}

    def final_answer(value: Any = None) -> Any:
        raise _FinalAnswer(value)

    static_tools = {
        **lpe.BASE_PYTHON_TOOLS,
        "open": _confined_open(workspace),
        "final_answer": final_answer,
        "ToolError": ToolError,
        **tools,
    }
    state: dict[str, Any] = {"__name__": "__main__", "_print_outputs": output, "_operations_count": {"counter": 0}}
    custom_tools: dict[str, Any] = {}  # functions and classes the script defines
    value: Any = None
    try:
        for node in tree.body:
            value = lpe.evaluate_ast(node, state, static_tools, custom_tools, imports)
        returned = value if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        return {"success": True, "value": returned}
    except _FinalAnswer as answer:
        return {"success": True, "value": answer.value}
    except Exception as exc:  # the script's own error: reported, not raised
        line = getattr(exc, "_cm_line", None)
        source = code.splitlines()[line - 1].strip() if line and line <= len(code.splitlines()) else None
        return {"success": False, "error": _error(exc, line, f"line {line}: {source}" if source else None)}


def _syntax_error(exc: SyntaxError) -> dict[str, Any]:
    where = f" (line {exc.lineno}, column {exc.offset})" if exc.lineno else ""
    return {
        "type": "SyntaxError",
        "message": f"{exc.msg}{where}",
        "line": exc.lineno,
        "traceback": (exc.text or "").rstrip() or None,
    }


# --- the cpython runner: the script is plain Python ----------------------------------------------


def run_cpython(code: str, tools: dict[str, Any], output: Output) -> dict[str, Any]:
    import asyncio
    import inspect

    try:
        tree = ast.parse(code, "<script>")
    except SyntaxError as exc:
        return {"success": False, "error": _syntax_error(exc)}
    last: ast.Expression | None = None
    if tree.body and isinstance(final := tree.body[-1], ast.Expr):
        tree.body.pop()
        last = ast.Expression(final.value)

    def final_answer(value: Any = None) -> Any:
        raise _FinalAnswer(value)

    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins, **tools}
    namespace.update(ToolError=ToolError, final_answer=final_answer)
    sys.stdout = sys.stderr = output  # type: ignore[assignment]
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        body = eval(compile(tree, "<script>", "exec", flags=flags), namespace)
        if inspect.iscoroutine(body):
            asyncio.run(body)
        value = eval(compile(last, "<script>", "eval", flags=flags), namespace) if last is not None else None
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
        return {"success": True, "value": value}
    except _FinalAnswer as answer:
        return {"success": True, "value": answer.value}
    except SystemExit as exc:
        if exc.code in (None, 0):
            return {"success": True, "value": None}
        return {"success": False, "error": _error(exc, _script_line(exc), f"exit status {exc.code!r}")}
    except BaseException as exc:  # the script's own error, whatever it is: reported, not raised
        return {"success": False, "error": _error(exc, _script_line(exc), _script_traceback(exc, code))}
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__


def _script_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<script>"]


def _script_line(exc: BaseException) -> int | None:
    frames = _script_frames(exc)
    return frames[-1].lineno if frames else None


def _script_traceback(exc: BaseException, code: str) -> str | None:
    lines = code.splitlines()
    out = []
    for frame in _script_frames(exc):
        lineno = frame.lineno or 0
        source = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        where = "" if frame.name == "<module>" else f", in {frame.name}"
        out.append(f"  line {lineno}{where}: {source}")
    if not out:
        return None
    return "Traceback (script lines):\n" + "\n".join(out) + f"\n{type(exc).__name__}: {exc}"


# --- privileges and limits --------------------------------------------------------------------


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
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
    import resource

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


# --- main loop: a zygote that forks one child per run ------------------------------------------


def _import_interpreter() -> None:
    """Import smolagents' interpreter without smolagents/__init__ (which pulls in the agent stack: ~1 s)."""
    import importlib.util
    import types

    if "smolagents" not in sys.modules:
        spec = importlib.util.find_spec("smolagents")
        if spec is not None and spec.submodule_search_locations:
            package = types.ModuleType("smolagents")
            package.__path__ = list(spec.submodule_search_locations)
            sys.modules["smolagents"] = package
            tools = types.ModuleType("smolagents.tools")
            tools.Tool = object  # type: ignore[attr-defined]  # only used in a type annotation there
            sys.modules["smolagents.tools"] = tools
    importlib.import_module("smolagents.local_python_executor")


def _child(channel: Channel, kind: str, message: dict[str, Any], stubs: dict[str, Any], workspace: str) -> None:
    """Run one script in this freshly forked process, report it, and exit."""
    os.setsid()
    channel.send({"op": "started", "pid": os.getpid()})
    limits = message.get("limits")
    if isinstance(limits, dict):
        apply_limits({str(k): int(v) for k, v in limits.items()})
    os.chdir(workspace)
    output = Output(channel, int(message.get("max_output", 100_000)))
    channel.output = output
    output.start_flusher()

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
    result["returnValue"], cut = _jsonable(result.pop("value", None), cap)
    output.flush()
    result["dropped"] = output.dropped + (1 if cut else 0)
    result["files"] = _list_files(workspace)
    channel.send({"op": "done", **result})


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
        _import_interpreter()
        _patch_line_tracking()
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

    channel.send({"op": "ready", "pid": os.getpid()})
    while True:
        message = channel.receive()
        if message.get("stubs") is not None and message.get("version") != stub_version:
            compile_stubs(message["stubs"], message["version"])
        if message.get("op") != "run":
            continue
        pid = os.fork()
        if pid == 0:
            try:
                _child(channel, args.kind, message, stub_namespace, workspace)
            finally:
                os._exit(0)
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
        channel.send({"op": "ready", "pid": os.getpid()})


if __name__ == "__main__":
    main()
