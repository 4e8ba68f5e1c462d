"""The worker program of the ``monty`` runner: pydantic-monty's Rust interpreter, driven from inside the sandbox.

Started by ``cm_launch.py`` (``python -I -S cm_monty.py --runs-fd N --workspace DIR --sys-path DIR``), under
bubblewrap where it can run, after the uid drop, the rlimits and the seccomp filter. This process never runs a
script: it holds a ``pydantic_monty.Monty`` pool whose ``monty`` child process (in the same sandbox, with the same
filter) interprets it, and it answers that child's suspensions itself:

- a stub call (a namespace is a host object whose method calls come back here) or ``call_tool`` becomes a
  ``call`` on the run channel; the host's ``result`` resumes the script. A call written inside ``async def`` or
  inside a top-level ``await`` is answered with a future, so ``asyncio.gather`` sends its calls together and the
  host may answer them at once (the same rule as the cpython runner, ``cm_runtime.AwaitableCalls``);
- printed text goes to the run's ``Output`` (sent as ``output`` within about 50 ms);
- ``report_progress(done, total, message)`` becomes a ``progress`` (a few a second: ``cm_runtime.ProgressReports``);
- ``final_answer(x)`` ends the run with ``x``; files are the workspace's, mounted read-write at its own path;
- everything else (imports, ``open``, clocks, sleeps) is Monty's own, with the workspace its only mount.

It speaks the zygote's protocol with the host (see ``worker.py`` and ``runners/_pool.py``): the control channel
on its stdin and stdout (``prepare`` and ``run`` in, ``ready`` and ``exit`` out), and a new run channel per run,
passed to the host over ``--runs-fd`` before each ``ready``. Each run gets a fresh Monty session (checkout), and the
workspace is wiped after it, so nothing of one run is seen by the next.

Monty's refusals (class inheritance, generators' ``yield``, method decorators, ...) are raised by its parser before
any line runs; they are reported as ``MontySyntaxError`` naming the construct. ``"check": true`` in a run message
parses the script without running any of it (``validate_code``).
"""

from __future__ import annotations

import argparse
import ast
import os
import socket
import sys
import threading
import time
from typing import Any, cast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cm_os import PR_SET_DUMPABLE, prctl, set_name, wipe
from cm_protocol import Channel, Output
from cm_runtime import (
    DEFAULT_MAX_OUTPUT,
    FLUSH_SECONDS,
    ProgressReports,
    Shower,
    jsonable,
    list_files,
    send_files,
    tool_arguments,
)

SERVER_CALLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "list_resources": ("resources/list", ()),
    "read_resource": ("resources/read", ("uri",)),
    "list_prompts": ("prompts/list", ()),
    "get_prompt": ("prompts/get", ("name", "arguments")),
}
"""What a server's namespace has besides its tools, as the Python stubs define it (a tool of the name wins)."""
VIRTUAL_WORKSPACE = "/workspace"
"""Where the script sees its workspace (its working directory)."""
TOOL_ERROR = "RuntimeError"
"""The builtin ``ToolError`` names under Monty (it has no class inheritance, so no exception class of its own)."""
ADVICE = "write it without that construct, or use runner='cpython'"
CHECK_PREFIX = "if False:\n"
"""A script checked without running: parsed (every refusal of Monty's parser is raised) as dead code."""
REFUSAL_PREFIX = "The monty syntax parser does not yet support "
PRELUDE = f"""\
ToolError = {TOOL_ERROR}
def parallel(functions):
    _cm_collect(True)
    try:
        started = [function() for function in functions]
    finally:
        _cm_collect(False)
    return _cm_gather(started)
"""
"""Fed before the script, in its session: ``ToolError``, and ``parallel`` (its calls are sent before any is awaited)."""
PENDING = "parallel_call"
"""The type name a call made inside ``parallel`` returns until ``parallel`` collects it."""
PARALLEL_MISUSE = (
    "inside parallel(...), each function must return its tool call's result unchanged; work on the results parallel "
    "returns"
)
MAX_SUSPENSIONS = 1_000_000
"""Tool calls, sleeps and other host round trips of one run (Monty's default is 1000)."""


