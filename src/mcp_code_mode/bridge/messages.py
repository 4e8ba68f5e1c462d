"""The messages of the bridge, typed, and the checks every message from a run goes through.

Two channels connect the host and a worker:

- the **control channel**, spoken only by code that never runs user code: a zygote's ``ready`` (with
  the pid of the child it forked for the next run) and ``exit`` (how that child ended), and the
  host's ``prepare`` and ``run``. A worker that runs user code itself (Deno, Pyodide) says ``ready``
  once, before any user code ran, and is never given a second run. The ``deno`` runner's supervisor (isolate
  mode) speaks both on one channel no run can reach (fds 3 and 4): a run's messages, each parsed and written
  again by it until the run's ``done``, then its own ``exit`` and ``ready``; a run's message it cannot accept
  becomes ``{"op": "refused", "reason": ...}``, which ends the run with ``ProtocolError``.
- the **run channel**, which the script can write on: only ``call``, ``output``, ``progress``, ``file``,
  ``image`` and one ``done``, parsed by ``parse_run_message``. Everything on it is untrusted input about this run
  alone; any
  other op, a field of the wrong type, or a value nested deeper than ``MAX_DEPTH`` ends the run with
  ``ProtocolError``. The host answers a ``call`` with ``result`` (``value`` or ``error``).

worker → host (run channel)::

    {"op": "call", "id": 7, "server": "fs", "tool": "read", "arguments": {...}}   ids increase; "wait": true
                                                   when the worker blocks until this answer
    {"op": "output", "data": "..."}
    {"op": "progress", "done": 3, "total": 10, "message": "page 3"}   total and message may be null; the
                                                   host coalesces and caps them (``serve_run``)
    {"op": "file", "path": "out/a.png", "data": "<base64>", "end": false}   a workspace file's bytes, in
                                                   chunks sent one file after another (``end`` on its last)
    {"op": "image", "data": "<base64>", "mimeType": "image/png"}            ``show(...)``: an image for the result
    {"op": "done", "success": true, "returnValue": ..., "error": null, "files": [...], "dropped": 0}

host → worker::

    {"op": "prepare", "stubs": "<python source>", "version": 3}   control: compile stubs ahead
    {"op": "run", "code": "...", ...}                              control (zygote) or run channel
    {"op": "result", "id": 7, "value": ...}                        or ``"error": {"message": ...}``
"""

from __future__ import annotations

import base64
import binascii
import math
import posixpath
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProtocolError
from .outcome import ErrorDetail, FileEntry

MAX_DEPTH = 100
"""Deepest nesting of a value (tool arguments, a return value) the host accepts from a run."""
MAX_FILES = 1000
"""Most workspace files a ``done`` may list."""
MAX_NAME = 4096
"""Longest server, tool, error type or file name accepted."""
MAX_PROGRESS_MESSAGE = 1000
"""Longest ``progress`` message accepted (every runtime cuts a script's message to it)."""


@dataclass(frozen=True)
class Call:
    id: int
    server: str
    tool: str
    arguments: Any
    line: int | None = None
    """The script's line that made the call, as the sandbox says (shown in plans and questions only)."""
    wait: bool = False
    """The worker says it sends nothing more until this call is answered (a blocking stub call): the host
    may answer it inline. A hint about scheduling only; a worker that sends more anyway is just served
    in turn."""


@dataclass(frozen=True)
class Output:
    data: str


@dataclass(frozen=True)
class Done:
    success: bool
    return_value: Any = None
    error: ErrorDetail | None = None
    files: list[FileEntry] = field(default_factory=list[FileEntry])
    dropped: int = 0
    run: int | None = None
    """The run number the ``run`` message gave (a session's runs are numbered), echoed; None when absent."""


@dataclass(frozen=True)
class Progress:
    """What a script said of its progress (``report_progress``): finite numbers, a bounded message."""

    done: float
    total: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class FilePart:
    """Bytes of a file the run left in its workspace (a chunk; ``end`` on a file's last one). The path is
    checked here (relative, normalized, no ``..``, no control characters); nothing else of it is believed."""

    path: str
    data: bytes
    end: bool


@dataclass(frozen=True)
class Image:
    """An image the script sent with ``show(...)``: its bytes and the MIME type it claims (checked by the host)."""

    data: bytes
    mime_type: str


RunMessage = Call | Output | Progress | Done | FilePart | Image


def depth_within(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (parsed JSON) nests no deeper than ``limit``; iterative, so it cannot overflow."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return True


def _text(message: dict[str, Any], key: str, *, limit: int = MAX_NAME, optional: bool = False) -> str | None:
    value = message.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"the run sent a {message.get('op')!r} message whose {key!r} is not a string")
    if len(value) > limit:
        raise ProtocolError(f"the run sent a {message.get('op')!r} message whose {key!r} is too long")
    return value


