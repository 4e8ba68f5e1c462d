"""The ``local`` runner: smolagents' ``LocalPythonExecutor`` (an AST interpreter) in a worker process.

The interpreter refuses imports outside an allow-list, dunder access and unlisted builtins; it is one
layer, not the sandbox (smolagents itself says it "is not a security sandbox"). The process is what
the host kills on a timeout.
"""

from __future__ import annotations

from pathlib import Path

from .process import ProcessRunner, python_worker_argv

# Standard-library modules a script may import under the local runner, besides smolagents' own base list.
SAFE_IMPORTS: tuple[str, ...] = (
    "collections",
    "datetime",
    "itertools",
    "math",
    "queue",
    "random",
    "re",
    "stat",
    "statistics",
    "time",
    "unicodedata",
    "json",
    "csv",
    "base64",
    "hashlib",
    "hmac",
    "string",
    "textwrap",
    "decimal",
    "fractions",
    "functools",
    "operator",
    "dataclasses",
    "typing",
    "enum",
    "uuid",
    "copy",
    "heapq",
    "bisect",
    "html",
    "difflib",
    "pprint",
    "zlib",
    "struct",
    "calendar",
    "zoneinfo",
    "urllib.parse",
    "ipaddress",
    "secrets",
    "binascii",
    "fnmatch",
    "array",
    "numbers",
    "colorsys",
)


class LocalRunner(ProcessRunner):
    name = "local"
    languages: tuple[str, ...] = ("python",)
    stub_language = "python"
    isolation = "process"

    def __init__(self, *, pool_size: int, workspace_root: Path | None) -> None:
        preload = ["smolagents.local_python_executor", *SAFE_IMPORTS]
        super().__init__(python_worker_argv("local", preload), pool_size=pool_size, workspace_root=workspace_root)
