"""Inside Pyodide: the sandbox side of the bridge for the ``pyodide`` runner.

This module never runs on the host. ``pyodide_worker.ts`` installs it as ``_codemode`` in the
interpreter before the memory snapshot is taken, so every interpreter restored from the snapshot has
it imported and warm. The worker hands ``serve`` one JavaScript function, the bridge (the snapshot
holds no JavaScript references), called as ``bridge(op, ...)`` with strings only:

- ``"output", text``: printed text (the worker caps it and sends ``output`` messages);
- ``"flush"``: send the pending output now;
- ``"progress", report_json``: the script's ``report_progress`` (``cm_runtime.ProgressReports`` sets the
  pace; the worker checks the figures and sends the ``progress`` message);
- ``"send", server, tool, arguments_json, line, wait``: the call is sent at once; its id (a string of
  digits), or a ``result`` line refusing it;
- ``"receive"``: the host's next ``result`` line, whatever its id (the worker blocks on stdin until it is
  there; ``ToolCalls`` of ``cm_runtime`` hands each answer to its caller), or nothing when no call sent
  is unanswered;
- ``"next"`` / ``"echo", text``: before the run only, a Promise of the next host message / of ``text``.

What a script sees and how its run is reported (``ToolError``, ``final_answer``, the caps of output and
return value, the output's flush rule) come from ``cm_runtime`` (``runners/sandboxed/cm_runtime.py``),
shared with the zygote's runners: the worker writes it into site-packages beside this module.

When a stub call is awaitable (``cm_runtime.AwaitableCalls``): inside ``async def`` (with its
comprehensions and generator expressions), a stub call returns an awaitable; in top-level code it does
when the call is written inside an ``await`` expression (``await fs.read_text_file(path=p)``,
``await asyncio.gather(*[fs.read_text_file(path=p) for p in paths])``); everywhere else (other
top-level statements, a plain ``def``, a ``lambda``) it returns the result. An awaited call is sent when
its coroutine first runs, so the calls of an ``asyncio.gather`` are in flight together; a pump on the
event loop reads their answers (blocking the loop while it waits, as any call does here). ``parallel``
sends the calls of its functions before it waits for any answer.

Printed output is kept up to the run's cap and sent at once when a line ends more than
``FLUSH_SECONDS`` after the last send; text still pending is sent before a tool call, before
``time.sleep`` and ``asyncio.sleep``, and, since Python runs on the JavaScript thread (no timer fires
while it computes), by a ``sys.monitoring`` hook that is on only while text is pending.

JavaScript is otherwise out of reach (``seal``): ``js``, ``pyodide_js``, ``_pyodide_core``,
``pyodide.ffi``, ``pyodide.code``, ``pyodide.http`` and the other modules that lead to JavaScript are
gone from ``sys.modules`` and importing them raises ``NotCapable``. That is a courtesy, not the
sandbox: a script is full CPython and may dig those objects out again, so the worker makes the
JavaScript side worthless first (see ``pyodide_worker.ts``).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import json
import os
import sys
import time
import types
import zipfile
from typing import Any

from cm_runtime import (
    DEFAULT_MAX_OUTPUT,
    AwaitableCalls,
    FinalAnswer,
    OutputBuffer,
    ProgressReports,
    Shower,
    ToolCalls,
    ToolError,
    define_compiled,
    final_answer,
    jsonable,
    list_files,
    skill_namespace,
    syntax_error,
    tool_arguments,
    tool_result,
)

WORKSPACE = "/workspace"
CODE_FILENAME = "<code>"

# Private references: a script may replace ``json.dumps`` or ``os.chdir`` in its own interpreter, and
# the result of its run must still be reported.
_dumps = json.dumps
_loads = json.loads
_chdir = os.chdir
_repr = repr
_sleep = time.sleep
_asyncio_sleep = asyncio.sleep

_bridge: Any = None  # the worker's one JavaScript function, set by ``serve``

try:
    from pyodide.ffi import run_sync as _run_sync  # pyright: ignore[reportMissingImports]
except ImportError:  # pragma: no cover - only imported inside Pyodide
    _run_sync: Any = None

_orig_asyncio_run: Any = asyncio.run
_stubs: dict[str, Any] = {}
_stubs_version: int | None = None
_awaitable: AwaitableCalls | None = None  # the running script's rule (see the module docstring)


class NotCapable(ImportError):
    """A path to JavaScript: ``import js``, ``pyodide_js``, ``pyodide.ffi``, ``pyodide.code``, ..."""


def _send(server: str, tool: str, payload: str, line: int | None, wait: bool) -> int:
    if _output is not None:
        _output.flush()
    _progress.flush()
    answer = _bridge("send", str(server), str(tool), payload, line or 0, bool(wait))
    if isinstance(answer, str) and answer.isdigit():
        return int(answer)
    tool_result(_loads(answer) if isinstance(answer, str) else None)  # the worker's refusal, raised
    raise ToolError("the worker did not send the tool call")


def _receive() -> tuple[Any, Any]:
    line = _bridge("receive")
    if not isinstance(line, str):
        raise ToolError("no tool call is waiting for an answer")
    message = _loads(line)
    return (message.get("id") if isinstance(message, dict) else None), message


_calls = ToolCalls(_send, _receive)
"""The run's tool calls, matched to the host's answers (a worker serves one run: one of these)."""


def parallel(functions: Any) -> list[Any]:
    """Call each function (each makes one tool call) with every call in flight at once; the results
    in order, or the first failed call's ToolError once all are answered."""
    return _calls.parallel(functions)