def _number(message: dict[str, Any], key: str, *, optional: bool = False) -> float | None:
    value = message.get(key)
    if value is None and optional:
        return None
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer beyond any float
        number = math.nan
    if not math.isfinite(number):
        raise ProtocolError(f"the run sent a {message.get('op')!r} message whose {key!r} is not a finite number")
    return number


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _error(value: Any) -> ErrorDetail | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProtocolError("the run sent a 'done' whose 'error' is not an object")
    wrapped = {"op": "done", **value}
    line = value.get("line")
    return ErrorDetail(
        type=_text(wrapped, "type", optional=True) or "Error",
        message=_text(wrapped, "message", limit=1 << 20, optional=True) or "",
        line=line if _count(line) is not None else None,
        traceback=_text(wrapped, "traceback", limit=1 << 20, optional=True),
    )


def _files(value: Any) -> list[FileEntry]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_FILES:
        raise ProtocolError(f"the run sent a 'done' whose 'files' is not a list of at most {MAX_FILES}")
    files: list[FileEntry] = []
    for entry in value:
        if not isinstance(entry, dict):
            raise ProtocolError("the run sent a 'done' with a file entry that is not an object")
        path, size = entry.get("path"), _count(entry.get("size"))
        if not isinstance(path, str) or size is None or not _relative(path):
            raise ProtocolError(f"the run sent a 'done' with an invalid file entry: {str(entry)[:200]}")
        files.append(FileEntry(path, size))
    return files


def _relative(path: str) -> bool:
    """A plain relative path inside the workspace: no NUL, no control characters, no ``..``, not absolute."""
    if not path or len(path) > MAX_NAME or path.startswith("/") or any(ord(c) < 32 for c in path):
        return False
    return ".." not in posixpath.normpath(path).split("/")


def normalized_path(path: str) -> str | None:
    """A workspace path as the host keeps it (``a/./b`` is ``a/b``), or None when it is not a plain relative
    path inside the workspace."""
    if not _relative(path):
        return None
    clean = posixpath.normpath(path)
    return None if clean in ("", ".") or clean.startswith("/") else clean


def _base64(message: dict[str, Any]) -> bytes:
    data = message.get("data")
    if not isinstance(data, str):
        raise ProtocolError(f"the run sent a {message.get('op')!r} whose 'data' is not a string")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(f"the run sent a {message.get('op')!r} whose 'data' is not base64") from None


def parse_run_message(message: dict[str, Any]) -> RunMessage:
    """A message from a run's channel, checked; ``ProtocolError`` for anything else."""
    op = message.get("op")
    if op == "call":
        ident = message.get("id")
        if not isinstance(ident, int) or isinstance(ident, bool):
            raise ProtocolError("the run sent a 'call' whose 'id' is not an integer")
        arguments = message.get("arguments")
        if not depth_within(arguments):
            raise ProtocolError(f"the run sent tool arguments nested deeper than {MAX_DEPTH}")
        server, tool = _text(message, "server"), _text(message, "tool")
        assert server is not None and tool is not None
        line = message.get("line")
        valid = isinstance(line, int) and not isinstance(line, bool) and 0 < line < 10_000_000
        wait = message.get("wait") is True
        return Call(ident, server, tool, arguments, line if valid else None, wait)  # a bad line is ignored
    if op == "output":
        data = message.get("data")
        if not isinstance(data, str):
            raise ProtocolError("the run sent an 'output' whose 'data' is not a string")
        return Output(data)
    if op == "progress":
        done = _number(message, "done")
        assert done is not None
        total = _number(message, "total", optional=True)
        return Progress(done, total, _text(message, "message", limit=MAX_PROGRESS_MESSAGE, optional=True))
    if op == "done":
        success = message.get("success")
        if not isinstance(success, bool):
            raise ProtocolError("the run sent a 'done' whose 'success' is not true or false")
        value = message.get("returnValue")
        if not depth_within(value):
            raise ProtocolError(f"the run returned a value nested deeper than {MAX_DEPTH}")
        dropped = _count(message.get("dropped", 0))
        number = message.get("run")
        run = number if isinstance(number, int) and not isinstance(number, bool) else None
        return Done(success, value, _error(message.get("error")), _files(message.get("files")), dropped or 0, run)
    if op == "file":
        path = normalized_path(_text(message, "path") or "")
        if path is None:
            raise ProtocolError(f"the run sent a 'file' with an invalid path: {str(message.get('path'))[:200]!r}")
        return FilePart(path, _base64(message), message.get("end") is True)
    if op == "image":
        mime = _text(message, "mimeType", limit=100)
        assert mime is not None
        return Image(_base64(message), mime)
    if op == "refused":  # the deno runner's supervisor, ending a run whose message it could not accept
        reason = message.get("reason")
        shown = reason[:300] if isinstance(reason, str) else "no reason given"
        raise ProtocolError(f"the run's isolate sent a message its supervisor refused: {shown}")
    shown = op if isinstance(op, str) and len(op) < 40 else type(op).__name__
    raise ProtocolError(f"the run sent a message the bridge does not know (op {shown!r})")