# ----- the await rule ----------------------------------------------------------------------------------------


def awaited_spans(code: str) -> list[tuple[int, int]]:
    """UTF-8 byte spans of the script where a stub call returns an awaitable: the bodies of ``async def`` and the
    expressions of top-level ``await``s (``cm_runtime.AwaitableCalls``, by position instead of by frame)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    starts = [0]
    for line in code.encode().splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column if 0 < line <= len(starts) else 0

    spans: list[tuple[int, int]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.AsyncFunctionDef):
                spans.append(_span(child, offset))
                continue
            if isinstance(child, ast.FunctionDef | ast.Lambda | ast.ClassDef):
                visit(child, False)
                continue
            if top and isinstance(child, ast.Await):
                spans.append(_span(child.value, offset))
            visit(child, top)

    visit(tree, True)
    return spans


def _span(node: Any, offset: Any) -> tuple[int, int]:
    end_line = node.end_lineno if node.end_lineno is not None else node.lineno
    end_col = node.end_col_offset if node.end_col_offset is not None else 1 << 30
    return offset(node.lineno, node.col_offset), offset(end_line, end_col)


def bind_loop_variables(code: str) -> str:
    """``parallel(lambda: ... for i in ...)`` with each lambda given its own ``i`` (``lambda i=i: ...``).

    Monty makes a generator expression's items all at once, so the lambdas would all see the loop's last value,
    where CPython calls each as it comes. Inserted on the lambda's own line: no line number changes."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    inserts: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "parallel"):
            continue
        if len(node.args) != 1 or not isinstance(generator := node.args[0], ast.GeneratorExp):
            continue
        function = generator.elt
        if not isinstance(function, ast.Lambda) or function.args.args or function.args.kwonlyargs:
            continue
        if function.args.vararg or function.args.kwarg or function.args.posonlyargs:
            continue
        names = list(
            dict.fromkeys(n.id for g in generator.generators for n in ast.walk(g.target) if isinstance(n, ast.Name))
        )
        if names:
            bound = " " + ", ".join(f"{n}={n}" for n in names)
            inserts.append((function.lineno, function.col_offset + len("lambda"), bound))
    if not inserts:
        return code
    lines = code.encode().splitlines(keepends=True)
    for line, column, text in sorted(inserts, reverse=True):
        raw = lines[line - 1]
        lines[line - 1] = raw[:column] + text.encode() + raw[column:]
    return b"".join(lines).decode()


# ----- one run -----------------------------------------------------------------------------------------------


class Calls:
    """The run's tool calls on its channel: some answered at once (a plain call), some collected later (a call
    answered with a future); the host's results may come in any order."""

    def __init__(self, channel: Channel, output: Output) -> None:
        self.channel = channel
        self.output = output
        self.next_id = 0
        self.waiting: dict[int, int] = {}
        """Monty's call id → the bridge id of a call answered with a future."""
        self.results: dict[int, dict[str, Any]] = {}
        self.tool_errors: set[str] = set()
        """Messages of the ToolErrors raised in the script (an uncaught one is reported as ``ToolError``)."""
        self.collecting = False
        """Inside ``parallel``: a call is sent and returns a pending call at once."""
        self.progress = ProgressReports(channel.send)
        output.also_flush(self.progress.flush)

    def send(self, server: str, tool: str, arguments: Any, line: int | None, wait: bool = False) -> int:
        """Send one call (after the pending output), its arguments encoded once: checked and sent; its id."""
        self.output.flush()
        payload = tool_arguments(server, tool, arguments)
        self.next_id = self.channel.send_call(server, tool, payload, line, wait)
        return self.next_id

    def wait(self, ident: int) -> dict[str, Any]:
        while ident not in self.results:
            reply: Any = self.channel.receive()
            if not isinstance(reply, dict):
                raise RuntimeError("the host's answer to a tool call is not an object")
            reply_id = cast(dict[str, Any], reply).get("id")
            if isinstance(reply_id, int):
                self.results[reply_id] = cast(dict[str, Any], reply)
        return self.results.pop(ident)

    def answer(self, reply: dict[str, Any]) -> dict[str, Any]:
        """A host ``result`` as Monty's resume value: the value, or the ToolError (Monty's RuntimeError)."""
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            message = str(error.get("message", "tool failed"))
            self.tool_errors.add(message)
            return {"exc_type": TOOL_ERROR, "message": message}
        return {"return_value": reply.get("value")}


