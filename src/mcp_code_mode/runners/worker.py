"""The worker program of the ``local`` runner: a zygote that forks one fresh child per run.

It is started as a plain script (``python -I worker.py local``), imports only the standard library
and smolagents' interpreter, and talks to the host over JSON lines on duplicates of its original
stdin and stdout (see ``mcp_code_mode.bridge``); fds 0 and 1 are pointed at /dev/null, so nothing a
script prints can be mistaken for a message.

The zygote never runs a script. For each ``run`` it compiles the stubs if they changed, forks, and
waits: the child (a new session) runs the script with a copy-on-write copy of the warm interpreter,
reports ``started`` and ``done`` itself, and exits. The zygote then kills whatever the child left in
its process group, wipes the workspace and says ``ready`` again. So every run starts from the same
pristine state in ~1 ms, instead of paying interpreter start-up.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import json
import os
import shutil
import sys
import threading
import time
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


class Output:
    """Printed text: kept up to a cap, sent to the host in chunks as it is printed.

    A chunk goes out when it reaches ``CHUNK_CHARS``, and a flusher thread sends whatever is pending
    every ``FLUSH_SECONDS``, so a line printed before a long sleep or computation arrives at once.
    """

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

    def write(self, text: str) -> int:
        text = str(text)
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
        self.write(text)
        return self

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._pending:
            self._channel.send({"op": "output", "data": "".join(self._pending)})
            self._pending, self._pending_chars = [], 0

    def __str__(self) -> str:
        return ""


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)


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
        return {"success": True, "returnValue": _jsonable(returned)}
    except _FinalAnswer as answer:
        return {"success": True, "returnValue": _jsonable(answer.value)}
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


def _child(channel: Channel, message: dict[str, Any], stub_namespace: dict[str, Any], workspace: str) -> None:
    """Run one script in this freshly forked process, report it, and exit."""
    os.setsid()
    channel.send({"op": "started", "pid": os.getpid()})
    output = Output(channel, int(message.get("max_output", 100_000)))
    channel.output = output
    output.start_flusher()

    def call_tool(server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
        """Call any tool by its server and tool names."""
        return channel.call(server, tool, {} if arguments is None else arguments)

    tools = {name: stub_namespace[name] for name in message.get("namespaces", []) if name in stub_namespace}
    tools["call_tool"] = call_tool
    result = run_local(message["code"], tools, output, workspace, list(message.get("imports", [])))
    output.flush()
    result["dropped"] = output.dropped
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


def _wipe(directory: str) -> None:
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "local"
    preload = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else []
    channel = Channel()
    workspace = os.path.realpath(os.getcwd())
    if kind == "local":
        _import_interpreter()
        _patch_line_tracking()
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass

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
                _child(channel, message, stub_namespace, workspace)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        try:
            os.killpg(pid, 9)  # whatever the script left running in its process group
        except (ProcessLookupError, PermissionError):
            pass
        _wipe(workspace)
        channel.send({"op": "ready", "pid": os.getpid()})


if __name__ == "__main__":
    main()