def _send_progress(report: dict[str, Any]) -> None:
    if _output is not None:
        _output.flush()
    _bridge("progress", _dumps(report))


_progress = ProgressReports(_send_progress)


def report_progress(done: float, total: float | None = None, message: str | None = None) -> None:
    """Tell the client how far the script is (MCP progress, when it asked for it); a few reports a second go
    out, the newest of each moment (the one kept back goes out before the next tool call, sleep, or the end)."""
    _progress.report(done, total, message)


def _script_line(frame: types.FrameType | None) -> int | None:
    """The script's line that made a call (its nearest frame of the script's own code)."""
    while frame is not None:
        if frame.f_code.co_filename == CODE_FILENAME:
            return frame.f_lineno
        frame = frame.f_back
    return None


def _dispatch(server: str, tool: str, arguments: Any, caller: types.FrameType | None) -> Any:
    payload = tool_arguments(server, tool, arguments)
    line = _script_line(caller)
    return _calls.dispatch(server, tool, payload, line, _awaitable is not None and _awaitable.wanted(caller))


def _call(server: str, tool: str, required: dict[str, Any], optional: dict[str, Any]) -> Any:
    """What every stub calls (the stubs are the same source as the local runner's)."""
    arguments = dict(required)
    arguments.update({k: v for k, v in optional.items() if v is not None})
    return _dispatch(server, tool, arguments, sys._getframe(2))


def call_tool(server: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """Call any tool by its server and tool names."""
    return _dispatch(server, tool, {} if arguments is None else arguments, sys._getframe(1))


def prepare(source: str, version: int) -> None:
    """Compile the stubs (while the interpreter waits for its run)."""
    global _stubs, _stubs_version
    if version == _stubs_version:
        return
    namespace: dict[str, Any] = {"__name__": "mcp_code_mode_stubs", "_call": _call}
    exec(compile(source, "<tool stubs>", "exec"), namespace)
    _stubs, _stubs_version = namespace, version


class _Output:
    """``sys.stdout`` and ``sys.stderr`` of a run: an ``OutputBuffer`` whose text goes to the worker.

    The worker caps and counts what it is given again (it believes nothing of this); text is sent with
    ``output`` and then ``flush``, so the worker passes it on at once.
    """

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, cap: int) -> None:
        self.buffer = OutputBuffer(self._send, cap)

    @staticmethod
    def _send(text: str) -> None:
        _bridge("output", text)
        _bridge("flush")

    def write(self, text: str) -> int:
        size = self.buffer.write(str(text))
        _idle_flush.update(self.buffer.pending)
        return size

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.buffer.flush()
        _idle_flush.update(False)

    def finish(self) -> None:
        """Hand the pending text to the worker, which sends it with the run's ``done``."""
        text = self.buffer.take()
        _idle_flush.update(False)
        if text:
            _bridge("output", text)

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError("the run's output has no file descriptor")


