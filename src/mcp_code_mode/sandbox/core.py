"""The sandbox's data: limits, profiles, the environment, and how a worker is launched."""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._leftovers import make_owned_directory, remove_owned_directory, sweep_owned_directories
from ..config import Settings
from ..egress import GATE_PREFIX, SOCKET_NAME, make_gate_directory
from ..errors import RunnerError

logger = logging.getLogger(__name__)

Isolation = Literal["namespaces", "process"]
SANDBOX_WORKSPACE = "/workspace"
"""Where a run's workspace appears inside a namespaced sandbox."""
WORKER_DIR = Path(__file__).resolve().parent.parent / "runners" / "sandboxed"
"""The sandbox-side programs' folder on the host (the zygote, ``cm_launch.py``)."""
V8_RESERVE_MB = 640
"""What a Deno process holds before any script (V8's code range and heap reservations count as data):
added to the memory limit for the ``deno`` and ``pyodide`` runners' data rlimit."""


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to the process that runs a script (``setrlimit`` after fork)."""

    memory_mb: int
    cpu_seconds: int
    file_size_mb: int
    open_files: int
    processes: int
    workspace_mb: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        return cls(
            memory_mb=settings.limit_memory_mb,
            cpu_seconds=settings.limit_cpu_seconds,
            file_size_mb=settings.limit_file_size_mb,
            open_files=settings.limit_open_files,
            processes=settings.limit_processes,
            workspace_mb=settings.limit_workspace_mb,
        )

    def for_run(self, timeout: float) -> dict[str, int]:
        """The rlimits of one run, as the worker applies them (CPU capped near the run's timeout)."""
        return {
            "as": self.memory_mb * 1024 * 1024,
            "cpu": max(1, min(self.cpu_seconds, int(timeout) + 1)),
            "fsize": self.file_size_mb * 1024 * 1024,
            "nofile": self.open_files,
            "nproc": self.processes,
        }

    def for_process(self, *, memory_mb: int | None = None) -> dict[str, int]:
        """The rlimits of a worker that runs user code itself (Deno): set once, before it starts. Memory is
        RLIMIT_DATA (which covers ArrayBuffers and WebAssembly memory; V8 reserves more address space
        than RLIMIT_AS could allow), CPU covers the worker's start and one run."""
        return {
            "data": ((memory_mb or self.memory_mb) + V8_RESERVE_MB) * 1024 * 1024,
            "cpu": self.cpu_seconds + 30,
            "fsize": self.file_size_mb * 1024 * 1024,
            "nofile": self.open_files,
            "nproc": self.processes,
        }

    def describe(self) -> dict[str, Any]:
        return {
            "memoryMB": self.memory_mb,
            "cpuSeconds": self.cpu_seconds,
            "fileSizeMB": self.file_size_mb,
            "openFiles": self.open_files,
            "processes": self.processes,
            "workspaceMB": self.workspace_mb,
        }


@dataclass(frozen=True)
class Profile:
    """What distinguishes one kind of worker sandbox from another."""

    network: bool = False
    environment: str | None = None
    """A package environment (host directory) mounted read-only and put on ``sys.path``."""
    preload: tuple[str, ...] = ()
    """Modules the worker imports before its first run (the environment's packages)."""

    def worker_arguments(self, environment_path: str | None) -> list[str]:
        """Worker flags for this profile; ``environment_path`` is where the environment appears to it."""
        argv: list[str] = []
        if self.preload:
            argv += ["--preload", ",".join(self.preload)]
        if environment_path:
            argv += ["--sys-path", environment_path]
        return argv


@dataclass
class SandboxSpec:
    """How to launch one worker: its argv, environment, cwd and host-side workspace (if any)."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    workspace: Path | None
    """A host directory to remove when the worker is gone (process mode)."""
    uid: int | None = None
    """The uid slot this worker holds (released when it is gone)."""
    host_pids: bool = True
    """Whether pids the worker reports are valid on the host (false inside a pid namespace)."""
    zygote: bool = False
    """A zygote worker: the pool gives it a socket for run channels (``--runs-fd``)."""
    supervisor: bool = False
    """A program that serves run after run on its control channel, each run in an isolate of its own (the ``deno``
    runner's isolate mode), never running user code itself."""
    cgroup: Path | None = None
    """The worker's own memory cgroup (removed when it is gone)."""
    egress: Path | None = None
    """The host directory of the worker's egress gate (``egress.serve_gate``), for a profile with the network."""
    egress_owner: int | None = None
    """The uid that owns the gate's directory and socket, when it is not the server's (as root: the worker's)."""

    def cleanup(self) -> None:
        if self.workspace is not None:
            remove_owned_directory(self.workspace)
        if self.egress is not None:
            remove_owned_directory(self.egress)


def sandbox_environment(home: str) -> dict[str, str]:
    """The whole environment of a worker: an explicit allow-list, nothing from the host's."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": home,
        "TMPDIR": "/tmp" if home == SANDBOX_WORKSPACE else home,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONHASHSEED": "random",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


PROXY_NAMES = frozenset(
    {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"}
)


def without_proxies(env: Mapping[str, str]) -> dict[str, str]:
    """A worker's extra environment without the host's proxy settings (a worker's only proxy is its gate)."""
    return {k: v for k, v in env.items() if k not in PROXY_NAMES}


class Sandbox:
    """Launches workers in ``process`` mode: plain children with rlimits and a scrubbed environment."""

    isolation: Isolation = "process"

    def __init__(self, settings: Settings, reason: str = "") -> None:
        self.settings = settings
        self.limits = Limits.from_settings(settings)
        self.reason = reason
        """Why namespaces are not in force (empty when they are)."""
        # What servers killed before they could clean up left on this host (SIGKILL, OOM): gates in every mode,
        # host workspaces in process mode (a namespaced worker's workspace is a tmpfs that dies with it).
        sweep_owned_directories(GATE_PREFIX, any_owner=is_root())
        if self.isolation == "process":
            sweep_workspaces(settings.workspace_dir)

    def describe(self) -> dict[str, Any]:
        """What is in force on this host, for get_execution_limits and the start-up log."""
        return {
            "isolation": self.isolation,
            "reason": self.reason or None,
            "namespaces": [],
            "user": "the server's own user",
            "filesystem": "the server's view; the local runner confines open() to the workspace",
            "network": (
                "not isolated (no network namespace): a run with the network has the host's own network, and the "
                "egress proxy only guides clients that honour HTTP(S)_PROXY (CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true)"
                if self.settings.allow_unsandboxed_network
                else "no network namespace here: runs that may use the network are refused "
                "(CODE_MODE_ALLOW_UNSANDBOXED_NETWORK=true gives them the host's own network)"
            ),
            "cpu": "workers run at nice 10 (the server's requests come first)",
            "oom": "workers have oom_score_adj 1000: if the kernel must kill for memory, it kills a run",
            "limits": self.limits.describe(),
        }

    def network_enforced(self) -> bool:
        """Whether a run without networking is cut off from the network by the OS."""
        return False

    def network_by_default(self) -> bool:
        """Whether a run that does not say gets the network: the server's policy, where it can be given safely
        (a network namespace, or ``CODE_MODE_ALLOW_UNSANDBOXED_NETWORK``). The warm pools' profile."""
        settings = self.settings
        return settings.allow_network and (self.network_enforced() or settings.allow_unsandboxed_network)

    def spec(self, worker_argv: list[str], profile: Profile) -> SandboxSpec:
        workspace = make_workspace(self.settings.workspace_dir)
        extra = profile.worker_arguments(profile.environment)
        gate = self.gate(profile)
        if gate is not None:
            extra += ["--egress", str(gate / SOCKET_NAME)]
        argv = [sys.executable, "-I", *worker_argv, "--workspace", str(workspace), *extra]
        return SandboxSpec(
            argv=argv, env=sandbox_environment(str(workspace)), cwd=workspace, workspace=workspace, egress=gate
        )

    def gate(self, profile: Profile, owner: int | None = None) -> Path | None:
        """A new egress gate directory for a worker of ``profile``, if its runs may use the network."""
        return make_gate_directory(owner) if profile.network else None

    def command_spec(
        self,
        argv: Sequence[str],
        profile: Profile,
        *,
        reads: Sequence[str | Path],
        env: Mapping[str, str],
        limits: Mapping[str, int],
        supervisor: bool = False,
    ) -> SandboxSpec:
        """A program that runs user code itself (Deno), in a fresh host workspace, behind ``cm_launch.py``
        (rlimits, death with its parent, the seccomp filter). ``reads`` matter only to a namespaced sandbox.
        ``supervisor``: the program serves run after run on fds 3 and 4 (``cm_launch.py --control-fds``)."""
        workspace = make_workspace(self.settings.workspace_dir)
        launch = [sys.executable, "-I", "-S", str(WORKER_DIR / "cm_launch.py")]
        launch += [f"--limit={name}={value}" for name, value in limits.items()]
        gate = self.gate(profile)
        if gate is not None:
            launch += ["--egress", str(gate / SOCKET_NAME)]
        if supervisor:
            launch.append("--control-fds")
        return SandboxSpec(
            argv=[*launch, "--", *argv],
            env=sandbox_environment(str(workspace)) | without_proxies(env),
            cwd=workspace,
            workspace=workspace,
            egress=gate,
            supervisor=supervisor,
        )

    def release(self, spec: SandboxSpec) -> None:
        spec.cleanup()

    def close(self) -> None:
        """After every worker is gone: release what the sandbox holds for them."""


UID_LOCK_DIRS = (Path("/run/mcp-code-mode/uids"), Path(tempfile.gettempdir()) / f"mcp-code-mode-uids-{os.geteuid()}")
"""Where uid slots are locked, the first that can be made private to this user."""


@dataclass
class UidSlots:
    """Hands out one uid per live worker, unique on this host, so that RLIMIT_NPROC and signals stay
    within one sandbox even across server processes.

    A slot is a lock file (``flock``) held for as long as its worker lives: two servers never hold the
    same uid, and a server that dies, SIGKILL included, frees its slots with its file descriptors.
    """

    base: int
    size: int = 4096
    directory: Path | None = None
    held: dict[int, int] = field(default_factory=dict[int, int])
    """uid → the descriptor of its lock file."""

    def _directory(self) -> Path:
        if self.directory is not None:
            return self.directory
        problems: list[str] = []
        for candidate in UID_LOCK_DIRS:
            try:
                candidate.mkdir(mode=0o700, parents=True, exist_ok=True)
                info = candidate.lstat()
            except OSError as exc:
                problems.append(f"{candidate}: {exc.strerror}")
                continue
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022:
                self.directory = candidate
                return candidate
            problems.append(f"{candidate}: not a private directory of this user")
        raise RunnerError(f"no place to lock sandbox uids: {'; '.join(problems)}")

    def take(self) -> int:
        directory = self._directory()
        for uid in range(self.base, self.base + self.size):
            if uid in self.held:
                continue
            fd = os.open(directory / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # another server process's worker has it
            self.held[uid] = fd
            return uid
        raise RunnerError(f"no free sandbox uid: all {self.size} from {self.base} are in use on this host")

    def give_back(self, uid: int | None) -> None:
        fd = self.held.pop(uid, None) if uid is not None else None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the lock


WORKSPACE_PREFIX = "mcp-code-mode-run-"
"""Host workspaces of earlier versions: ``mcp-code-mode-run-<server pid>-<random>``."""
OWNED_WORKSPACE_PREFIX = "mcp-code-mode-workspace-"
"""Host workspaces: ``mcp-code-mode-workspace-<random>``, locked by their server while in use."""


def make_workspace(root: Path | None) -> Path:
    """A new, empty, private directory for one worker's runs (under ``root``, else the system's temp dir), locked
    while in use (``_leftovers``) so that a later server removes it if this one dies first."""
    return make_owned_directory(OWNED_WORKSPACE_PREFIX, root)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_workspaces(root: Path | None) -> list[Path]:
    """Remove the host workspaces of servers that are gone (killed before they could clean up): those whose lock
    nobody holds, and those of earlier versions (named after their server's pid, unlocked) whose pid is gone."""
    folder = root or Path(tempfile.gettempdir())
    removed = sweep_owned_directories(OWNED_WORKSPACE_PREFIX, folder)
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = re.fullmatch(rf"{WORKSPACE_PREFIX}(\d+)-\w+", entry.name)
        if match is None or _alive(int(match.group(1))):
            continue
        try:
            if entry.lstat().st_uid != os.geteuid() or not entry.is_dir():
                continue
        except OSError:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
