"""The ``cpython`` runner: the script is plain CPython, in the same sandboxed zygote workers.

For code that the AST interpreter's restrictions or speed get in the way of (it runs loops about 90×
slower than CPython). Every import of the standard library works; what the script can reach is
decided by the sandbox alone (see SECURITY.md), so it needs namespaces to be safe.
"""

from __future__ import annotations

from ..sandbox import Profile, Sandbox
from .process import ProcessRunner, python_launcher

PRELOAD: tuple[str, ...] = ("json", "re", "datetime", "collections", "asyncio", "inspect", "traceback")


class CPythonRunner(ProcessRunner):
    name = "cpython"
    languages: tuple[str, ...] = ("python",)
    stub_language = "python"

    def __init__(self, *, sandbox: Sandbox, pool_size: int, default_profile: Profile) -> None:
        launcher = python_launcher("cpython", sandbox, PRELOAD)
        super().__init__(launcher, sandbox=sandbox, pool_size=pool_size, default_profile=default_profile)
