"""Start a program inside the sandbox the way the zygote starts a run: standard library only.

``python -I -S cm_launch.py [--cgroup DIR] [--drop UID:GID] [--egress SOCKET] [--limit=NAME=VALUE ...] --
PROGRAM ARGS...`` joins the worker's cgroup, drops to the sandbox uid, applies the rlimits, dies with its
parent, installs the seccomp filter (``cm_os``), with ``--egress`` forks the loopback forwarder to the
host's egress proxy (``cm_egress``) and names it in the environment, and then becomes PROGRAM
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

USAGE = "cm_launch.py [--cgroup DIR] [--drop UID:GID] [--egress SOCKET] [--limit=NAME=VALUE ...] -- PROGRAM ARGS..."


def main(argv: list[str]) -> None:
    """Parsed by hand (no argparse: this runs before every Deno worker starts)."""
    cgroup: str | None = None
    drop: str | None = None
    egress: str | None = None
    limits: dict[str, int] = {}
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
        drop_privileges(uid, gid)
    apply_limits(limits)
    die_with_parent()
    if sys.platform == "linux":
        install_seccomp()
    if egress:
        import cm_egress

        cm_egress.use_proxy(cm_egress.fork(egress))
    os.execv(program[0], program)


if __name__ == "__main__":
    main(sys.argv[1:])
