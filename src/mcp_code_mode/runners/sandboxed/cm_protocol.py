"""The zygote's side of the bridge: its channels, and a run's printed output sent on its run channel.

Part of the program that runs inside the sandbox (see ``worker.py``): standard library only. What a
script sees and how a run is reported (``ToolError``, ``jsonable``, the output's cap and flush rule, when a
stub call is awaitable) are ``cm_runtime``'s, shared with the pyodide runner; they are re-exported here
for ``cm_interpreters``.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from cm_runtime import (
    CHUNK_CHARS,
    FLUSH_SECONDS,
    AwaitableCalls,
    FinalAnswer,
    OutputBuffer,
    ToolCalls,
    ToolError,
    error_info,
    jsonable,
    syntax_error,
    tool_arguments,
)

_dumps = json.dumps
_loads = json.loads
"""Private references: a script that replaces ``json.dumps`` in its own interpreter (cpython) does not change
what its run reports (cm_runtime keeps its own for the same reason)."""

__all__ = [
    "CHUNK_CHARS",
    "FLUSH_SECONDS",
    "AwaitableCalls",
    "Channel",
    "FinalAnswer",
    "Output",
    "ToolCalls",
    "ToolError",
    "error_info",
    "jsonable",
    "syntax_error",
    "tool_arguments",
]


class Channel:
    """One end of a bridge channel: JSON lines on a pair of file descriptors."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._in = os.fdopen(read_fd, "rb")
        self._out = os.fdopen(write_fd, "wb")
        self._next_id = 0
        self._names: dict[tuple[str, str], str] = {}  # (server, tool) -> its part of a call message
        self._send_lock = threading.Lock()  # the output flusher thread sends too
        self.output: Output | None = None
        self.tools = ToolCalls(self.send_call, self.receive_result)
        """The run's tool calls, matched to the host's answers (blocking, ``parallel``, awaited)."""

    @classmethod
    def from_stdio(cls) -> Channel:
        """The control channel, on duplicates of stdin and stdout; fds 0 and 1 then point at /dev/null,
        so nothing a script writes there can be mistaken for a message."""
        channel = cls(os.dup(0), os.dup(1))
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        return channel

    @classmethod
    def from_socket(cls, fd: int) -> Channel:
        """A run's channel: one connected socket, read and written."""
        return cls(os.dup(fd), fd)

    def close(self) -> None:
        for stream in (self._in, self._out):
            try:
                stream.close()
            except OSError:
                pass

    def send(self, *messages: dict[str, Any]) -> None:
        """Send messages in one write: the host reads them at once."""
        data = b"".join(_dumps(m, separators=(",", ":")).encode() + b"\n" for m in messages)
        with self._send_lock:
            self._out.write(data)
            self._out.flush()

    def receive_line(self) -> bytes:
        line = self._in.readline()
        if not line:
            os._exit(0)  # the host is gone
        return line

    def receive(self) -> dict[str, Any]:
        return _loads(self.receive_line())

    def send_call(self, server: str, tool: str, payload: str, line: int | None, wait: bool) -> int:
        """Send one ``call`` (its arguments already JSON text, ``payload``) after the pending output; its id."""
        if self.output is not None:
            self.output.flush()
        self._next_id += 1
        names = self._names.get((server, tool))
        if names is None:
            names = f',"server":{_dumps(server)},"tool":{_dumps(tool)},"arguments":'
            if len(self._names) < 1000:
                self._names[server, tool] = names
        at = f',"line":{line}' if line is not None else ""
        hint = ',"wait":true' if wait else ""
        data = f'{{"op":"call","id":{self._next_id}{names}{payload}{at}{hint}}}\n'.encode()
        with self._send_lock:
            self._out.write(data)
            self._out.flush()
        return self._next_id

    def receive_result(self) -> tuple[Any, Any]:
        """The host's next answer: its id and the message."""
        message = self.receive()
        return message.get("id"), message

    def call(self, server: str, tool: str, arguments: Any, line: int | None = None) -> Any:
        """One blocking call (``tools.call``), its arguments checked first."""
        return self.tools.call(server, tool, tool_arguments(server, tool, arguments), line)


class Output(io.TextIOBase):
    """Printed text: the run's ``OutputBuffer`` (cap and flush rule), sent on the run channel.

    A flusher thread also sends whatever is pending every ``FLUSH_SECONDS``, so a line printed before a
    long sleep or computation arrives at once. It is the script's ``sys.stdout`` and ``sys.stderr``
    under the cpython runner, and the ``print`` target of the local one.
    """

    encoding = "utf-8"

    def __init__(self, channel: Channel, cap: int) -> None:
        self._channel = channel
        self._buffer = OutputBuffer(self._send, cap)
        self._lock = threading.Lock()
        self._armed = threading.Event()
        self._also: list[Callable[[], None]] = []

    @property
    def cap(self) -> int:
        return self._buffer.cap

    @property
    def dropped(self) -> int:
        return self._buffer.dropped

    def _send(self, text: str) -> None:  # with the lock held
        self._channel.send({"op": "output", "data": text})

    def start_flusher(self) -> None:
        """Start the flusher thread; it waits, idle, until ``arm`` gives the cap."""

        def flush_every_tick() -> None:
            self._armed.wait()
            while True:
                time.sleep(FLUSH_SECONDS)
                self.flush()

        threading.Thread(target=flush_every_tick, name="output-flusher", daemon=True).start()

    def also_flush(self, flush: Callable[[], None]) -> None:
        """Call ``flush`` too whenever the output is flushed (on each tick of the flusher, before a tool call):
        the run's progress report kept back."""
        self._also.append(flush)

    def arm(self, cap: int) -> None:
        """Start a run's output with its cap (a session's next run starts counting again)."""
        with self._lock:
            self._buffer.flush()
            self._buffer.cap = cap
            self._buffer.used = 0
            self._buffer.dropped = 0
        self._armed.set()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:  # pyright: ignore[reportIncompatibleMethodOverride]
        if not isinstance(text, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            return self._buffer.write(text)

    def __iadd__(self, text: str) -> Output:  # smolagents' print does `state["_print_outputs"] += text`
        self.write(str(text))
        return self

    def flush(self) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        with self._lock:
            self._buffer.flush()
        for flush in self._also:
            flush()

    def finish(self, message: dict[str, Any]) -> None:
        """Send what is pending and then ``message`` (the run's ``done``) in one write."""
        with self._lock:
            text = self._buffer.take()
            self._channel.send(*([{"op": "output", "data": text}] if text else []), message)

    def __str__(self) -> str:
        return ""
