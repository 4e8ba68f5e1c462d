"""mcp-code-mode: an MCP server where the model writes one script and every downstream tool is a function.

Public API::

    from mcp_code_mode import CodeMode

    async with CodeMode.from_config("mcp_servers.json") as cm:
        result = await cm.execute("print(filesystem.list_directory(path='.'))", language="python")
"""

from __future__ import annotations

__version__ = "0.1.0"

from .engine import CodeMode, ErrorDetail, FileEntry, RunProgress, RunResult
from .errors import (
    CodeModeError,
    ConfigError,
    DownstreamError,
    RunnerError,
    ServerBusy,
    ServerUnavailable,
    UnsupportedError,
)

__all__ = [
    "CodeMode",
    "CodeModeError",
    "ConfigError",
    "DownstreamError",
    "ErrorDetail",
    "FileEntry",
    "RunProgress",
    "RunResult",
    "RunnerError",
    "ServerBusy",
    "ServerUnavailable",
    "UnsupportedError",
    "__version__",
]
