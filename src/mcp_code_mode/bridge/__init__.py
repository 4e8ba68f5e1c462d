"""The bridge between the host and a sandbox: typed messages, framing, the host loop, the dispatcher.

- ``messages``: the two channels (control, spoken only by code that never runs user code; run,
  which the script can write on) and the checks on everything a run sends;
- ``framing``: JSON lines, bounded decoding (``LineChannel``);
- ``host``: ``serve_run``, the loop every runner uses for a run;
- ``dispatcher``: ``ToolDispatcher``, the host's side of a tool call;
- ``fake``: ``FakeWorker``, an in-memory run for tests of the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from .framing import MAX_MESSAGE_BYTES, LineChannel, decode, encode
from .host import HostRun, ProgressSink, RunChannel, RunClock, serve_run
from .messages import MAX_DEPTH, MAX_PROGRESS_MESSAGE, Call, Done, Output, Progress, parse_run_message
from .outcome import CallEntry, ErrorDetail, FileEntry, NetworkUse, PlanResult, RunResult

if TYPE_CHECKING:
    from .dispatcher import ToolCallRecord, ToolDispatcher, content_to_value, error_text, parse_text, result_to_value

# Imported from ``dispatcher`` on first use: it imports the downstream pool and with it the MCP SDK, which the
# worker pools (``runners._pool``) do not need, and ``serve`` starts the default runner's first worker before
# the SDK is imported.
__getattr__ = lazy_names(
    __name__,
    dict.fromkeys(
        ("ToolCallRecord", "ToolDispatcher", "content_to_value", "error_text", "parse_text", "result_to_value"),
        ".dispatcher",
    ),
)


__all__ = [
    "MAX_DEPTH",
    "MAX_MESSAGE_BYTES",
    "MAX_PROGRESS_MESSAGE",
    "Call",
    "CallEntry",
    "Done",
    "ErrorDetail",
    "FileEntry",
    "HostRun",
    "LineChannel",
    "NetworkUse",
    "Output",
    "PlanResult",
    "Progress",
    "ProgressSink",
    "RunChannel",
    "RunClock",
    "RunResult",
    "ToolCallRecord",
    "ToolDispatcher",
    "content_to_value",
    "decode",
    "encode",
    "error_text",
    "parse_run_message",
    "parse_text",
    "result_to_value",
    "serve_run",
]
