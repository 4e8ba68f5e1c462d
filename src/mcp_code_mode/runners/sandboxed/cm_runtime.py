"""The sandbox side of every Python runner, defined once: what a script sees and how its run is reported.

Imported as ``cm_runtime`` in two places, standard library only, on Python 3.11 and later:

- by the run child of the zygote (``worker.py``, the ``local`` and ``cpython`` runners), from this folder;
- inside Pyodide (the ``pyodide`` runner): ``pyodide_worker.ts`` writes this file into site-packages beside
  the prelude (``_codemode``) when it makes the memory snapshot, whose digest covers this file's bytes.

Here: the names a script gets (``ToolError``, ``final_answer``, and ``report_progress``'s pace:
``ProgressReports``), the limits and intervals of a run's output and return value, the printed-output
buffer with its flush rule, the check of tool arguments and the reading of the host's answers and
their matching to callers by id (``ToolCalls``: blocking calls, ``parallel`` and awaited ones), the
reports of values, errors and files, and the rule for when a stub call is awaitable
(``AwaitableCalls``). What each runner adds is its transport: a channel with a flusher thread in the
zygote, the worker's bridge function and no threads under Pyodide.

Everything a script does with these objects stays in its own sandbox; the host checks what comes out.
"""

from __future__ import annotations

import ast
import base64
import json
import math
import os
import stat
import threading
import time
import types
from collections.abc import Callable
from typing import Any

CHUNK_CHARS = 8192
"""Printed output is sent at the latest when this many characters are pending."""
FLUSH_SECONDS = 0.05
"""... and pending output is sent within about this long of being printed."""
DEFAULT_MAX_OUTPUT = 100_000
"""The cap of printed output, and of the return value's JSON, when the run message gives none."""
MAX_FILES = 200
"""Files of the workspace listed in a run's report."""
PROGRESS_SECONDS = 0.1
"""A script's ``report_progress`` is sent at most this often (the host passes reports on at this pace)."""
MAX_PROGRESS_MESSAGE = 1000
"""Characters of a progress message sent (the host refuses longer ones)."""

# Private references: a script may replace ``json.dumps`` or ``os.walk`` in its own interpreter, and the
# result of its run must still be reported.
_dumps = json.dumps
_walk = os.walk
_lstat = os.lstat
_join = os.path.join
_relpath = os.path.relpath
_repr = repr
_monotonic = time.monotonic
_isfinite = math.isfinite