_output: _Output | None = None


class _IdleFlush:
    """Sends pending output from a ``sys.monitoring`` hook (Python calls and jumps), on only while text
    is pending: under Pyodide no timer fires while Python computes on the JavaScript thread."""

    def __init__(self) -> None:
        self.tool: int | None = None
        self.monitoring: Any = None  # ``sys.monitoring`` (Python 3.12 and later)
        self.armed = False
        self.tried = False

    def _install(self) -> None:
        self.tried = True
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            return
        for tool in (4, 3, 5):
            try:
                monitoring.use_tool_id(tool, "mcp-code-mode output")
            except ValueError:
                continue
            events = monitoring.events
            for event in (events.PY_START, events.JUMP):
                monitoring.register_callback(tool, event, self._event)
            self.tool, self.monitoring = tool, monitoring
            return

    def _event(self, *_: Any) -> None:
        if _output is not None and _output.buffer.due():
            _output.buffer.flush()
            self.update(False)

    def update(self, pending: bool) -> None:
        """Arm the hook while output is pending, and only then."""
        if pending == self.armed:
            return
        if not self.tried:
            self._install()
        if self.tool is None:
            return
        events = self.monitoring.events
        self.monitoring.set_events(self.tool, events.PY_START | events.JUMP if pending else 0)
        self.armed = pending


_idle_flush = _IdleFlush()


def _flush_output() -> None:
    if _output is not None:
        _output.flush()
    _progress.flush()


def _flushing_sleep(seconds: float) -> None:
    """``time.sleep``, which first sends the output printed so far (and a progress report kept back)."""
    _flush_output()
    _sleep(seconds)


async def _flushing_asyncio_sleep(delay: float, result: Any = None) -> Any:
    """``asyncio.sleep``, which first sends the output printed so far."""
    _flush_output()
    return await _asyncio_sleep(delay, result)


def add_wheel(path: str) -> None:
    """Make a pure-Python wheel importable where it lies (``zipimport``, after site-packages): nothing is
    unpacked, and its modules are read only when a script imports them."""
    if path not in sys.path:
        sys.path.append(path)


def install_wheels(paths: list[str]) -> list[str]:
    """Unpack pure-Python wheels (resolved by the host) into site-packages; returns their names."""
    import site

    target = site.getsitepackages()[0]
    names: list[str] = []
    for path in paths:
        with zipfile.ZipFile(path) as wheel:
            wheel.extractall(target)
        names.append(os.path.basename(path).split("-")[0])
    sys.path_importer_cache.clear()
    return names


def _error(exc: BaseException, code: str) -> dict[str, Any]:
    """Type, message, the innermost line of the user's code, and a traceback of the user's frames only."""
    lines = code.splitlines()
    frames: list[str] = []
    line: int | None = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == CODE_FILENAME:
            line = tb.tb_lineno
            source = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            frames.append(f"line {line}, in {tb.tb_frame.f_code.co_name}: {source}")
        tb = tb.tb_next
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "line": line,
        "traceback": "\n".join(frames) or None,
    }


def _compile(code: str) -> tuple[types.CodeType, types.CodeType | None, AwaitableCalls]:
    """The script's body, its last expression when it ends with one (its value is returned), and the
    rule for its awaitable calls."""
    tree = ast.parse(code, CODE_FILENAME)
    rule = AwaitableCalls(tree, CODE_FILENAME)
    last: types.CodeType | None = None
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        expression = ast.Expression(final.value)
        compiled: types.CodeType = compile(expression, CODE_FILENAME, "eval", flags=flags)
        rule.include(compiled)
        last = compiled
    body = compile(tree, CODE_FILENAME, "exec", flags=flags)
    rule.include(body)
    return body, last, rule


def _evaluate(code: types.CodeType, namespace: dict[str, Any]) -> Any:
    result = eval(code, namespace)
    if code.co_flags & 0x80:  # CO_COROUTINE: the script used top-level await; run it on the event loop
        result = _run_sync(result)
    return result


