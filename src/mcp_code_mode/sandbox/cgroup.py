"""A memory cgroup per worker, where the host may make one: the memory limit of a run then covers every
process it forks (rlimits are per process), and shared memory it touches.

As root, each worker gets a child of the server's own memory cgroup (cgroup v1 ``memory`` or v2 with
the ``memory`` controller), limited to the run's memory plus the zygote's own, bound into the sandbox
at ``SANDBOX_CGROUP``; the worker moves itself in (``cgroup.procs``) while it is still root, before
anything else runs, and cannot move out (the files are root's). Where no cgroup can be made, the limit
is per process only, and ``get_execution_limits`` says so. On cgroup v2 the worker's cgroup also gets
``pids.max`` and a ``cpu.weight`` below the server's, where those controllers are enabled.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

SANDBOX_CGROUP = "/sandbox/cgroup"
"""Where a worker's own cgroup directory appears inside its sandbox."""
_counter = itertools.count()


@dataclass
class MemoryCgroups:
    """Makes and removes per-worker memory cgroups under ``parent``."""

    parent: Path
    version: int
    """1 (``memory.limit_in_bytes``) or 2 (``memory.max``)."""
    pids: int = 512
    """``pids.max`` of a worker's cgroup (cgroup v2 with the pids controller)."""
    pending: list[Path] = field(default_factory=list[Path])
    """Cgroups whose last processes were still exiting when their worker was released: removed later."""

    @classmethod
    def detect(cls) -> MemoryCgroups | None:
        """The server's memory cgroup, if this process may make children in it; else None."""
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            return None
        try:
            lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
        except OSError:
            return None
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                found = cls._usable(Path("/sys/fs/cgroup/memory") / path.lstrip("/"), 1)
                if found is not None:
                    return found
            if controllers == "":
                found = cls._usable(Path("/sys/fs/cgroup") / path.lstrip("/"), 2)
                if found is not None:
                    return found
        return None

    @classmethod
    def _usable(cls, parent: Path, version: int) -> MemoryCgroups | None:
        if version == 2:
            try:
                if "memory" not in (parent / "cgroup.subtree_control").read_text(encoding="utf-8").split():
                    return None
            except OSError:
                return None
        probe = cls(parent, version)
        try:
            directory = probe.make(64)
        except OSError:
            return None
        probe.remove(directory)
        probe.sweep()
        return probe

    def sweep(self) -> None:
        """Remove the cgroups that servers which are gone left behind (a SIGKILLed server, say)."""
        try:
            entries = list(self.parent.iterdir())
        except OSError:
            return
        for entry in entries:
            match = re.fullmatch(r"mcp-code-mode-(\d+)-\d+", entry.name)
            if match and not Path(f"/proc/{match.group(1)}").exists():
                try:
                    entry.rmdir()
                except OSError:
                    pass

    def make(self, memory_mb: int) -> Path:
        """A new cgroup limited to ``memory_mb`` (swap included where the kernel accounts it)."""
        self._retry()
        directory = self.parent / f"mcp-code-mode-{os.getpid()}-{next(_counter)}"
        directory.mkdir(mode=0o755)
        limit = str(memory_mb * 1024 * 1024)
        try:
            if self.version == 1:
                (directory / "memory.limit_in_bytes").write_text(limit, encoding="utf-8")
                swap = directory / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    try:
                        swap.write_text(limit, encoding="utf-8")
                    except OSError:
                        pass
            else:
                (directory / "memory.max").write_text(limit, encoding="utf-8")
                # Best effort, where those controllers are enabled too: no swap, a process cap, and a CPU
                # weight below the server's (100 is the default weight).
                for name, value in (("memory.swap.max", "0"), ("pids.max", str(self.pids)), ("cpu.weight", "20")):
                    try:
                        (directory / name).write_text(value, encoding="utf-8")
                    except OSError:
                        pass
        except OSError:
            self.remove(directory)
            raise
        return directory

    def remove(self, directory: Path) -> None:
        """Remove a worker's cgroup (its processes were killed; the last may still be exiting: then later)."""
        self._retry()
        try:
            directory.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            self.pending.append(directory)

    def _retry(self) -> None:
        still: list[Path] = []
        for directory in self.pending:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                still.append(directory)
        self.pending = still

    def close(self) -> None:
        """At shutdown: remove what is left (waiting up to 2 s for processes that are still exiting)."""
        deadline = time.monotonic() + 2
        self._retry()
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.02)
            self._retry()
        for directory in self.pending:
            logger.warning("the cgroup %s still has processes", directory)