class ToolError(Exception):
    """A downstream tool failed; ``server``, ``tool`` and the server's ``message`` are attributes."""

    def __init__(self, message: str, server: str | None = None, tool: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.server = server
        self.tool = tool


class FinalAnswer(BaseException):
    """Raised by ``final_answer``: ends the script, with ``value`` as its return value."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


def final_answer(value: Any = None) -> Any:
    """End the script now and return ``value`` as ``returnValue``."""
    raise FinalAnswer(value)


def tool_arguments(server: str, tool: str, arguments: Any) -> str:
    """The arguments of a tool call as compact JSON; ``TypeError`` when they are not JSON values."""
    try:
        return _dumps(arguments, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"arguments of {server}.{tool} must be JSON values: {exc}") from None


def tool_result(reply: Any) -> Any:
    """The value of the host's ``result`` message; its ``error`` is raised as ``ToolError``."""
    if not isinstance(reply, dict):
        raise ToolError("the host's answer to a tool call is not an object")
    if "error" in reply:
        error = reply["error"] if isinstance(reply["error"], dict) else {}
        raise ToolError(str(error.get("message", "tool failed")), error.get("server"), error.get("tool"))
    return reply.get("value")


PARALLEL_USAGE = (
    "parallel() takes functions that each make one tool call, e.g. "
    "parallel(lambda: fs.read_text_file(path=p) for p in paths)"
)


class Pending:
    """A tool call sent by ``parallel`` whose answer has not been read: it stands for the call's result
    only inside ``parallel``; anything else done with it is an error that says so."""

    __slots__ = ("_calls", "_ident")

    def __init__(self, calls: ToolCalls, ident: int) -> None:
        self._calls = calls
        self._ident = ident

    def result(self) -> Any:
        """Wait for the call's answer: its value, or its ``ToolError`` raised."""
        return tool_result(self._calls.wait(self._ident))

    def _misused(self, *_: Any) -> Any:
        raise TypeError(
            "inside parallel(...), each function must return its tool call's result unchanged; "
            "work on the results parallel returns"
        )

    __getitem__ = __iter__ = __len__ = __contains__ = __bool__ = __add__ = _misused

    def __getattr__(self, name: str) -> Any:
        self._misused()

    def __repr__(self) -> str:
        return "<tool call in flight>"


class ToolCalls:
    """A run's tool calls, each matched to the host's answer by its id; the one transport-free part of it.

    A runner gives it ``send`` (write one call message, the arguments already JSON text; its id back) and
    ``receive`` (block until the host's next ``result`` message: its id and the message). A call is made
    one of three ways:

    - ``call``: blocking, the answer read before it returns (the host may answer it inline: ``wait``);
    - ``start``: sent now, its ``Pending`` answered later (``parallel``, which sends every call of its
      functions before it waits for the first answer: the host answers them concurrently);
    - ``acall``: a coroutine that sends when it first runs and awaits its answer on the running event
      loop (``asyncio.gather`` of stub calls): a pump scheduled on the loop reads answers while calls are
      awaited, one per turn of the loop, and gives each to its future.

    Whoever reads an answer hands it to its caller: a blocking caller's answer waits in ``_answers``
    until it takes it, an awaited one resolves its future. Answers for calls no one waits for any more
    (a cancelled task's) are dropped.
    """

    def __init__(
        self,
        send: Callable[[str, str, str, int | None, bool], int],
        receive: Callable[[], tuple[Any, Any]],
    ) -> None:
        self._send = send
        self._receive = receive
        self._answers: dict[int, Any] = {}
        self._expected: set[int] = set()
        self._futures: dict[int, Any] = {}
        self._pumping: Any = None  # the event loop a pump is scheduled on
        self.collecting = 0
        """Depth of ``parallel`` calls whose functions are being called: their tool calls are ``start``ed."""

    def call(self, server: str, tool: str, payload: str, line: int | None = None) -> Any:
        """Make the call and return its value (``ToolError`` raised)."""
        ident = self._send(server, tool, payload, line, True)  # nothing else is sent until it is answered
        self._expected.add(ident)
        return tool_result(self.wait(ident))

    def start(self, server: str, tool: str, payload: str, line: int | None = None) -> Pending:
        ident = self._send(server, tool, payload, line, False)
        self._expected.add(ident)
        return Pending(self, ident)

    def wait(self, ident: int) -> Any:
        """The host's answer to call ``ident`` (a blocking caller's), reading answers until it is there."""
        while ident not in self._answers:
            self._read_one()
        self._expected.discard(ident)
        return self._answers.pop(ident)

    def _read_one(self) -> None:
        ident, reply = self._receive()
        future = self._futures.pop(ident, None) if isinstance(ident, int) else None
        if future is not None:
            if not future.done():
                future.set_result(reply)
        elif ident in self._expected:
            self._answers[ident] = reply

    async def acall(self, server: str, tool: str, payload: str, line: int | None = None) -> Any:
        """The call, awaited on the running event loop: other tasks' calls are in flight meanwhile."""
        import asyncio

        loop = asyncio.get_running_loop()
        ident = self._send(server, tool, payload, line, False)
        future = loop.create_future()
        self._futures[ident] = future
        if self._pumping is not loop:
            self._pumping = loop
            loop.call_soon(self._pump, loop)
        try:
            reply = await future
        finally:
            self._futures.pop(ident, None)
        return tool_result(reply)

    def _pump(self, loop: Any) -> None:
        """One answer read for the awaited calls, then again on the loop's next turn while any is awaited.

        It runs after the tasks that were ready (so calls made together are all sent before it blocks),
        and a task its answer wakes runs before it reads again."""
        if not self._futures or self._pumping is not loop:
            if self._pumping is loop:
                self._pumping = None
            return
        try:
            self._read_one()
        except BaseException as exc:  # the channel broke: every awaited call fails with it
            self._pumping = None
            futures, self._futures = list(self._futures.values()), {}
            for future in futures:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else ToolError(str(exc)))
            return
        loop.call_soon(self._pump, loop)

    def parallel(self, functions: Any) -> list[Any]:
        """Call each function (each makes one tool call), every call sent before any answer is awaited;
        the results in the order of ``functions``. Once all are answered, the first failed call (in that
        order) raises its ``ToolError``."""
        if callable(functions) or isinstance(functions, str | bytes | dict):
            raise TypeError(PARALLEL_USAGE)
        try:
            iterator = iter(functions)
        except TypeError:
            raise TypeError(PARALLEL_USAGE) from None
        started: list[Any] = []
        self.collecting += 1
        try:
            for function in iterator:  # called as it comes: a generator's lambda sees its own loop variable
                if not callable(function):
                    raise TypeError(f"{PARALLEL_USAGE}; got {type(function).__name__}")
                started.append(function())
        finally:
            self.collecting -= 1
        results: list[Any] = []
        failed: ToolError | None = None
        for item in started:
            if isinstance(item, Pending):
                try:
                    item = item.result()
                except ToolError as exc:
                    failed = failed or exc
                    item = None
            results.append(item)
        if failed is not None:
            raise failed
        return results

    def dispatch(self, server: str, tool: str, payload: str, line: int | None, awaitable: bool) -> Any:
        """A stub call: ``start``ed inside ``parallel``, awaitable where the script's rule says so, else made."""
        if self.collecting:
            return self.start(server, tool, payload, line)
        if awaitable:
            return self.acall(server, tool, payload, line)
        return self.call(server, tool, payload, line)


