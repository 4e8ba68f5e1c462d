"""The ``local`` runner: smolagents' ``LocalPythonExecutor`` (an AST interpreter) in a worker process.

The interpreter refuses imports outside an allow-list, dunder access and unlisted builtins; it is one
layer, not the sandbox (smolagents itself says it "is not a security sandbox"). The worker process,
its sandbox and its rlimits are what stand between a script and the host.
"""

from __future__ import annotations

from ..sandbox import Profile, Sandbox
from .process import ProcessRunner, python_launcher

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

    def __init__(self, *, sandbox: Sandbox, pool_size: int, default_profile: Profile) -> None:
        launcher = python_launcher("local", sandbox, SAFE_IMPORTS)
        super().__init__(launcher, sandbox=sandbox, pool_size=pool_size, default_profile=default_profile)
