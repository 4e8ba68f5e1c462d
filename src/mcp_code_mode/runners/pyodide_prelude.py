"""Inside Pyodide: the sandbox side of the bridge for the ``pyodide`` runner.

This module never runs on the host. ``pyodide_worker.js`` installs it as ``_codemode`` in the
interpreter before the memory snapshot is taken, so every interpreter restored from the snapshot has
it imported and warm. The worker hands ``serve`` one JavaScript function, the bridge (the snapshot
holds no JavaScript references), called as ``bridge(op, ...)`` with strings only:

- ``"output", text``: printed text (the worker caps it and sends ``output`` messages);
- ``"flush"``: send the pending output now;
- ``"call", server, tool, arguments_json``: the host's ``result`` line (the worker blocks on stdin
  until it is there);
- ``"next"`` / ``"echo", text``: before the run only, a Promise of the next host message / of ``text``.

A stub call is synchronous, except where the caller awaits it: ``await filesystem.read_text_file(path=...)``
in async code gets a coroutine, so several calls can be gathered with ``asyncio.gather``.

JavaScript is otherwise out of reach (``seal``): ``js``, ``pyodide_js``, ``_pyodide_core``,
``pyodide.ffi``, ``pyodide.code``, ``pyodide.http`` and the other modules that lead to JavaScript are
gone from ``sys.modules`` and importing them raises ``NotCapable``. That is a courtesy, not the
sandbox: a script is full CPython and may dig those objects out again, so the worker makes the
JavaScript side worthless first (see ``pyodide_worker.js``).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import dis
import json
import os
import sys
import types
import zipfile
from typing import Any

WORKSPACE = "/workspace"
CODE_FILENAME = "<code>"

# Private references: a script may replace ``json.dumps`` or ``os.walk`` in its own interpreter, and
# the result of its run must still be reported.
_dumps = json.dumps
_loads = json.loads
_walk = os.walk
_lstat = os.lstat
_join = os.path.join
_relpath = os.path.relpath
_chdir = os.chdir
_repr = repr

_bridge: Any = None  # the worker's one JavaScript function, set by ``serve``

try:
    from pyodide.ffi import run_sync as _run_sync  # pyright: ignore[reportMissingImports]
except ImportError:  # pragma: no cover - only imported inside Pyodide
    _run_sync: Any = None

_orig_asyncio_run: Any = asyncio.run
_stubs: dict[str, Any] = {}
_stubs_version: int | None = None
_awaited_calls: dict[types.CodeType, frozenset[int]] = {}
_ASYNC_FLAGS = 0x80 | 0x200  # CO_COROUTINE | CO_ASYNC_GENERATOR


class ToolError(Exception):
    """A downstream tool failed; ``server``, ``tool`` and the server's ``message`` are attributes."""

    def __init__(self, message: str, server: str | None = None, tool: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.server = server
        self.tool = tool


class NotCapable(ImportError):
    """A path to JavaScript: ``import js``, ``pyodide_js``, ``pyodide.ffi``, ``pyodide.code``, ..."""


class _FinalAnswer(BaseException):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


def final_answer(value: Any = None) -> Any:
    """End the script now and return ``value`` as ``returnValue``."""
    raise _FinalAnswer(value)


def _wants_awaitable(frame: types.FrameType | None) -> bool:
    """Whether the code calling a stub from ``frame`` gets a coroutine rather than the value.

    Inside ``async def`` it does (so calls can be awaited, gathered or made tasks); in top-level code
    only where the call is awaited right away (``x = await fs.read(...)`` with top-level await), so
    that plain calls in a script that also uses ``await`` elsewhere still return values.
    """
    if frame is None:
        return False
    code = frame.f_code
    if not code.co_flags & _ASYNC_FLAGS:
        return False
    if code.co_name != "<module>":
        return True
    offsets = _awaited_calls.get(code)
    if offsets is None:
        found: set[int] = set()
        previous: dis.Instruction | None = None
        for instruction in dis.get_instructions(code):
            if instruction.opname == "GET_AWAITABLE" and previous is not None:
                found.add(previous.offset)
            previous = instruction
        offsets = _awaited_calls[code] = frozenset(found)
    return frame.f_lasti in offsets


def _encode(server: str, tool: str, arguments: Any) -> str:
    try:
        return _dumps(arguments, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"arguments of {server}.{tool} must be JSON values: {exc}") from None


def _decode(reply: str) -> Any:
    message = _loads(reply)
    if "error" in message:
        error = message["error"] or {}
        raise ToolError(error.get("message", "tool failed"), error.get("server"), error.get("tool"))
    return message.get("value")


def _request(server: str, tool: str, payload: str) -> Any:
    return _decode(_bridge("call", str(server), str(tool), payload))


async def _call_async(server: str, tool: str, payload: str) -> Any:
    # The host answers a run's calls one at a time, in order, so the awaited call is the same call.
    return _request(server, tool, payload)


def _dispatch(server: str, tool: str, arguments: Any, caller: types.FrameType | None) -> Any:
    payload = _encode(server, tool, arguments)
    if _wants_awaitable(caller):
        return _call_async(server, tool, payload)
    return _request(server, tool, payload)


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
    """``sys.stdout`` and ``sys.stderr`` of a run: text goes to the worker, which caps and batches it."""

    encoding = "utf-8"
    errors = "replace"

    def write(self, text: str) -> int:
        text = str(text)
        if text:
            _bridge("output", text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        _bridge("flush")

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError("the run's output has no file descriptor")


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


def _jsonable(value: Any) -> Any:
    try:
        _dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError, RecursionError):
        return _repr(value)


def _syntax_error(exc: SyntaxError) -> dict[str, Any]:
    where = f" (line {exc.lineno}, column {exc.offset})" if exc.lineno else ""
    return {
        "type": "SyntaxError",
        "message": f"{exc.msg}{where}",
        "line": exc.lineno,
        "traceback": (exc.text or "").rstrip() or None,
    }


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


def _list_files(limit: int = 200) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in _walk(WORKSPACE):
        dirnames.sort()
        for name in sorted(filenames):
            path = _join(dirpath, name)
            try:
                files.append({"path": _relpath(path, WORKSPACE), "size": _lstat(path).st_size})
            except OSError:
                continue
            if len(files) >= limit:
                return files
    return files


def _compile(code: str) -> tuple[types.CodeType, types.CodeType | None]:
    """The script's body and, when it ends with an expression, that expression (its value is returned)."""
    tree = ast.parse(code, CODE_FILENAME)
    last: types.CodeType | None = None
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    final = tree.body[-1] if tree.body else None
    if isinstance(final, ast.Expr):
        tree.body.pop()
        expression = ast.Expression(final.value)
        last = compile(expression, CODE_FILENAME, "eval", flags=flags)
    return compile(tree, CODE_FILENAME, "exec", flags=flags), last


def _evaluate(code: types.CodeType, namespace: dict[str, Any]) -> Any:
    result = eval(code, namespace)
    if code.co_flags & 0x80:  # CO_COROUTINE: the script used top-level await; run it on the event loop
        result = _run_sync(result)
    return result


def run(code: str, namespaces_json: str) -> str:
    """Run one script in this interpreter; the ``done`` fields as JSON (without ``dropped``).

    A plain function, entered from JavaScript with ``callPromising`` (so that ``run_sync`` can suspend
    it): no event-loop round trip before the script starts, unless the script itself awaits.
    """
    sys.stdout = sys.stderr = _Output()  # type: ignore[assignment]
    _chdir(WORKSPACE)
    namespace: dict[str, Any] = {
        "__name__": "__main__",
        "__builtins__": builtins,
        "ToolError": ToolError,
        "call_tool": call_tool,
        "final_answer": final_answer,
    }
    for name in _loads(namespaces_json):
        if name in _stubs:
            namespace[name] = _stubs[name]
    done: dict[str, Any]
    try:
        body, last = _compile(code)
    except SyntaxError as exc:
        done = {"success": False, "error": _syntax_error(exc)}
    else:
        try:
            _evaluate(body, namespace)
            value = _evaluate(last, namespace) if last is not None else None
            done = {"success": True, "returnValue": _jsonable(value)}
        except _FinalAnswer as answer:
            done = {"success": True, "returnValue": _jsonable(answer.value)}
        except BaseException as exc:  # the script's own error (SystemExit too): reported, not raised
            done = {"success": False, "error": _error(exc, code)}
    done["files"] = _list_files()
    return _dumps(done, default=_repr)


def warm_up() -> None:
    """One throwaway run through the paths a real run takes (compile, run_sync, await, output, files).

    WebAssembly functions are compiled lazily, on first call; doing it here, before the worker says
    ``ready``, keeps that cost out of the first real run. The worker drops this run's output.
    """
    _run_sync(_bridge("echo", "{}"))
    run(WARM_UP_SCRIPT, "[]")
    _awaited_calls.clear()


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
            wheels = message.get("wheels") or []
            if wheels:
                install_wheels([f"/wheels/{name}" for name in wheels])
            return run(str(message.get("code") or ""), _dumps(message.get("namespaces") or []))


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