def jsonable(value: Any, cap: int) -> tuple[Any, bool]:
    """The return value as JSON (else its repr), and whether it had to be cut.

    A value whose JSON text is longer than ``cap`` characters becomes the first ``cap`` characters of
    that text (a string).
    """
    try:
        text = _dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        value = text = _repr(value)
    if len(text) <= cap:
        return value, False
    return text[:cap], True


def error_info(exc: BaseException, line: int | None, traceback: str | None = None) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc), "line": line, "traceback": traceback}


def syntax_error(exc: SyntaxError) -> dict[str, Any]:
    where = f" (line {exc.lineno}, column {exc.offset})" if exc.lineno else ""
    return {
        "type": "SyntaxError",
        "message": f"{exc.msg}{where}",
        "line": exc.lineno,
        "traceback": (exc.text or "").rstrip() or None,
    }


def list_files(workspace: str, limit: int = MAX_FILES) -> list[dict[str, Any]]:
    """The workspace's files (path relative to it, size), in a stable order, at most ``limit``."""
    files: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in _walk(workspace):
        dirnames.sort()
        for name in sorted(filenames):
            path = _join(dirpath, name)
            try:
                files.append({"path": _relpath(path, workspace), "size": _lstat(path).st_size})
            except OSError:
                continue
            if len(files) >= limit:
                return files
    return files


FILE_CHUNK = 256 * 1024
"""Bytes of a workspace file per ``file`` message."""
IMAGE_USAGE = (
    "show() takes an image: the path of a png, jpeg, gif or webp file in the workspace, "
    "or an image value {'type': 'image', 'data': <base64>, 'mimeType': ...} as a tool returns it (or a list of them)"
)
_b64encode = base64.b64encode
_b64decode = base64.b64decode
_open = os.open
_read = os.read
_close = os.close
_fstat = os.fstat