class Namespaces:
    """The servers' namespaces: host objects whose method calls (any name) come back as suspensions."""

    def __init__(self, pm: Any, stubs: dict[str, Any]) -> None:
        self.inputs: dict[str, Any] = {}
        self.by_id: dict[Any, str] = {}
        self.tools: dict[str, dict[str, Any]] = {}
        self.server: dict[str, str] = {}
        self.unavailable: dict[str, str] = dict(stubs.get("unavailable", {}))
        for namespace, spec in dict(stubs.get("namespaces", {})).items():
            self.server[namespace] = str(spec.get("server", namespace))
            self.tools[namespace] = dict(spec.get("tools", {}))
        for namespace in [*self.server, *self.unavailable]:
            kind = type(namespace, (), {})
            wrapped = pm.ClassInstance(kind(), allowed_methods="all")
            self.inputs[namespace] = wrapped
            self.by_id[wrapped.id] = namespace

    def call(self, namespace: str, func: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str, Any]:
        """The server, tool and arguments of ``namespace.func(*args, **kwargs)`` as the Python stub would send them
        (``TypeError`` for arguments the stub would refuse, ``RuntimeError`` for a server that is down)."""
        if namespace in self.unavailable:
            raise ToolFailure(f"server {namespace!r} is not available: {self.unavailable[namespace]}")
        spec = self.tools.get(namespace, {}).get(func)
        server = self.server.get(namespace, namespace)
        if spec is None and func in SERVER_CALLS:  # no tool has this name: the server's resources or prompts
            op, params = SERVER_CALLS[func]
            if len(args) > len(params) or set(kwargs) - set(params):
                raise TypeError(f"{func}() takes {', '.join(params) or 'no arguments'}")
            given = {**dict(zip(params, args, strict=False)), **kwargs}
            return server, op, {k: v for k, v in given.items() if v is not None}
        if spec is None:  # the host says which tools there are
            return namespace, func, {**dict(enumerate(args)), **kwargs} if args else dict(kwargs)
        required: list[list[str]] = spec.get("required", [])
        optional: list[list[Any]] = spec.get("optional", [])
        if len(args) > len(required):
            raise TypeError(f"{func}() takes {len(required)} positional arguments but {len(args)} were given")
        given = dict(zip((ident for ident, _ in required), args, strict=False))
        for key, value in kwargs.items():
            if key in given:
                raise TypeError(f"{func}() got multiple values for argument {key!r}")
            given[key] = value
        arguments: dict[str, Any] = {}
        missing = [ident for ident, _ in required if ident not in given]
        if missing:
            raise TypeError(f"{func}() missing required argument(s): {', '.join(repr(m) for m in missing)}")
        for ident, name in required:
            arguments[name] = given.pop(ident)
        for ident, name, default in optional:
            value = given.pop(ident, default)
            if value is not None:
                arguments[name] = value
        if given:
            raise TypeError(f"{func}() got an unexpected keyword argument {next(iter(given))!r}")
        return server, str(spec.get("tool", func)), arguments


class Pending:
    """A call sent inside ``parallel``, until ``parallel`` collects its answer."""

    def __init__(self, ident: int) -> None:
        self.ident = ident


Pending.__name__ = Pending.__qualname__ = PENDING  # what the script's errors name


