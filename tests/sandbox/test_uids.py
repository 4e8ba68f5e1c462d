"""Sandbox uids are unique on the host: across server processes, and freed when a server dies."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_code_mode.errors import RunnerError
from mcp_code_mode.sandbox.core import UidSlots

HOLDER = """
import sys, time
sys.path[:0] = {paths!r}
from pathlib import Path
from mcp_code_mode.sandbox.core import UidSlots
slots = UidSlots(base={base}, size=8, directory=Path({directory!r}))
print(slots.take(), slots.take(), flush=True)
time.sleep(600)
"""


def test_two_servers_never_hold_the_same_uid_and_a_killed_one_frees_its_uids(tmp_path: Path) -> None:
    base = 3_000_000_000
    code = HOLDER.format(paths=[p for p in sys.path if p], base=base, directory=str(tmp_path))
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None
        theirs = {int(uid) for uid in other.stdout.readline().split()}
        assert theirs == {base, base + 1}
        mine = UidSlots(base=base, size=8, directory=tmp_path)
        taken = {mine.take(), mine.take()}
        assert taken == {base + 2, base + 3}  # what the other server holds is skipped
        other.send_signal(signal.SIGKILL)  # as the OOM killer would: no clean-up runs
        other.wait()
        assert mine.take() == base  # its slots were freed with its descriptors
        mine.give_back(base + 2)
        assert mine.take() == base + 1
        assert mine.take() == base + 2
    finally:
        other.kill()
        other.wait()
        if other.stdout is not None:
            other.stdout.close()


def test_a_full_range_is_a_clear_error(tmp_path: Path) -> None:
    slots = UidSlots(base=3_000_000_000, size=2, directory=tmp_path)
    slots.take()
    slots.take()
    with pytest.raises(RunnerError, match="no free sandbox uid"):
        slots.take()
