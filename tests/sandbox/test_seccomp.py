"""The seccomp filter of the sandboxed workers (``runners/sandboxed/cm_os.py``).

Three kinds of check:

- the program, run through a small classic-BPF interpreter, gives every case of a table its verdict,
  for each architecture it knows (so also the one this host is not);
- libseccomp, given the same policy by system call names, generates a program that gives the same
  verdicts, and knows the same numbers for those names (skipped where libseccomp is not installed);
- each refused call, made for real in a subprocess that installed the filter, answers EPERM (ENOSYS for
  ``clone3``); where the call is harmless, the same call without the filter is not refused, so the
  refusal is the filter's. Calls a run needs (Unix and IP sockets, threads, fork, subprocesses) work.

Every call is made with arguments that make it fail harmlessly even if the filter did not stop it, and
only those marked ``control`` are made without the filter: never a mount, kexec, module, swap, ``acct``
or ``reboot`` call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.platform != "linux":
    pytest.skip("seccomp is Linux's", allow_module_level=True)

from mcp_code_mode.engine import CodeMode
from mcp_code_mode.sandbox.core import WORKER_DIR

from ..conftest import make_config

sys.path.insert(0, str(WORKER_DIR))
import cm_os  # the sandbox's own module: found next to worker.py, not in the package

ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
AUDIT_ARCH_I386 = 0x40000003
MACHINES = sorted(cm_os._ARCHES)
NATIVE = os.uname().machine

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET = 1, 2, 10, 16, 17
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET, SOCK_PACKET = 1, 2, 3, 5, 10
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000
SIGCHLD = 17
CLONE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
THREAD_FLAGS = 0x3D0F00  # what pthread_create passes: VM, FS, FILES, SIGHAND, THREAD, SYSVSEM, SETTLS, *TID
HIGH = 1 << 32  # set in a 64-bit register, ignored by the kernel where the argument is an int

ALLOWED_NUMBERS = {  # a few calls every program makes: (x86_64, aarch64)
    "read": (0, 63), "write": (1, 64), "openat": (257, 56), "close": (3, 57), "mmap": (9, 222),
    "futex": (202, 98), "execve": (59, 221), "getpid": (39, 172), "kill": (62, 129), "wait4": (61, 260),
    "connect": (42, 203), "bind": (49, 200), "ioctl": (16, 29), "prctl": (157, 167), "exit_group": (231, 94),
}  # fmt: skip


def numbers(machine: str) -> dict[str, int]:
    _, denied, inspected = cm_os._ARCHES[machine]
    index = ("x86_64", "aarch64").index(machine)
    return {**{name: pair[index] for name, pair in ALLOWED_NUMBERS.items()}, **denied, **inspected}


# ----- the policy, said once in Python -------------------------------------------------------------


def expected(machine: str, name: str, args: tuple[int, ...]) -> int:
    """The verdict the filter should give ``name(*args)`` on ``machine``."""
    _, denied, _ = cm_os._ARCHES[machine]
    first, second = (args + (0, 0))[:2]
    if name in denied:
        return EPERM
    if name == "clone3":
        return ENOSYS
    if name == "clone" and first & sum(CLONE_FLAGS.values()):
        return EPERM
    if name in ("socket", "socketpair") and (
        first & 0xFFFFFFFF in (AF_NETLINK, AF_PACKET) or second & 0xF in (SOCK_RAW, SOCK_PACKET)
    ):
        return EPERM
    return ALLOW


def cases(machine: str) -> Iterator[tuple[str, tuple[int, ...]]]:
    _, denied, _ = cm_os._ARCHES[machine]
    for name in [*denied, *ALLOWED_NUMBERS]:
        yield name, (0, 0, 0)
    yield "clone3", (0, 88)
    for flags in (SIGCHLD, THREAD_FLAGS, HIGH | SIGCHLD, *CLONE_FLAGS.values(), HIGH | CLONE_FLAGS["CLONE_NEWUSER"]):
        yield "clone", (flags | SIGCHLD, 0, 0)
    for name in ("socket", "socketpair"):
        for family in (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, HIGH | AF_NETLINK, HIGH | AF_INET):
            for kind in (SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET, SOCK_PACKET, HIGH | SOCK_RAW):
                for flags in (0, SOCK_CLOEXEC, SOCK_NONBLOCK | SOCK_CLOEXEC):
                    yield name, (family, kind | flags, 0)


def seccomp_data(number: int, arch: int, args: tuple[int, ...] = ()) -> bytes:
    """``struct seccomp_data`` as the kernel lays it out on a little-endian machine."""
    padded = (args + (0,) * 6)[:6]
    return struct.pack("<IIQ6Q", number & 0xFFFFFFFF, arch, 0, *(a & (2**64 - 1) for a in padded))


# ----- a classic-BPF interpreter -------------------------------------------------------------------


def run_bpf(program: bytes, data: bytes) -> int:
    """What a seccomp program returns for ``data``: the instructions seccomp allows, as the kernel runs them."""
    code = [struct.unpack_from("HBBI", program, at) for at in range(0, len(program), 8)]
    assert 0 < len(code) <= 4096, len(code)
    a, x, scratch, pc = 0, 0, [0] * 16, 0
    while True:
        op, jt, jf, k = code[pc]  # an IndexError is a jump out of the program, which the kernel refuses
        pc += 1
        if op == 0x20:  # ld [k]
            assert k % 4 == 0 and k < len(data), k
            a = struct.unpack_from("<I", data, k)[0]
        elif op == 0x00:  # ld #k
            a = k
        elif op == 0x60:  # ld M[k]
            a = scratch[k]
        elif op == 0x02:  # st M[k]
            scratch[k] = a
        elif op == 0x07:  # tax
            x = a
        elif op == 0x87:  # txa
            a = x
        elif op == 0x54:  # and #k
            a &= k
        elif op == 0x05:  # ja k
            pc += k
        elif op in (0x15, 0x25, 0x35, 0x45):  # jeq, jgt, jge, jset #k
            taken = {0x15: a == k, 0x25: a > k, 0x35: a >= k, 0x45: bool(a & k)}[op]
            pc += jt if taken else jf
        elif op == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"instruction {pc - 1}: opcode {op:#x} is not one this interpreter knows")


@pytest.mark.parametrize("machine", MACHINES)
def test_the_program_gives_each_call_its_verdict(machine: str) -> None:
    program, arch, known = cm_os.seccomp_program(machine), AUDIT_ARCH[machine], numbers(machine)
    assert program is not None
    wrong = [
        (name, [hex(a) for a in args], hex(verdict))
        for name, args in cases(machine)
        if (verdict := run_bpf(program, seccomp_data(known[name], arch, args))) != expected(machine, name, args)
    ]
    assert not wrong


@pytest.mark.parametrize("machine", MACHINES)
def test_another_architectures_system_calls_answer_enosys(machine: str) -> None:
    program = cm_os.seccomp_program(machine)
    assert program is not None
    for arch in {AUDIT_ARCH_I386, *AUDIT_ARCH.values()} - {AUDIT_ARCH[machine]}:
        for number in (0, 41, 56, 101, 198):
            assert run_bpf(program, seccomp_data(number, arch)) == ENOSYS, (hex(arch), number)
    if machine == "x86_64":  # x32: the x86-64 arch with bit 30 set in the number
        assert run_bpf(program, seccomp_data(0x40000000 | 41, AUDIT_ARCH[machine], (AF_INET, SOCK_STREAM))) == ENOSYS


def test_the_architectures_refuse_the_same_calls() -> None:
    tables = {machine: cm_os._ARCHES[machine] for machine in MACHINES}
    assert len({frozenset(denied) for _, denied, _ in tables.values()}) == 1
    assert len({frozenset(inspected) for _, _, inspected in tables.values()}) == 1
    assert cm_os.seccomp_program("riscv64") is None


# ----- the same policy from libseccomp --------------------------------------------------------------


class _ArgCmp(ctypes.Structure):
    """``struct scmp_arg_cmp``."""

    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


SCMP_CMP_MASKED_EQ = 7
SCMP_FLTATR_ACT_BADARCH = 2


@pytest.fixture(scope="module")
def libseccomp() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2", use_errno=True)
    except OSError:
        pytest.skip("libseccomp is not installed")
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_arch_native.restype = ctypes.c_uint32
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_arch_remove.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_void_p,
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _checked(result: int, what: str) -> None:
    if result != 0:
        raise AssertionError(f"libseccomp: {what}: {os.strerror(-result)}")


def libseccomp_program(lib: ctypes.CDLL, machine: str) -> bytes:
    """The policy given to libseccomp by names: each call's number is libseccomp's, not cm_os's."""
    arch, (_, denied, _) = AUDIT_ARCH[machine], cm_os._ARCHES[machine]
    ctx = lib.seccomp_init(ALLOW)
    assert ctx
    try:
        _checked(lib.seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, ENOSYS), "the other-architecture action")
        if arch != lib.seccomp_arch_native():
            _checked(lib.seccomp_arch_add(ctx, arch), f"add {machine}")
            _checked(lib.seccomp_arch_remove(ctx, 0), "remove the native architecture")

        def rule(action: int, name: str, *compare: _ArgCmp) -> None:
            number = lib.seccomp_syscall_resolve_name(name.encode())  # this host's: libseccomp translates it
            array = (_ArgCmp * len(compare))(*compare) if compare else None
            _checked(lib.seccomp_rule_add_array(ctx, action, number, len(compare), array), f"a rule for {name}")

        for name in denied:
            rule(EPERM, name)
        rule(ENOSYS, "clone3")
        for flag in CLONE_FLAGS.values():
            rule(EPERM, "clone", _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        for name in ("socket", "socketpair"):
            for family in (AF_NETLINK, AF_PACKET):  # the int's 32 bits: masked, not equal over 64
                rule(EPERM, name, _ArgCmp(0, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, family))
            for kind in (SOCK_RAW, SOCK_PACKET):
                rule(EPERM, name, _ArgCmp(1, SCMP_CMP_MASKED_EQ, 0xF, kind))
        fd = os.memfd_create("seccomp-bpf")
        try:
            _checked(lib.seccomp_export_bpf(ctx, fd), "export")
            return os.pread(fd, 1 << 20, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


@pytest.mark.parametrize("machine", MACHINES)
def test_libseccomp_knows_the_same_system_call_numbers(libseccomp: ctypes.CDLL, machine: str) -> None:
    arch = AUDIT_ARCH[machine]
    theirs = {name: libseccomp.seccomp_syscall_resolve_name_arch(arch, name.encode()) for name in numbers(machine)}
    assert theirs == numbers(machine)


@pytest.mark.parametrize("machine", MACHINES)
def test_libseccomp_generates_a_program_with_the_same_verdicts(libseccomp: ctypes.CDLL, machine: str) -> None:
    ours, theirs = cm_os.seccomp_program(machine), libseccomp_program(libseccomp, machine)
    assert ours is not None
    arch = AUDIT_ARCH[machine]
    resolve = libseccomp.seccomp_syscall_resolve_name_arch
    table = [(resolve(arch, name.encode()), arch, name, args) for name, args in cases(machine)]
    table += [(41, other, "other", ()) for other in {AUDIT_ARCH_I386, *AUDIT_ARCH.values()} - {arch}]
    if machine == "x86_64":
        table.append((0x40000000 | 41, arch, "x32 socket", (AF_INET, SOCK_STREAM)))
    differ = [
        (name, [hex(a) for a in args], hex(mine), hex(libs))
        for number, at, name, args in table
        if (mine := run_bpf(ours, data := seccomp_data(number, at, args))) != (libs := run_bpf(theirs, data))
    ]
    assert not differ


# ----- real calls -----------------------------------------------------------------------------------

PROBE = r"""
import ctypes, json, os, sys
sys.path.insert(0, sys.argv[1])
import cm_os
if sys.argv[2] == "filtered" and not cm_os.install_seccomp():
    raise SystemExit("no filter for " + os.uname().machine)
name, args = json.loads(sys.argv[3])
_, denied, inspected = cm_os._ARCHES[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buffers = [ctypes.create_string_buffer(a.encode(), 64) for a in args if isinstance(a, str)]
it = iter(buffers)
values = [ctypes.c_long(ctypes.addressof(next(it)) if isinstance(a, str) else a) for a in args]
result = libc.syscall(ctypes.c_long({**denied, **inspected}[name]), *values)
number = ctypes.get_errno() if result == -1 else 0
if name == "clone" and result == 0:
    os._exit(0)  # the child of a clone the filter let through
if name == "clone" and result > 0:
    os.waitpid(result, 0)
if name == "socket" and result >= 0:
    os.close(result)
print(json.dumps([result, number]))
"""

BAD = 1  # an address no process maps: a pointer argument that makes the call fail with EFAULT
NO_PID = 0x3FFFFFFF  # above any pid_max
NO_KEY = 0x7EAD5EC  # a SysV IPC key nothing uses (no IPC_CREAT: nothing is made)


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[int | str, ...]  # a str is passed as a pointer to a 64-byte buffer holding it
    refused: int = errno.EPERM
    control: bool = False  # harmless without the filter too: there it must not be refused
    privileged: bool = False  # without the filter, not refused only for root


OUTRIGHT: dict[str, Call] = {
    call.name: call
    for call in [
        Call("shmget", (0, 0, 0), control=True),  # IPC_PRIVATE of 0 bytes: EINVAL
        Call("shmat", (-1, 0, 0), control=True),
        Call("shmctl", (-1, 2, 0), control=True),  # IPC_STAT
        Call("shmdt", (BAD,), control=True),
        Call("semget", (NO_KEY, 0, 0), control=True),
        Call("semop", (-1, 0, 0), control=True),
        Call("semctl", (-1, 0, 2, 0), control=True),
        Call("semtimedop", (-1, 0, 0, 0), control=True),
        Call("msgget", (NO_KEY, 0), control=True),
        Call("msgsnd", (-1, 0, 0, 0), control=True),
        Call("msgrcv", (-1, 0, 0, 0, 0), control=True),
        Call("msgctl", (-1, 2, 0), control=True),
        Call("mq_open", ("cm-seccomp-absent", 0, 0, 0), control=True),  # O_RDONLY, no O_CREAT: ENOENT
        Call("mq_unlink", ("cm-seccomp-absent",), control=True),
        Call("mq_timedsend", (-1, 0, 0, 0, 0), control=True),
        Call("mq_timedreceive", (-1, 0, 0, 0, 0), control=True),
        Call("mq_notify", (-1, 0), control=True),
        Call("mq_getsetattr", (-1, 0, 0), control=True),
        Call("add_key", (0, 0, 0, 0, 0), control=True),
        Call("request_key", (0, 0, 0, 0), control=True),
        Call("keyctl", (9999, 0, 0, 0, 0), control=True),  # no such operation: EOPNOTSUPP
        Call("unshare", (CLONE_FLAGS["CLONE_NEWUTS"],), control=True, privileged=True),  # succeeds, for root
        Call("setns", (-1, 0), control=True),
        Call("mount", (BAD, BAD, BAD, 0, BAD)),
        Call("umount2", (BAD, 0)),
        Call("pivot_root", (BAD, BAD)),
        Call("ptrace", (2, NO_PID, 0, 0), control=True),  # PTRACE_PEEKDATA of no process: ESRCH
        Call("process_vm_readv", (NO_PID, 0, 0, 0, 0, 1), control=True),  # flags must be 0: EINVAL
        Call("process_vm_writev", (NO_PID, 0, 0, 0, 0, 1), control=True),
        Call("bpf", (-1, 0, 0), control=True, privileged=True),
        Call("perf_event_open", (0, 0, -1, -1, 0), control=True),
        Call("userfaultfd", (-1,), control=True, privileged=True),
        Call("io_uring_setup", (0, 0)),  # not made without the filter: a host may switch io_uring off
        Call("io_uring_enter", (-1, 0, 0, 0, 0, 0)),
        Call("io_uring_register", (-1, 0, 0, 0)),
        Call("kexec_load", (0, 0xFFFF, 0, 0x8000)),  # too many segments, an unknown flag: EINVAL
        Call("kexec_file_load", (-1, -1, 0, 0, 1 << 31)),
        Call("init_module", (BAD, 0, BAD)),
        Call("finit_module", (-1, BAD, 0)),
        Call("delete_module", (BAD, 0)),
        Call("open_tree", (-1, BAD, 0)),
        Call("move_mount", (-1, BAD, -1, BAD, 0)),
        Call("fsopen", (BAD, 0)),
        Call("fsconfig", (-1, 0, 0, 0, 0)),
        Call("fsmount", (-1, 0, 0)),
        Call("fspick", (-1, BAD, 0)),
        Call("mount_setattr", (-1, BAD, 0, 0, 0)),
        Call("name_to_handle_at", (-1, BAD, BAD, BAD, 0), control=True),
        Call("open_by_handle_at", (-1, BAD, 0), control=True, privileged=True),
        Call("swapon", (BAD, 0)),
        Call("swapoff", (BAD,)),
        Call("reboot", (0, 0, 0, 0)),  # without the magic numbers: EINVAL
        Call("acct", (BAD,)),
    ]
}
BY_ARGUMENTS: dict[str, Call] = {
    **{
        f"clone with {flag}": Call(
            "clone", (value | SIGCHLD, 0, 0, 0, 0), control=flag == "CLONE_NEWUTS", privileged=True
        )
        for flag, value in CLONE_FLAGS.items()
    },
    "clone3": Call("clone3", (0, 0), refused=errno.ENOSYS, control=True),  # EINVAL: no clone_args
    "socket(AF_NETLINK, SOCK_RAW)": Call("socket", (AF_NETLINK, SOCK_RAW, 0), control=True),
    "socket(AF_NETLINK, SOCK_DGRAM|SOCK_CLOEXEC)": Call(
        "socket", (AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, 0), control=True
    ),
    "socket(AF_NETLINK in a 64-bit register)": Call("socket", (HIGH | AF_NETLINK, SOCK_DGRAM, 0), control=True),
    "socket(AF_PACKET, SOCK_DGRAM)": Call("socket", (AF_PACKET, SOCK_DGRAM, 0), control=True, privileged=True),
    "socket(AF_PACKET, SOCK_RAW)": Call("socket", (AF_PACKET, SOCK_RAW, 0), control=True, privileged=True),
    "socket(AF_INET, SOCK_RAW)": Call("socket", (AF_INET, SOCK_RAW, 1), control=True, privileged=True),
    "socket(AF_INET6, SOCK_RAW)": Call("socket", (AF_INET6, SOCK_RAW, 58), control=True, privileged=True),
    "socket(AF_INET, SOCK_RAW|SOCK_CLOEXEC)": Call(
        "socket", (AF_INET, SOCK_RAW | SOCK_CLOEXEC, 1), control=True, privileged=True
    ),
    "socket(AF_INET, SOCK_RAW|SOCK_NONBLOCK)": Call(
        "socket", (AF_INET, SOCK_RAW | SOCK_NONBLOCK, 1), control=True, privileged=True
    ),
    "socket(AF_INET, SOCK_PACKET)": Call("socket", (AF_INET, SOCK_PACKET, 0), control=True, privileged=True),
    "socketpair(AF_NETLINK, SOCK_RAW)": Call("socketpair", (AF_NETLINK, SOCK_RAW, 0, "fds"), control=True),
    "socketpair(AF_UNIX, SOCK_RAW)": Call("socketpair", (AF_UNIX, SOCK_RAW, 0, "fds"), control=True),
}
REFUSED = {**OUTRIGHT, **BY_ARGUMENTS}
CONTROLLED = {case: call for case, call in REFUSED.items() if call.control}
WORKING: dict[str, Call] = {
    "socket(AF_UNIX, SOCK_STREAM)": Call("socket", (AF_UNIX, SOCK_STREAM, 0)),
    "socket(AF_UNIX, SOCK_DGRAM|SOCK_CLOEXEC)": Call("socket", (AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)),
    "socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC)": Call("socket", (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)),
    "socket(AF_INET, SOCK_DGRAM|SOCK_NONBLOCK)": Call("socket", (AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0)),
    "socket(AF_INET6, SOCK_STREAM)": Call("socket", (AF_INET6, SOCK_STREAM, 0)),
    "socket(AF_INET6, SOCK_DGRAM)": Call("socket", (AF_INET6, SOCK_DGRAM, 0)),
    "socketpair(AF_UNIX, SOCK_STREAM)": Call("socketpair", (AF_UNIX, SOCK_STREAM, 0, "fds")),
    "socketpair(AF_UNIX, SOCK_SEQPACKET|SOCK_CLOEXEC)": Call(
        "socketpair", (AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, "fds")
    ),
    "clone(SIGCHLD), as fork": Call("clone", (SIGCHLD, 0, 0, 0, 0)),
}


def make(call: Call, *, filtered: bool) -> tuple[int, int]:
    """``call`` in a new process, with or without the filter: (the result, errno)."""
    mode = "filtered" if filtered else "unfiltered"
    argv = [sys.executable, "-I", "-S", "-c", PROBE, str(WORKER_DIR), mode, json.dumps([call.name, call.args])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    result, number = json.loads(done.stdout)
    return result, number


def test_every_call_the_filter_refuses_outright_has_a_case() -> None:
    _, denied, _ = cm_os._ARCHES[NATIVE if NATIVE in cm_os._ARCHES else "x86_64"]
    assert set(OUTRIGHT) == set(denied)


needs_the_filter = pytest.mark.skipif(NATIVE not in cm_os._ARCHES, reason=f"no filter for {NATIVE}")


@needs_the_filter
@pytest.mark.parametrize("case", REFUSED)
def test_under_the_filter_the_call_is_refused(case: str) -> None:
    call = REFUSED[case]
    assert make(call, filtered=True) == (-1, call.refused), os.strerror(call.refused)


@needs_the_filter
@pytest.mark.parametrize("case", CONTROLLED)
def test_without_the_filter_the_same_call_is_not_refused_so_the_refusal_is_the_filters(case: str) -> None:
    call = CONTROLLED[case]
    if call.privileged and os.geteuid() != 0:
        pytest.skip("without the filter this call is refused to anyone but root")
    result, number = make(call, filtered=False)
    assert result >= 0 or number != call.refused, (result, os.strerror(number))


@needs_the_filter
@pytest.mark.parametrize("case", WORKING)
def test_under_the_filter_the_calls_a_run_needs_work(case: str) -> None:
    result, number = make(WORKING[case], filtered=True)
    assert result >= 0, os.strerror(number)


PROGRAMS = {
    "a thread starts and joins": "t = threading.Thread(target=print, args=('ok',)); t.start(); t.join()",
    "os.fork and waitpid": (
        "pid = os.fork()\nif pid == 0:\n    os._exit(7)\nprint('ok' if os.waitpid(pid, 0)[1] >> 8 == 7 else 'no')"
    ),
    "a subprocess runs": (  # posix_spawn tries clone3 first, and falls back on ENOSYS
        "run = subprocess.run([sys.executable, '-c', 'print(1)'], capture_output=True)\n"
        "print('ok' if run.stdout == b'1\\n' else run)"
    ),
    "getaddrinfo with AI_ADDRCONFIG": (  # glibc asks netlink which addresses there are, and does without
        "print('ok' if socket.getaddrinfo('localhost', 80, flags=socket.AI_ADDRCONFIG) else 'no')"
    ),
    "a TCP connection on 127.0.0.1": (
        "server = socket.create_server(('127.0.0.1', 0)); client = socket.create_connection(server.getsockname())\n"
        "peer, _ = server.accept(); client.sendall(b'ok'); print(peer.recv(2).decode())"
    ),
    "a Unix socket pair carries bytes": "a, b = socket.socketpair(); a.sendall(b'ok'); print(b.recv(2).decode())",
}


@needs_the_filter
@pytest.mark.parametrize("case", PROGRAMS)
def test_under_the_filter_ordinary_programs_work(case: str) -> None:
    code = (
        f"import os, socket, subprocess, sys, threading\nsys.path.insert(0, {str(WORKER_DIR)!r})\nimport cm_os\n"
        f"assert cm_os.install_seccomp()\n{PROGRAMS[case]}"
    )
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


# ----- the workers have it --------------------------------------------------------------------------

SEES_THE_FILTER = (
    "import socket\n"
    "mode = [line.split()[1] for line in open('/proc/self/status') if line.startswith('Seccomp:')][0]\n"
    "try:\n    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()\n    netlink = 'open'\n"
    "except OSError as e:\n    netlink = e.errno\n"
    "socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()\n"
    "print(mode, netlink)"
)


@needs_the_filter
def test_a_program_cm_launch_starts_runs_under_the_filter() -> None:
    """As the Deno workers start: ``cm_launch.py`` installs the filter, then becomes the program."""
    argv = [sys.executable, "-I", "-S", str(WORKER_DIR / "cm_launch.py"), "--"]
    argv += [sys.executable, "-I", "-S", "-c", SEES_THE_FILTER]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, f"2 {errno.EPERM}\n"), done.stderr


@needs_the_filter
@pytest.mark.anyio
async def test_a_sandboxed_python_run_is_under_the_filter(tmp_path: Path) -> None:
    async with CodeMode(make_config({}, workspace_dir=tmp_path)) as cm:
        if cm.sandbox.isolation != "namespaces":
            pytest.skip(f"no namespaced sandbox here: {cm.sandbox.reason}")
        result = await cm.execute(SEES_THE_FILTER, runner="cpython", cache="off")
    assert result.success, result.error
    assert result.output == f"2 {errno.EPERM}\n"  # netlink sockets are open to anyone, in any namespace