class ToolFailure(Exception):
    """A ToolError raised in the worker (a server that is down)."""


class FinalAnswer(Exception):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


def script_line(code: bytes, position: Any) -> int | None:
    try:
        return code[: position.start].count(b"\n") + 1
    except (AttributeError, TypeError):
        return None


def refusal_message(text: str) -> str | None:
    """A parser refusal in words (``class inheritance and metaclasses is not supported ...``), or None."""
    if not text.startswith(REFUSAL_PREFIX):
        return None
    construct = text[len(REFUSAL_PREFIX) :].rstrip(".")
    return f"{construct} are not supported by the monty runner ({ADVICE})"


def error_report(pm: Any, exc: Any, filename: str, line_shift: int = 0) -> dict[str, Any]:
    """A Monty error as the ``error`` of a ``done``: its type, message, the script's line and traceback."""
    frames: list[Any] = []
    if isinstance(exc, pm.MontyRuntimeError | pm.MontySyntaxError):
        try:
            frames = [f for f in exc.traceback() if f.filename == filename]
        except Exception:  # a traceback that cannot be read leaves the line unknown
            frames = []
    line = frames[-1].line - line_shift if frames else None
    if isinstance(exc, pm.MontySyntaxError):
        inner = exc.exception()
        message = str(inner) or str(exc)
        return {"type": "SyntaxError", "message": message, "line": line, "traceback": None}
    if isinstance(exc, pm.MontyRuntimeError):
        inner = exc.exception()
        kind, message = type(inner).__name__, str(inner)
        refused = refusal_message(message) if kind == "NotImplementedError" else None
        if refused is not None:
            return {"type": "MontySyntaxError", "message": refused, "line": line, "traceback": None}
        if f"'{PENDING}'" in message:
            kind, message = "TypeError", PARALLEL_MISUSE
        lines = [f"  line {f.line - line_shift}: {(f.source_line or '').strip()}" for f in frames[-20:]]
        trace = "Traceback (script lines):\n" + "\n".join(lines) + f"\n{kind}: {message}" if lines else None
        return {"type": kind, "message": message, "line": line, "traceback": trace}
    if isinstance(exc, pm.MontyCrashedError):
        return {"type": "MemoryError" if "memory" in str(exc).lower() else "WorkerDied", "message": str(exc)}
    return {"type": type(exc).__name__, "message": str(exc), "line": None, "traceback": None}


