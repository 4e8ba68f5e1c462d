"""The worker's side of the bridge: messages, captured output, and the values and errors it reports.

Part of the program that runs inside the sandbox (see ``worker.py``): standard library only.
"""

from __future__ import annotations

import io
import json
import os
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


class FinalAnswer(BaseException):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


class Channel:
    """One end of a bridge channel: JSON lines on a pair of file descriptors."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._in = os.fdopen(read_fd, "rb")
        self._out = os.fdopen(write_fd, "wb")
        self._next_id = 0
        self._send_lock = threading.Lock()  # the output flusher thread sends too
        self.output: Output | None = None

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
        data = b"".join(json.dumps(m, separators=(",", ":")).encode() + b"\n" for m in messages)
        with self._send_lock:
            self._out.write(data)
            self._out.flush()

    def receive_line(self) -> bytes:
        line = self._in.readline()
        if not line:
            os._exit(0)  # the host is gone
        return line

    def receive(self) -> dict[str, Any]:
        return json.loads(self.receive_line())

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
        self.cap = cap
        self._used = 0
        self._pending: list[str] = []
        self._pending_chars = 0
        self._lock = threading.Lock()
        self.dropped = 0
        self._armed = threading.Event()

    def start_flusher(self) -> None:
        """Start the flusher thread; it waits, idle, until ``arm`` gives the cap."""

        def flush_every_tick() -> None:
            self._armed.wait()
            while True:
                time.sleep(FLUSH_SECONDS)
                self.flush()

        threading.Thread(target=flush_every_tick, name="output-flusher", daemon=True).start()

    def arm(self, cap: int) -> None:
        self.cap = cap
        self._armed.set()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:  # pyright: ignore[reportIncompatibleMethodOverride]
        if not isinstance(text, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            room = self.cap - self._used
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

    def finish(self, message: dict[str, Any]) -> None:
        """Send what is pending and then ``message`` (the run's ``done``) in one write."""
        with self._lock:
            self._flush_locked(message)

    def _flush_locked(self, *then: dict[str, Any]) -> None:
        messages = [{"op": "output", "data": "".join(self._pending)}] if self._pending else []
        self._pending, self._pending_chars = [], 0
        if messages or then:
            self._channel.send(*messages, *then)

    def __str__(self) -> str:
        return ""


def jsonable(value: Any, cap: int) -> tuple[Any, bool]:
    """The value as JSON (else its repr), and whether it had to be cut to ``cap`` characters."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        value = text = repr(value)
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