_session_globals: dict[str, Any] = {}
"""A session's globals, kept from run to run (``run(..., keep=True)``)."""


def _send_image(message: dict[str, Any]) -> None:
    if _output is not None:
        _output.flush()
    _bridge("image", str(message.get("data")), str(message.get("mimeType")))


def run(
    code: str,
    namespaces_json: str,
    max_output: int = DEFAULT_MAX_OUTPUT,
    keep: bool = False,
    skills: Any = None,
    artifacts_json: str = "null",
) -> str:
    """Run one script in this interpreter; the ``done`` fields as JSON.

    A plain function, entered from JavaScript with ``callPromising`` (so that ``run_sync`` can suspend
    it): no event-loop round trip before the script starts, unless the script itself awaits. The return
    value is cut to ``max_output`` characters of JSON like the zygote's; ``dropped`` counts what this
    side dropped (output past the cap, one for a cut value), and the worker adds its own count.
    """
    global _output, _awaitable
    _output = _Output(max_output)
    sys.stdout = sys.stderr = _output  # type: ignore[assignment]
    time.sleep = _flushing_sleep
    asyncio.sleep = _flushing_asyncio_sleep  # pyright: ignore[reportAttributeAccessIssue]
    _chdir(WORKSPACE)
    namespace: dict[str, Any] = _session_globals if keep else {}
    namespace.update(
        {
            "__name__": "__main__",
            "__builtins__": builtins,
            "ToolError": ToolError,
            "call_tool": call_tool,
            "final_answer": final_answer,
            "parallel": parallel,
            "report_progress": report_progress,
            "show": Shower(_send_image, _loads(artifacts_json), WORKSPACE),
        }
    )
    for name in _loads(namespaces_json):
        if name in _stubs:
            namespace[name] = _stubs[name]
    if skills:  # each defined in this interpreter on its first call (cm_runtime.skill_namespace)
        base: dict[str, Any] = {k: namespace[k] for k in ("__name__", "__builtins__", "ToolError", "call_tool")}
        base.update({k: namespace[k] for k in ("final_answer", "parallel", "report_progress")})
        base.update({name: _stubs[name] for name in _loads(namespaces_json) if name in _stubs})
        namespace["skills"] = base["skills"] = skill_namespace(skills, lambda spec: define_compiled(spec, base))
    done: dict[str, Any]
    value: Any = None
    cut = False
    try:
        body, last, _awaitable = _compile(code)
    except SyntaxError as exc:
        done = {"success": False, "error": syntax_error(exc)}
    else:
        try:
            _evaluate(body, namespace)
            value = _evaluate(last, namespace) if last is not None else None
            done = {"success": True}
        except FinalAnswer as answer:
            value = answer.value
            done = {"success": True}
        except BaseException as exc:  # the script's own error (SystemExit too): reported, not raised
            done = {"success": False, "error": _error(exc, code)}
        if done["success"]:
            done["returnValue"], cut = jsonable(value, max_output)
    _progress.flush()
    _output.finish()
    done["files"] = list_files(WORKSPACE)
    done["dropped"] = _output.buffer.dropped + (1 if cut else 0)
    return _dumps(done, default=_repr)


def warm_up() -> None:
    """One throwaway run through the paths a real run takes (compile, run_sync, await, output, files).

    WebAssembly functions are compiled lazily, on first call; doing it here, before the worker says
    ``ready``, keeps that cost out of the first real run. The worker drops this run's output.
    """
    _run_sync(_bridge("echo", "{}"))
    run(WARM_UP_SCRIPT, "[]")


# Modules that hold or make JavaScript objects; the sealed interpreter has none of them.
_JS_MODULES = (
    "js",
    "pyodide_js",
    "_codemode_host",
    "_pyodide_core",
    "pyodide.ffi",
    "pyodide.code",
    "pyodide.http",
    "pyodide.webloop",
    "pyodide.console",
    "pyodide._core",
    "pyodide._run_js",
    "pyodide._package_loader",
    "pyodide._nodesock_transport",
    "pyodide._state",
    "_pyodide._base",
)


def _leads_to_js(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in _JS_MODULES)


