"""OS isolation of worker processes: bubblewrap namespaces, rlimits, a scrubbed environment.

``detect_sandbox(settings)`` decides once, at start-up, what this host can do:

- ``namespaces``: bubblewrap runs. Each worker gets new pid, ipc, uts, mount, cgroup and network
  namespaces (loopback only: a run with the network reaches the host's egress proxy through a Unix
  socket bound in, see ``egress``), a root built from read-only
  binds of the interpreter and system libraries only, a size-limited tmpfs workspace and /tmp, and
  a non-root uid with no capabilities. As root the uid is a real unprivileged one (a user namespace
  would map it back to root, and the kernel would then ignore RLIMIT_NPROC); otherwise a user
  namespace maps it.
- ``process``: bubblewrap is missing or cannot create namespaces (macOS, some containers). Workers
  are plain child processes with rlimits and a scrubbed environment; the AST interpreter of the
  ``local`` runner is then the only layer between a script and the host's files.

``CODE_MODE_REQUIRE_ISOLATION=true`` refuses to run code in ``process`` mode.
"""

from __future__ import annotations

from ._detect import detect_sandbox
from .bwrap import BwrapSandbox, find_bwrap
from .core import Limits, Profile, Sandbox, SandboxSpec, sandbox_environment

__all__ = [
    "BwrapSandbox",
    "detect_sandbox",
    "Limits",
    "Profile",
    "Sandbox",
    "SandboxSpec",
    "find_bwrap",
    "sandbox_environment",
]