class Runner:
    """The worker's Monty pool and the loop of one run on it."""

    shower: Shower | None = None

    def __init__(self, pm: Any, workspace: str, binary: str | None) -> None:
        self.pm = pm
        self.workspace = workspace
        # One session per monty process: the process a script ran in is retired with its session, and the next
        # run gets a fresh one the pool started meanwhile (the rule: a process that ran user code never serves
        # another run).
        self.pool = pm.Monty(
            binary_path=binary,
            min_processes=1,
            max_processes=1,
            max_checkouts_per_worker=1,
            feed_duration_limit_grace=1.0,
        )
        self.pool.__enter__()
        self._stubs: tuple[int | None, Namespaces] | None = None
        self.timeout = 30.0
        with self.pool.checkout() as session:  # the monty process starts now, not in the first run
            session.feed_run("1")

    def namespaces(self, message: dict[str, Any]) -> Namespaces:
        version = message.get("version")
        if self._stubs is None or self._stubs[0] != version or version is None:
            self._stubs = (version, Namespaces(self.pm, dict(message.get("stubs") or {})))
        return self._stubs[1]

    def limits(self, message: dict[str, Any]) -> dict[str, Any]:
        timeout = self.timeout = float(message.get("timeout", 30))
        limits: dict[str, Any] = {
            "max_feed_duration_secs": timeout,
            "max_suspensions": MAX_SUSPENSIONS,
            "max_total_sleep_secs": timeout,
        }
        memory = message.get("memory")
        if isinstance(memory, int) and memory > 0:
            limits["max_memory"] = memory
        depth = message.get("recursion")
        if isinstance(depth, int) and depth > 0:
            limits["max_recursion_depth"] = depth
        return limits

    def check(self, code: str) -> dict[str, Any]:
        """Parse without running: the script as dead code under ``if False:``."""
        body = "".join("    " + line for line in code.splitlines(keepends=True)) or "    pass"
        with self.pool.checkout(limits={"max_feed_duration_secs": 5.0}) as session:
            try:
                session.feed_start(CHECK_PREFIX + body + "\n    pass\n")
            except self.pm.MontyError as exc:
                report = error_report(self.pm, exc, "<python-input-0>", line_shift=1)
                if report["type"] in ("SyntaxError", "MontySyntaxError"):
                    return {"success": False, "error": report}
        return {"success": True, "returnValue": None}

    def run(self, message: dict[str, Any], channel: Channel, output: Output) -> dict[str, Any]:
        pm = self.pm
        code = str(message.get("code", ""))
        if message.get("check"):
            return self.check(code)
        namespaces = self.namespaces(message)
        code = bind_loop_variables(code)
        calls = Calls(channel, output)
        self.shower = Shower(channel.send, message.get("artifacts"), self.workspace)
        spans = awaited_spans(code)
        source = code.encode()
        filename = "<python-input-1>"

        def printed(_stream: str, text: str) -> None:
            output.write(text)

        with pm.MountDir(host_path=self.workspace, virtual_path=VIRTUAL_WORKSPACE, mode="read-write") as mount:
            with self.pool.checkout(limits=self.limits(message), print_flush_interval=FLUSH_SECONDS) as session:
                session.feed_run(PRELUDE, print_callback=printed)
                try:
                    snapshot = session.feed_start(
                        code,
                        inputs=namespaces.inputs or None,
                        print_callback=printed,
                        mount=mount,
                        cwd=VIRTUAL_WORKSPACE,
                    )
                    while not isinstance(snapshot, pm.MontyComplete):
                        snapshot = self.answer(snapshot, namespaces, calls, spans, source)
                    return {"success": True, "value": snapshot.output}
                except FinalAnswer as answer:
                    return {"success": True, "value": answer.value}
                except pm.MontyError as exc:
                    report = error_report(pm, exc, filename)
                    if report["type"] == TOOL_ERROR and report.get("message") in calls.tool_errors:
                        report["type"] = "ToolError"
                    return {"success": False, "error": report}

    def answer(self, snapshot: Any, namespaces: Namespaces, calls: Calls, spans: Any, source: bytes) -> Any:
        """Resume one suspension; the next snapshot."""
        pm = self.pm
        if isinstance(snapshot, pm.FutureSnapshot):
            return snapshot.resume(
                {call: calls.answer(calls.wait(calls.waiting.pop(call))) for call in snapshot.pending_call_ids}
            )
        if isinstance(snapshot, pm.NameLookupSnapshot):
            return snapshot.resume_auto() if snapshot.object_id is not None else snapshot.resume()
        if snapshot.is_os_function and snapshot.function_name == "system.sleep":
            return snapshot.resume({"return_value": self.sleep(snapshot.args, calls)})
        if snapshot.is_os_function:
            return snapshot.resume_auto()  # the workspace mount, Monty's clocks and sleeps, imports
        name = snapshot.function_name
        args, kwargs = tuple(snapshot.args), dict(snapshot.kwargs)
        namespace = namespaces.by_id.get(snapshot.object_id) if snapshot.object_id is not None else None
        try:
            if namespace is not None:
                server, tool, arguments = namespaces.call(namespace, name, args, kwargs)
            elif name == "call_tool":
                server, tool, arguments = _call_tool(args, kwargs)
            elif name == "_cm_collect":
                calls.collecting = bool(args and args[0])
                return snapshot.resume({"return_value": None})
            elif name == "_cm_gather":
                return snapshot.resume(self.gather(calls, args[0] if args else []))
            elif name == "final_answer":
                raise FinalAnswer(args[0] if args else kwargs.get("value"))
            elif name == "report_progress":
                return snapshot.resume(_report(calls.progress, args, kwargs))
            elif name == "show" and self.shower is not None:
                try:
                    self.shower(_plain(args[0] if args else kwargs.get("image")))
                except ValueError as exc:
                    return snapshot.resume({"exc_type": "ValueError", "message": str(exc)})
                return snapshot.resume({"return_value": None})
            else:
                return snapshot.resume({"exc_type": "NameError", "message": f"name {name!r} is not defined"})
            line = script_line(source, snapshot.position)
            start = getattr(snapshot.position, "start", -1)
            future = calls.collecting or any(a <= start < b for a, b in spans)
            ident = calls.send(server, tool, arguments, line, wait=not future)
        except TypeError as exc:
            return snapshot.resume({"exc_type": "TypeError", "message": str(exc)})
        except ToolFailure as exc:
            calls.tool_errors.add(str(exc))
            return snapshot.resume({"exc_type": TOOL_ERROR, "message": str(exc)})
        if calls.collecting:
            return snapshot.resume({"return_value": self.pending(ident)})
        if future:
            calls.waiting[snapshot.call_id] = ident
            return snapshot.resume({"future": ...})
        return snapshot.resume(calls.answer(calls.wait(ident)))

    def sleep(self, args: Any, calls: Calls) -> None:
        """``time.sleep`` and ``asyncio.sleep``: printed output goes first; the host's timeout bounds the wait."""
        calls.output.flush()
        seconds = args[0] if args and isinstance(args[0], int | float) else 0
        time.sleep(min(max(float(seconds), 0.0), self.timeout))

    def pending(self, ident: int) -> Any:
        return self.pm.ClassInstance(Pending(ident))

    def gather(self, calls: Calls, started: Any) -> dict[str, Any]:
        """``parallel``'s results in order, once every call is answered; else the first failed call's ToolError."""
        results: list[Any] = []
        failed: str | None = None
        for item in started if isinstance(started, list) else []:
            if isinstance(item, Pending):
                answer = calls.answer(calls.wait(item.ident))
                if "return_value" not in answer:
                    failed = failed if failed is not None else str(answer.get("message"))
                item = answer.get("return_value")
            results.append(item)
        if failed is not None:
            return {"exc_type": TOOL_ERROR, "message": failed}
        return {"return_value": results}

    def result(self, message: dict[str, Any], channel: Channel, output: Output) -> dict[str, Any]:
        cap = output.cap
        try:
            result = dict(self.run(message, channel, output))
        except Exception as exc:  # the worker's own failure, reported as the run's
            failure = {"type": "RunnerError", "message": f"{type(exc).__name__}: {exc}"}
            result: dict[str, Any] = {"success": False, "error": failure}
        value, cut = jsonable(_plain(result.pop("value", None)), cap)
        result["returnValue"] = value
        result["files"] = list_files(self.workspace)
        result["dropped"] = output.dropped + (1 if cut else 0)
        output.flush()  # with the last progress report, before done
        send_files(self.workspace, message.get("artifacts"), result["files"], channel.send)
        return result


