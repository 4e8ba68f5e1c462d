"""What a sandboxed process does to itself before any user code runs: standard library only.

- ``drop_privileges``: become an unprivileged uid for good, with ``no_new_privs``;
- ``apply_limits``: rlimits (address space or data, CPU, file size, open files, processes);
- ``die_with_parent``: SIGKILL when the parent goes (a SIGKILLed server leaves no running script);
- ``install_seccomp``: a filter refusing (EPERM) the system calls that would let a run keep state
  past its end or reach the kernel's rarer surfaces: SysV IPC (shared memory, semaphores, message
  queues), POSIX message queues, the kernel keyrings, new namespaces (``unshare``, ``setns``,
  ``clone`` with namespace flags), mounts, ``ptrace`` and ``process_vm_*``, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``io_uring``, module and kexec loading. ``clone3`` answers
  ENOSYS, so libc falls back to ``clone``, whose flags the filter can see. System calls of another
  architecture (``int 0x80`` on x86-64, x32) are refused.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import struct

# typing, functools, platform and signal (enum) stay unimported: this runs before every Deno worker starts.
SIGKILL = 9

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NAME = 15
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

# (audit arch, {name: number}) per machine; the numbers are the kernel's, from its syscall tables.
_X86_64: dict[str, int] = {
    "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220,
    "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
    "mq_getsetattr": 245,
    "add_key": 248, "request_key": 249, "keyctl": 250,
    "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163,
}  # fmt: skip
_AARCH64: dict[str, int] = {
    "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197, "msgget": 186, "msgctl": 187, "msgrcv": 188,
    "msgsnd": 189, "semget": 190, "semctl": 191, "semtimedop": 192, "semop": 193,
    "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184,
    "mq_getsetattr": 185,
    "add_key": 217, "request_key": 218, "keyctl": 219,
    "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
    "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "name_to_handle_at": 264, "open_by_handle_at": 265,
    "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89,
}  # fmt: skip
_ARCHES: dict[str, tuple[int, dict[str, int], int, int]] = {
    # machine: (AUDIT_ARCH_*, denied, clone, clone3)
    "x86_64": (0xC000003E, _X86_64, 56, 435),
    "aarch64": (0xC00000B7, _AARCH64, 220, 435),
}
CLONE_NAMESPACES = 0x7E020000
"""CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (and NEWTIME is 0x80)."""


_LIBC: list[ctypes.CDLL] = []


def _libc() -> ctypes.CDLL:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def prctl(option: int, value: int | bytes, arg3: int = 0) -> None:
    if _libc().prctl(option, value, arg3, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def set_name(name: str) -> None:
    """This process's name (PR_SET_NAME, what ``ps`` shows). Not through /proc/self/comm: an
    undumpable process's /proc files belong to root."""
    try:
        prctl(PR_SET_NAME, name.encode())
    except (OSError, AttributeError):  # no prctl (macOS): the name is only for people and tests
        pass


def join_cgroup(directory: str) -> None:
    """Move this process into its worker's cgroup (while still root; every child it starts follows)."""
    with open(os.path.join(directory, "cgroup.procs"), "w", encoding="utf-8") as procs:
        procs.write(str(os.getpid()))


def yield_to_the_server() -> None:
    """If the kernel must kill for memory, kill a run, not the server (oom_score_adj 1000); and let the
    server's event loop come first for the CPU (nice 10). Both are inherited and cannot be undone by a
    run (lowering either needs privileges a run does not have)."""
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="utf-8") as adj:
            adj.write("1000")
    except OSError:
        pass
    try:
        os.nice(10)
    except OSError:
        pass


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` for good: no groups, no capabilities, no way back, no new privileges."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("the sandbox could not drop privileges")
    try:
        os.setuid(0)
    except PermissionError:
        pass
    else:
        raise SystemExit("the sandbox could regain root: refusing to run")
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries and file capabilities stay inert


LIMIT_NAMES = {
    "as": resource.RLIMIT_AS,
    "data": resource.RLIMIT_DATA,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
}


def apply_limits(limits: dict[str, int]) -> None:
    for key, value in limits.items():
        if key in LIMIT_NAMES and value > 0:
            resource.setrlimit(LIMIT_NAMES[key], (value, value))


def die_with_parent() -> None:
    """SIGKILL this process when its parent exits (kept across execve)."""
    try:
        prctl(PR_SET_PDEATHSIG, SIGKILL)
    except (OSError, AttributeError):
        pass


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter as ``struct sock_filter[]`` bytes, or None on a machine it does not know."""
    entry = _ARCHES.get(machine or os.uname().machine)
    if entry is None:
        return None
    arch, denied, clone, clone3 = entry
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    program: list[tuple[int, int, int, int]] = [
        (ld_abs, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),
        (ret, 0, 0, enosys),
        (ld_abs, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch == 0xC000003E:
        program += [(jge, 0, 1, 0x40000000), (ret, 0, 0, enosys)]  # x32 system calls
    for number in sorted(set(denied.values())):
        program += [(jeq, 0, 1, number), (ret, 0, 0, eperm)]
    program += [(jeq, 0, 1, clone3), (ret, 0, 0, enosys)]
    program += [
        (jeq, 0, 3, clone),
        (ld_abs, 0, 0, 16),  # clone's flags: the low half of args[0]
        (jset, 0, 1, CLONE_NAMESPACES),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
    ]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp() -> bool:
    """Install the filter on this process (and all it will start); False where it cannot be."""
    program = seccomp_program()
    if program is None:
        return False
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if _libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")
    return True
