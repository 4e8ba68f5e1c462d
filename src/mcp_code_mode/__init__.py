"""mcp-code-mode: an MCP server where the model writes one script and every downstream tool is a function.

Public API::

    from mcp_code_mode import CodeMode

    async with CodeMode.from_config("mcp_servers.json") as cm:
        result = await cm.execute("print(filesystem.list_directory(path='.'))", language="python")
"""

from __future__ import annotations

__version__ = "0.1.0"

import logging
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._lazy import lazy_names
from .errors import (
    CodeModeError,
    ConfigError,
    DownstreamError,
    PackageError,
    RunnerError,
    ServerBusy,
    ServerUnavailable,
    UnsupportedError,
)

if TYPE_CHECKING:
    from .engine import CodeMode, ErrorDetail, FileEntry, RunProgress, RunResult

# Imported from ``engine`` on first use: the engine imports the MCP SDK (about 0.5 s), which a submodule's
# importer (``mcp_code_mode.config``, the CLI before it serves, a sandbox probe) need not wait for.
__getattr__ = lazy_names(
    __name__, dict.fromkeys(("CodeMode", "ErrorDetail", "FileEntry", "RunProgress", "RunResult"), ".engine")
)


__all__ = [
    "CodeMode",
    "CodeModeError",
    "ConfigError",
    "DownstreamError",
    "ErrorDetail",
    "FileEntry",
    "PackageError",
    "RunProgress",
    "RunResult",
    "RunnerError",
    "ServerBusy",
    "ServerUnavailable",
    "UnsupportedError",
    "__version__",
]


class _KeepRootLogger(MetaPathFinder):
    """``wordllama`` (the cache's embedding model) calls ``logging.basicConfig(level=INFO)`` when it is
    imported, which would turn on INFO logging for the whole process of anyone using this library. Its
    import, whoever asks for it and whenever, leaves the root logger's handlers and level as they were."""

    NAMES = frozenset({"wordllama"})

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in self.NAMES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                loader: Any = spec.loader
                if loader is not None and hasattr(loader, "exec_module"):
                    loader.exec_module = _keeping_root_logger(loader.exec_module)  # this module's loader only
                return spec
        return None


def _keeping_root_logger(exec_module: Any) -> Any:
    def run(module: ModuleType) -> None:
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            exec_module(module)
        finally:
            for handler in [h for h in root.handlers if h not in handlers]:
                root.removeHandler(handler)
            root.setLevel(level)

    return run


if not any(isinstance(finder, _KeepRootLogger) for finder in sys.meta_path):
    sys.meta_path.insert(0, _KeepRootLogger())
logging.getLogger(__name__).addHandler(logging.NullHandler())