def _plain(value: Any, depth: int = 0) -> Any:
    """A value Monty returned, as JSON-able as it can be (its proxies as their repr)."""
    if depth > 100:
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): _plain(v, depth + 1) for k, v in value.items()}
    return repr(value)


def _report(progress: ProgressReports, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``report_progress(done, total=None, message=None)``: None, or the script's TypeError or ValueError."""
    try:
        given: dict[str, Any] = dict(zip(("done", "total", "message"), args, strict=False))
        if len(args) > 3 or set(kwargs) - {"done", "total", "message"} or set(kwargs) & set(given):
            raise TypeError("report_progress(done, total=None, message=None) got unexpected arguments")
        given.update(kwargs)
        if "done" not in given:
            raise TypeError("report_progress() missing required argument: 'done'")
        progress.report(given["done"], given.get("total"), given.get("message"))
    except (TypeError, ValueError) as exc:
        return {"exc_type": type(exc).__name__, "message": str(exc)}
    return {"return_value": None}


def _call_tool(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str, Any]:
    names = ("server", "tool", "arguments")
    given = dict(zip(names, args, strict=False))
    for key, value in kwargs.items():
        if key not in names or key in given:
            raise TypeError(f"call_tool() got an unexpected keyword argument {key!r}")
        given[key] = value
    if "server" not in given or "tool" not in given:
        raise TypeError("call_tool(server, tool, arguments) needs a server and a tool")
    server, tool = given["server"], given["tool"]
    if not isinstance(server, str) or not isinstance(tool, str):
        raise TypeError("call_tool(server, tool, arguments): server and tool are names (str)")
    arguments = given.get("arguments")
    return server, tool, {} if arguments is None else arguments


# ----- the worker --------------------------------------------------------------------------------------------


class Flusher:
    """One thread that sends the current run's pending output every ``FLUSH_SECONDS``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: Output | None = None
        threading.Thread(target=self._loop, name="output-flusher", daemon=True).start()

    def _loop(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            with self.lock:
                if self.current is not None:
                    try:
                        self.current.flush()
                    except OSError:
                        self.current = None

    def finish(self, output: Output, message: dict[str, Any]) -> None:
        with self.lock:
            self.current = None
            output.finish(message)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cm_monty.py")
    parser.add_argument("--workspace", default=None, help="the run's working directory")
    parser.add_argument("--sys-path", action="append", default=[], help="directories to put on sys.path")
    parser.add_argument("--monty", default=None, help="the monty binary")
    parser.add_argument("--runs-fd", type=int, default=None, help="the socket that takes each run's channel")
    parser.add_argument("--probe", action="store_true", help="check that Monty starts, print monty-ok, exit")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    try:
        prctl(PR_SET_DUMPABLE, 0)  # the monty child (same uid) cannot ptrace this process or read its memory
    except (OSError, AttributeError):
        pass
    for path in reversed([p for entry in args.sys_path for p in entry.split(":") if p]):
        sys.path.insert(0, path)
    import pydantic_monty

    workspace = os.path.realpath(args.workspace or os.getcwd())
    runner = Runner(pydantic_monty, workspace, args.monty)
    if args.probe:
        print("monty-ok", pydantic_monty.__version__)
        return
    if args.runs_fd is None:
        raise SystemExit("cm_monty.py needs --runs-fd: the socket that takes each run's channel")
    os.set_inheritable(args.runs_fd, False)
    control = Channel.from_stdio()
    runs = socket.socket(fileno=args.runs_fd)
    flusher = Flusher()
    set_name("cm-monty")

    def offer() -> Channel:
        """A new run channel: the host's end goes over ``--runs-fd``, then ``ready``."""
        host_end, own_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        socket.send_fds(runs, [b"R"], [host_end.fileno()])
        host_end.close()
        control.send({"op": "ready"})
        return Channel.from_socket(own_end.detach())

    channel = offer()
    while True:
        message = control.receive()
        op = message.get("op")
        if op == "prepare":  # the stubs come with each run: just a new channel
            channel.close()
            channel = offer()
            continue
        if op != "run":
            continue
        cap = int(message.get("max_output", DEFAULT_MAX_OUTPUT))
        output = Output(channel, cap)
        channel.output = output
        with flusher.lock:
            flusher.current = output
        try:
            result = runner.result(message, channel, output)
            flusher.finish(output, {"op": "done", **result})
        except OSError:  # the host closed the run's channel (a timeout): nothing to report on it
            with flusher.lock:
                flusher.current = None
        channel.close()
        control.send({"op": "exit", "status": "exit code 0"})
        wipe(workspace)
        channel = offer()


if __name__ == "__main__":
    main()
