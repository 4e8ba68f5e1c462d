"""Why a Deno worker died before its run's ``done``, read from the end of its stderr.

A Deno process ends without a word to the bridge in two ways a script can cause: V8 aborts it when the
heap is full (``--max-old-space-size``; the process dies by a trap signal after printing its GC log),
and Deno exits when the top-level await of the script's module can never settle. Both leave their
reason on stderr; ``explain_death`` turns it into the error the run reports. (The stderr tail is the
worker's, which the script may write on too: it only ever picks among these fixed explanations.)
"""

from __future__ import annotations

import re

from ..bridge import ErrorDetail

_OUT_OF_HEAP = ("Fatal JavaScript out of memory", "Reached heap limit", "JavaScript heap out of memory")
_OUT_OF_PROCESS_MEMORY = "Fatal process out of memory"
_INVALID_SIZE = "Fatal JavaScript invalid size error"
_NEVER_RESOLVED = "Top-level await promise never resolved"
_SCRIPT_FRAME = re.compile(r"data:application/\w+;base64,[^:\s]*:(\d+):\d+")


def explain_death(stderr_tail: str, heap_mb: int) -> ErrorDetail | None:
    """The error of a run whose Deno worker died with ``stderr_tail``, or None when it says nothing known.

    ``heap_mb`` is the worker's V8 heap limit (``--max-old-space-size``), named in the out-of-memory message.
    """
    if any(marker in stderr_tail for marker in _OUT_OF_HEAP):
        return ErrorDetail("MemoryError", f"out of memory: the script's JavaScript heap may use {heap_mb} MB")
    if _OUT_OF_PROCESS_MEMORY in stderr_tail:
        return ErrorDetail(
            "MemoryError",
            f"out of memory: the script's process could not get more memory (its JavaScript heap may use {heap_mb} MB)",
        )
    if _INVALID_SIZE in stderr_tail:
        return ErrorDetail("MemoryError", "out of memory: the script made an array or string larger than V8 allows")
    if _NEVER_RESOLVED in stderr_tail:
        where = _SCRIPT_FRAME.search(stderr_tail)
        message = "the script awaits a promise that never settles (nothing is left that could resolve it)"
        return ErrorDetail("Error", message, int(where.group(1)) if where else None)
    return None


__all__ = ["explain_death"]
