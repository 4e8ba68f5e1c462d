"""Start a program inside the sandbox the way the zygote starts a run: standard library only.

``python -I -S cm_launch.py [--cgroup DIR] [--drop UID:GID] [--egress SOCKET] [--control-fds]
[--limit=NAME=VALUE ...] -- PROGRAM ARGS...`` joins the worker's cgroup, drops to the sandbox uid, applies
the rlimits, dies with its parent, installs the seccomp filter (``cm_os``), with ``--egress`` forks the
loopback forwarder to the host's egress proxy (``cm_egress``) and names it in the environment, with
``--control-fds`` moves its stdin and stdout to fds 3 and 4 (the control channel of the ``deno`` runner's
supervisor, leaving PROGRAM /dev/null as stdin and its stderr as stdout), and then becomes PROGRAM
(``execv``): the Deno workers of the ``deno`` and ``pyodide`` runners, and ``deno check``. Everything it
sets survives the ``execv``; nothing of it can be undone by PROGRAM.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cm_os import (
    LIMIT_NAMES,
    apply_limits,
    die_with_parent,
    drop_privileges,
    install_seccomp,
    join_cgroup,
    yield_to_the_server,
)

USAGE = (
    "cm_launch.py [--cgroup DIR] [--drop UID:GID] [--egress SOCKET] [--control-fds] [--limit=NAME=VALUE ...] -- "
    "PROGRAM ARGS..."
)


def main(argv: list[str]) -> None:
    """Parsed by hand (no argparse: this runs before every Deno worker starts)."""
    cgroup: str | None = None
    drop: str | None = None
    egress: str | None = None
    limits: dict[str, int] = {}
    control = False
    rest = list(argv)
    while rest and rest[0] != "--":
        option = rest.pop(0)
        if option in ("--cgroup", "--drop", "--egress") and rest:
            value = rest.pop(0)
            if option == "--cgroup":
                cgroup = value
            elif option == "--drop":
                drop = value
            else:
                egress = value
        elif option == "--control-fds":
            control = True
        elif option.startswith("--limit="):
            name, _, value = option.removeprefix("--limit=").partition("=")
            if name not in LIMIT_NAMES:
                raise SystemExit(f"cm_launch.py: unknown limit {name!r} (one of {', '.join(LIMIT_NAMES)})")
            limits[name] = int(value)
        else:
            raise SystemExit(f"usage: {USAGE}")
    program = rest[1:]
    if not program:
        raise SystemExit(f"cm_launch.py: nothing to run\nusage: {USAGE}")
    if cgroup:
        join_cgroup(cgroup)
    yield_to_the_server()
    if drop:
        uid, gid = (int(part) for part in drop.split(":"))
        if control:  # the host's pipes: the program reopens them (/proc/self/fd/3 and 4) as the sandbox's user
            for fd in (0, 1):
                os.fchmod(fd, 0o666)
        drop_privileges(uid, gid)
    apply_limits(limits)
    die_with_parent()
    if sys.platform == "linux":
        install_seccomp()
    if egress:
        import cm_egress

        cm_egress.use_proxy(cm_egress.fork(egress))
    if control:
        move_control_channel()
    os.execv(program[0], program)


def move_control_channel() -> None:
    """The host's pipes move to fds 3 (in) and 4 (out); stdin becomes /dev/null and stdout a copy of stderr, so
    that what a run writes on fds 0 and 1 never reaches the control channel."""
    os.dup2(0, 3)
    os.dup2(1, 4)
    null = os.open(os.devnull, os.O_RDONLY)  # fds 0 to 4 are taken: this is another
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)


if __name__ == "__main__":
    main(sys.argv[1:])
