"""The sandbox side of every Python runner, defined once: what a script sees and how its run is reported.

Imported as ``cm_runtime`` in two places, standard library only, on Python 3.11 and later:

- by the run child of the zygote (``worker.py``, the ``local`` and ``cpython`` runners), from this folder;
- inside Pyodide (the ``pyodide`` runner): ``pyodide_worker.ts`` writes this file into site-packages beside
  the prelude (``_codemode``) when it makes the memory snapshot, whose digest covers this file's bytes.

Here: the names a script gets (``ToolError``, ``final_answer``), the limits and intervals of a run's
output and return value, the printed-output buffer with its flush rule, the check of tool arguments and
the reading of the host's answers, the reports of values, errors and files, and the rule for when a
stub call is awaitable (``AwaitableCalls``). What each runner adds is its transport: a channel with a
flusher thread in the zygote, the worker's bridge function and no threads under Pyodide.

Everything a script does with these objects stays in its own sandbox; the host checks what comes out.
"""

from __future__ import annotations

import ast
import json
import os
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

# Private references: a script may replace ``json.dumps`` or ``os.walk`` in its own interpreter, and the
# result of its run must still be reported.
_dumps = json.dumps
_walk = os.walk
_lstat = os.lstat
_join = os.path.join
_relpath = os.path.relpath
_repr = repr
_monotonic = time.monotonic


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