def _cap(caps: Any, key: str, default: int) -> int:
    value = caps.get(key) if isinstance(caps, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def send_files(workspace: str, caps: Any, listed: list[dict[str, Any]], send: Callable[[dict[str, Any]], None]) -> None:
    """Send the bytes of each listed file (``file`` messages, in chunks), skipping what the run message's caps
    (``caps``: ``max_file``, ``max_run``, ``max_files``) say the host would not keep, and anything that is not a
    regular file (a symlink is not followed). Nothing is sent without caps (the host keeps no files)."""
    if not isinstance(caps, dict):
        return
    max_file, max_run, max_files = _cap(caps, "max_file", 0), _cap(caps, "max_run", 0), _cap(caps, "max_files", 0)
    total = count = 0
    for entry in listed:
        size = entry["size"]
        if count >= max_files or size > max_file or total + size > max_run:
            continue
        try:
            fd = _open(_join(workspace, entry["path"]), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(_fstat(fd).st_mode):
                continue
            sent = 0
            chunk = _read(fd, FILE_CHUNK)
            while True:
                following = _read(fd, FILE_CHUNK) if chunk else b""
                sent += len(chunk)
                if sent > max_file:
                    break  # it grew past the cap while being sent: the host drops what it has of it
                last = not following
                send({"op": "file", "path": entry["path"], "data": _b64encode(chunk).decode(), "end": last})
                if last:
                    total += sent
                    count += 1
                    break
                chunk = following
        except OSError:
            continue
        finally:
            _close(fd)


def _image_type(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class Shower:
    """``show(image_or_path)``: an image sent for the result's image content (``image`` messages), within the
    run message's caps (``max_image`` bytes each, ``max_shown`` of them); the host checks each again."""

    def __init__(self, send: Callable[[dict[str, Any]], None], caps: Any, workspace: str) -> None:
        self._send = send
        self._workspace = workspace
        self._max_image = _cap(caps, "max_image", 0)
        self._max_shown = _cap(caps, "max_shown", 0)
        self._shown = 0

    def __call__(self, image: Any) -> None:
        if isinstance(image, list | tuple):
            images = [i for i in image if isinstance(i, dict) and i.get("type") == "image"]
            if not images:
                raise TypeError(IMAGE_USAGE)
            for item in images:
                self(item)
            return
        if isinstance(image, dict):
            if image.get("type") != "image" or not isinstance(image.get("data"), str):
                raise TypeError(IMAGE_USAGE)
            try:
                data = _b64decode(image["data"], validate=True)
            except ValueError:
                raise ValueError("show(): the image's data is not base64") from None
            what = "the image value"
        elif isinstance(image, str | os.PathLike):
            what = os.fspath(image)
            where = os.path.realpath(_join(self._workspace, what))
            if not where.startswith(self._workspace.rstrip("/") + "/"):
                raise ValueError(f"show(): {what!r} is not a file of the workspace")
            try:
                fd = _open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as exc:
                raise ValueError(f"show(): cannot open {what!r}: {exc.strerror}") from None
            try:
                if not stat.S_ISREG(_fstat(fd).st_mode):
                    raise ValueError(f"show(): {what!r} is not a regular file")
                data = _read(fd, self._max_image + 1)
            finally:
                _close(fd)
        else:
            raise TypeError(IMAGE_USAGE)
        kind = _image_type(data)
        if kind is None:
            raise ValueError(f"show(): {what} is not a png, jpeg, gif or webp image")
        if len(data) > self._max_image:
            raise ValueError(
                f"show(): {what} is over the {self._max_image} bytes a shown image may have "
                "(CODE_MODE_ARTIFACT_INLINE_IMAGE_KB)"
            )
        if self._shown >= self._max_shown:
            raise ValueError(f"show(): a run may show at most {self._max_shown} images")
        self._shown += 1
        self._send({"op": "image", "data": _b64encode(data).decode(), "mimeType": kind})


class OutputBuffer:
    """Printed text of a run: kept up to ``cap`` characters, the rest counted in ``dropped``.

    The rule for sending (``send(text)``): at once when ``CHUNK_CHARS`` are pending, or when a write
    that ends a line comes more than ``FLUSH_SECONDS`` after the last send (so the pieces of one
    ``print`` go together); otherwise the text waits for ``flush``, which the runner calls on its own
    clock (a thread in the zygote; a monitoring hook, and before sleeps, tool calls and the end, under
    Pyodide). Not locked: a caller with threads holds its own lock.
    """

    def __init__(self, send: Callable[[str], None], cap: int, clock: Callable[[], float] = _monotonic) -> None:
        self._send = send
        self._clock = clock
        self.cap = cap
        self.used = 0
        self.dropped = 0
        self._pending: list[str] = []
        self._pending_chars = 0
        self._last_send = float("-inf")  # the first line goes out at once
        self._pending_since = 0.0

    @property
    def pending(self) -> bool:
        return self._pending_chars > 0

    def due(self) -> bool:
        """Whether text has been pending for the flush interval (when to send it without a write)."""
        return self._pending_chars > 0 and self._clock() - self._pending_since >= FLUSH_SECONDS

    def write(self, text: str) -> int:
        """Keep ``text`` (as much as the cap allows); send what is pending when the rule says so."""
        size = len(text)
        room = self.cap - self.used
        if room <= 0:
            self.dropped += size
            return size
        if size > room:
            self.dropped += size - room
            text = text[:room]
        if text:
            now = self._clock()
            if not self._pending_chars:
                self._pending_since = now
            self.used += len(text)
            self._pending.append(text)
            self._pending_chars += len(text)
            if self._pending_chars >= CHUNK_CHARS or (text[-1] == "\n" and now - self._last_send >= FLUSH_SECONDS):
                self.flush()
        return size

    def take(self) -> str:
        """The pending text, now counted as sent (for a caller that sends it with something else)."""
        text = "".join(self._pending)
        self._pending, self._pending_chars = [], 0
        self._last_send = self._clock()
        return text

    def flush(self) -> None:
        if self._pending_chars:
            self._send(self.take())


def progress_report(done: Any, total: Any = None, message: Any = None) -> dict[str, Any]:
    """The ``progress`` message of ``report_progress(done, total, message)``; ``TypeError`` or ``ValueError``
    for figures that are not finite numbers."""
    figures = {"done": done, "total": total}
    for name, value in figures.items():
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"report_progress(done, total=None, message=None): {name} must be a number")
        try:
            if not _isfinite(value):
                raise ValueError(f"report_progress: {name} must be finite")
        except OverflowError:
            raise ValueError(f"report_progress: {name} is too large") from None
    text = None if message is None else str(message)[:MAX_PROGRESS_MESSAGE]
    return {"op": "progress", "done": float(done), "total": None if total is None else float(total), "message": text}


class ProgressReports:
    """A script's ``report_progress``: sent at once when the last one went ``PROGRESS_SECONDS`` ago, else
    kept (the newest wins) until the next report past the interval or ``flush`` (the runner's clock, and
    before ``done``): a loop that reports a million times sends a few messages a second."""

    def __init__(self, send: Callable[[dict[str, Any]], None], clock: Callable[[], float] = _monotonic) -> None:
        self._send = send
        self._clock = clock
        self._last = float("-inf")
        self._pending: dict[str, Any] | None = None
        self._lock = threading.Lock()  # the zygote's flusher thread flushes too

    def report(self, done: Any, total: Any = None, message: Any = None) -> None:
        report = progress_report(done, total, message)
        with self._lock:
            self._pending = report
            if self._clock() - self._last >= PROGRESS_SECONDS:
                self._flush()

    def flush(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._last = self._clock()
            self._send(pending)


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = ("<genexpr>", "<listcomp>", "<setcomp>", "<dictcomp>")
_CO_COROUTINE = 0x80
_CO_ASYNC_GENERATOR = 0x200
_Span = tuple[int, int, int, int]


class AwaitableCalls:
    """When a stub call returns an awaitable instead of its result: a rule on where the call is written.

    - Inside ``async def`` (its comprehensions and generator expressions too): always an awaitable.
    - In top-level code: an awaitable when the call is written inside an ``await`` expression, at any
      depth (``await fs.read(...)``, ``await asyncio.gather(*[fs.read(path=p) for p in paths])``).
    - Everywhere else (other top-level statements, a plain ``def``, a ``lambda``, code that is not the
      script's): the result itself.

    Built from the script's syntax tree and its compiled code; asked with the frame of the caller.
    """

    def __init__(self, tree: ast.Module, filename: str) -> None:
        self._filename = filename
        self._spans: list[_Span] = []  # the expressions of the top level's ``await``s
        self._collect(tree)
        self._parents: dict[types.CodeType, types.CodeType | None] = {}
        self._positions: dict[types.CodeType, list[Any]] = {}

    def include(self, code: types.CodeType) -> None:
        """Add the script's compiled top-level code (and the functions and comprehensions in it)."""
        self._link(code, None)

    def _collect(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_FUNCTIONS, ast.ClassDef)):
                for default in _defaults(child):  # evaluated at the top level: defaults, decorators
                    self._collect_expression(default)
                continue
            if isinstance(child, ast.Await):
                value = child.value
                end_line = value.end_lineno if value.end_lineno is not None else value.lineno
                end_col = value.end_col_offset if value.end_col_offset is not None else 1 << 30
                self._spans.append((value.lineno, value.col_offset, end_line, end_col))
            self._collect(child)

    def _collect_expression(self, node: ast.AST) -> None:
        wrapper = ast.Module(body=[ast.Expr(node)], type_ignores=[]) if isinstance(node, ast.expr) else node
        self._collect(wrapper)

    def _link(self, code: types.CodeType, parent: types.CodeType | None) -> None:
        if code in self._parents:
            return
        self._parents[code] = parent
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._link(const, code)

    def wanted(self, frame: types.FrameType | None) -> bool:
        """Whether the call being made from ``frame`` gets an awaitable."""
        if frame is None or frame.f_code not in self._parents or frame.f_code.co_filename != self._filename:
            return False
        scope: types.CodeType | None = frame.f_code
        while scope is not None and scope.co_name in _COMPREHENSIONS:
            scope = self._parents.get(scope)
        if scope is None:
            return False
        if self._parents.get(scope) is not None or scope.co_name != "<module>":  # a function's body
            return bool(scope.co_flags & (_CO_COROUTINE | _CO_ASYNC_GENERATOR))
        return self._awaited(frame)

    def _awaited(self, frame: types.FrameType) -> bool:
        code = frame.f_code
        positions = self._positions.get(code)
        if positions is None:
            positions = self._positions[code] = list(code.co_positions())
        index = frame.f_lasti // 2
        line, _, column, _ = positions[index] if 0 <= index < len(positions) else (None, None, None, None)
        if line is None:
            return False
        point = (line, column if column is not None else 0)
        return any((s[0], s[1]) <= point < (s[2], s[3]) for s in self._spans)


def _defaults(node: ast.AST) -> list[ast.AST]:
    """What of a definition is evaluated where it is written: decorators, defaults, bases."""
    found: list[ast.AST] = []
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        found.extend(node.decorator_list)
    if isinstance(node, _FUNCTIONS):
        found.extend(d for d in [*node.args.defaults, *node.args.kw_defaults] if d is not None)
    if isinstance(node, ast.ClassDef):
        found.extend([*node.bases, *(k.value for k in node.keywords)])
    return found


# ----- skills ----------------------------------------------------------------------------------------------

_JSON_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def skill_arguments(name: str, schema: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A skill's call checked against its parameters schema: positional arguments in the schema's order, every
    required one given, no unknown one (unless the schema allows more), each of its type; a ``TypeError``
    naming the parameter otherwise."""
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    order = list(props)
    if len(args) > len(order):
        raise TypeError(f"skills.{name}() takes {len(order)} positional arguments but {len(args)} were given")
    bound = dict(zip(order, args, strict=False))
    for key, value in kwargs.items():
        if key in bound:
            raise TypeError(f"skills.{name}() got parameter {key!r} twice")
        bound[key] = value
    if schema.get("additionalProperties") is not True:
        unknown = [k for k in bound if k not in props]
        if unknown:
            raise TypeError(
                f"skills.{name}() has no parameter {unknown[0]!r} (parameters: {', '.join(order) or 'none'})"
            )
    required = schema.get("required")
    missing = [r for r in (required if isinstance(required, list) else []) if r not in bound]
    if missing:
        raise TypeError(f"skills.{name}() is missing the required parameter {missing[0]!r}")
    for key, value in bound.items():
        sub = props.get(key)
        kind = sub.get("type") if isinstance(sub, dict) else None
        kinds = [k for k in (kind if isinstance(kind, list) else [kind]) if k in _JSON_CHECKS]
        if kinds and not any(_JSON_CHECKS[k](value) for k in kinds):
            raise TypeError(
                f"skills.{name}(): parameter {key!r} must be {' or '.join(kinds)}, not {type(value).__name__}"
            )
    return bound


class SkillNamespace(type):
    """The type of ``skills`` in a Python run: a class (as the stub namespaces are, so the ``local`` interpreter
    hands it over as it is) with one static method per skill the host sent; any other name says which exist."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        known = ", ".join(sorted(k for k in vars(cls) if not k.startswith("_"))) or "none"
        raise AttributeError(f"no skill {name!r} (skills: {known}; save one with save_skill)")

    def __repr__(cls) -> str:
        return f"<skills: {', '.join(sorted(k for k in vars(cls) if not k.startswith('_'))) or 'none'}>"


def skill_namespace(specs: Any, define: Callable[[dict[str, Any]], Callable[..., Any]]) -> type:
    """The ``skills`` namespace of a run from the run message's ``skills``. ``define`` makes a skill's function
    from its spec in the run's own interpreter (real Python under cpython and pyodide, the AST interpreter
    under local); each is defined on its first call. A spec the host ``refused`` (a stale skill under
    ``CODE_MODE_STALE_SKILLS=refuse``) raises its reason when called."""
    members: dict[str, Any] = {"__doc__": "Saved skills: skills.name(...) runs the skill in this run."}
    for spec in specs if isinstance(specs, list) else []:
        if isinstance(spec, dict) and isinstance(spec.get("name"), str) and spec["name"].isidentifier():
            members[spec["name"]] = staticmethod(_skill_function(spec, define))
    return SkillNamespace("skills", (), members)


def _skill_function(spec: dict[str, Any], define: Callable[[dict[str, Any]], Callable[..., Any]]) -> Callable[..., Any]:
    name: str = spec["name"]
    given = spec.get("schema")
    schema: dict[str, Any] = given if isinstance(given, dict) else {}
    refused = spec.get("refused")
    defined: list[Callable[..., Any]] = []

    def skill(*args: Any, **kwargs: Any) -> Any:
        if isinstance(refused, str):
            raise ToolError(refused)
        arguments = skill_arguments(name, schema, args, kwargs)
        try:
            if not defined:
                defined.append(define(spec))
            return defined[0](**arguments)
        except Exception as exc:
            if getattr(exc, "_cm_line", None) is not None:  # a line of the skill's code, not of the script
                exc._cm_line = None  # type: ignore[attr-defined]  # the script's calling line is reported
            raise

    skill.__name__ = skill.__qualname__ = name
    return skill


def define_compiled(spec: dict[str, Any], globals_: dict[str, Any]) -> Callable[..., Any]:
    """A skill's function compiled as real Python (cpython, pyodide) in a copy of the run's globals (the stubs,
    ``call_tool``, ``skills``), its frames named ``<skill NAME>``."""
    namespace = {**globals_, "__name__": f"skill_{spec['name']}"}
    exec(compile(str(spec.get("source") or ""), f"<skill {spec['name']}>", "exec"), namespace)
    function = namespace.get(str(spec.get("entry") or spec["name"]))
    if not callable(function):
        raise TypeError(f"skills.{spec['name']}: its code defines no function {spec.get('entry')!r}")
    return function
