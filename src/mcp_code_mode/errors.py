"""Exceptions raised by mcp-code-mode.

Every error the package raises on purpose derives from one base class::

    CodeModeError
    ├── ConfigError            a bad mcp_servers.json or setting; names the file, the entry and the field
    ├── DownstreamError        a downstream MCP server could not be started or reached
    │   └── ServerUnavailable  the server is disabled, failed to start, or died mid-call
    ├── UnsupportedError       a language, runner or feature this build does not offer (yet)
    ├── PackageError           a package request that is not allowed, or an install that failed
    ├── ServerBusy             no run slot and no room to queue (retryable; the message gives the load)
    ├── database.StoreError    PostgreSQL refused or cannot be reached (also a sqlite3.DatabaseError)
    └── RunnerError            a runner could not start or talk to its worker process
        └── ProtocolError      a run sent bytes that are not a valid bridge message (ends that run only)

A failing *script* is not an exception: it is a ``RunResult`` with ``success=False``. A failing
downstream *tool* is a result too (``is_error``); inside the sandbox it surfaces as ``ToolError``.
"""

from __future__ import annotations


class CodeModeError(Exception):
    """Base class of every error raised on purpose by mcp-code-mode."""


class ConfigError(CodeModeError):
    """The configuration file or a setting is invalid.

    ``str(error)`` is a complete, user-facing message: it names the file, the server entry and the
    field, so the CLI prints it as is, without a traceback.
    """


class DownstreamError(CodeModeError):
    """A downstream MCP server could not be started or reached."""

    def __init__(self, server: str, message: str) -> None:
        super().__init__(f"server {server!r}: {message}")
        self.server = server
        self.reason = message


class ServerUnavailable(DownstreamError):
    """The server is disabled, failed to start, or its process died."""


class UnsupportedError(CodeModeError):
    """A language, runner or feature that this build does not offer."""


class PackageError(CodeModeError):
    """A package request that is not allowed (the message names the entry), or an install that failed."""


class ServerBusy(CodeModeError):
    """No run slot is free and the run cannot queue (the queue is full, the client holds its share of it, or
    it waited ``CODE_MODE_QUEUE_TIMEOUT_MS``). Retryable; the message gives the current load."""


class RunnerError(CodeModeError):
    """A runner could not start its worker process or lost the connection to it."""


class ProtocolError(RunnerError):
    """What a run sent on its channel is not a valid bridge message: malformed, too large, too deep,
    an unknown op, or a field of the wrong type. It ends that run with this message; nothing else."""
