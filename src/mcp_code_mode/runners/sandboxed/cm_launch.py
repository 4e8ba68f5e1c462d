"""Start a program inside the sandbox the way the zygote starts a run: standard library only.

``python -I -S cm_launch.py [--drop UID:GID] [--limit NAME=VALUE ...] -- PROGRAM ARGS...`` drops to
the sandbox uid, applies the rlimits, dies with its parent, installs the seccomp filter (``cm_os``)
and then becomes PROGRAM (``execv``): the Deno workers of the ``deno`` and ``pyodide`` runners, and
``deno check``. Everything it sets survives the ``execv``; nothing of it can be undone by PROGRAM.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cm_os import LIMIT_NAMES, apply_limits, die_with_parent, drop_privileges, install_seccomp, join_cgroup


def main() -> None:
    parser = argparse.ArgumentParser(prog="cm_launch.py")
    parser.add_argument("--cgroup", default=None, help="the worker's own cgroup directory, to join first")
    parser.add_argument("--drop", default=None, help="UID:GID to become first")
    parser.add_argument("--limit", action="append", default=[], help="NAME=VALUE, NAME one of " + ",".join(LIMIT_NAMES))
    parser.add_argument("program", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        raise SystemExit("cm_launch.py: nothing to run")
    if args.cgroup:
        join_cgroup(args.cgroup)
    if args.drop:
        uid, gid = (int(part) for part in args.drop.split(":"))
        drop_privileges(uid, gid)
    limits = {}
    for item in args.limit:
        name, _, value = item.partition("=")
        limits[name] = int(value)
    apply_limits(limits)
    die_with_parent()
    if sys.platform == "linux":
        install_seccomp()
    os.execv(program[0], program)


if __name__ == "__main__":
    main()