class _RefuseJs:
    """First on ``sys.meta_path``: importing a module that leads to JavaScript raises ``NotCapable``."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> None:
        if _leads_to_js(name):
            raise NotCapable(f"No module named {name!r}: JavaScript is out of reach in the pyodide runner")
        return None

    @staticmethod
    def invalidate_caches() -> None:
        return None


def _run_until_complete(self: Any, future: Any) -> Any:
    self._install_asyncgen_hooks()
    return _run_sync(future)


def _asyncio_run(main: Any, *, debug: Any = None, loop_factory: Any = None) -> Any:
    loop = asyncio.events._get_running_loop()  # pyright: ignore[reportPrivateUsage]
    if loop_factory is None and loop is not None and type(loop).__name__ == "WebLoop":
        return loop.run_until_complete(main)
    return _orig_asyncio_run(main, debug=debug, loop_factory=loop_factory)


def seal() -> None:
    """Take the modules that lead to JavaScript out of reach of ordinary imports (see the module docstring).

    Pyodide's event loop asks ``pyodide_js`` for its configuration in ``run_until_complete`` and
    ``asyncio.run``; they get the answer (``enableRunUntilComplete``) without it.
    """
    global _orig_asyncio_run
    webloop = sys.modules.get("pyodide.webloop")
    if webloop is not None:
        webloop.WebLoop.run_until_complete = _run_until_complete
        _orig_asyncio_run = webloop._orig_run
        asyncio.run = _asyncio_run
    for name in list(sys.modules):
        if _leads_to_js(name):
            module = sys.modules.pop(name)
            parent, _, child = name.rpartition(".")
            if parent and getattr(sys.modules.get(parent), child, None) is module:
                delattr(sys.modules[parent], child)
    # Pyodide's import hook keeps the JavaScript objects it imported from (Pyodide's API among them):
    # the finder's table and each loader let go of theirs.
    import gc

    for item in gc.get_objects():
        kind = type(item).__name__
        if kind == "JsFinder":
            item.jsproxies.clear()
        elif kind == "JsLoader":
            item.jsproxy = None
    if not any(finder is _RefuseJs for finder in sys.meta_path):
        sys.meta_path.insert(0, _RefuseJs)  # pyright: ignore[reportArgumentType]
    sys.path_importer_cache.clear()


def serve(bridge: Any) -> str:
    """The worker's Python main loop: warm up, then wait for messages; run the one script and return.

    Entered once from JavaScript with ``callPromising`` before the worker says ``ready``, with the
    bridge; it waits suspended in ``run_sync``, so a run resumes a stack that is already there.
    ``prepare`` messages (stubs) are handled while waiting; the ``run`` message's result (JSON) is the
    return value.
    """
    global _bridge
    _bridge = bridge
    del bridge
    warm_up()
    seal()
    while True:
        message = _loads(_run_sync(_bridge("next")))
        if isinstance(message.get("stubs"), str):
            prepare(message["stubs"], message.get("version"))
        if message.get("op") == "run":
            return _run_message(message)


def _run_message(message: dict[str, Any]) -> str:
    wheels = message.get("wheels") or []
    if wheels:
        install_wheels([f"/wheels/{name}" for name in wheels])
    cap = message.get("max_output")
    cap = cap if isinstance(cap, int) and cap >= 0 else DEFAULT_MAX_OUTPUT
    keep = message.get("session") is True
    namespaces = _dumps(message.get("namespaces") or [])
    artifacts = _dumps(message.get("artifacts"))
    return run(str(message.get("code") or ""), namespaces, cap, keep, message.get("skills"), artifacts)


def session_run(line: str) -> str:
    """A session's later run (its first came through ``serve``): entered from JavaScript with ``callPromising``,
    in the same globals; stubs that changed come with it."""
    message = _loads(line)
    if isinstance(message.get("stubs"), str):
        prepare(message["stubs"], message.get("version"))
    return _run_message(message)


WARM_UP_SCRIPT = """\
import json
async def f():
    return [i * 2 for i in range(3)]
x = await f()
print(json.dumps({"x": x}))
try:
    1 / 0
except ZeroDivisionError:
    pass
sum(x)
"""
