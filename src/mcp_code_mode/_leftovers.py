"""Host directories a server makes for its workers (process-mode workspaces, egress gates), and the sweep that
removes those of servers that are gone.

A server holds a lock (``flock`` on the directory itself) on each such directory for as long as it is in use;
the kernel drops the locks of a process that dies, SIGKILL included. A starting server removes every directory
of a kind whose lock it can take: that a directory is abandoned is proved by its lock, never read from its name
or from a pid (which the kernel reuses). A directory is made under a staging name and renamed once locked, so a
sweep never finds one of its kind that is in use and unlocked; a staging directory is swept once it is old.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)

STAGING = "mcp-code-mode-new-"
"""The name of a directory being made (it has no lock yet)."""
STAGING_AGE_S = 60.0
"""A staging directory older than this was left by a server killed while making it."""

_held: dict[str, int] = {}
"""Path of each directory this process holds → the descriptor that holds its lock."""
_guard = threading.Lock()


def make_owned_directory(prefix: str, root: Path | None = None) -> Path:
    """A new private directory ``<root>/<prefix><random>`` (root: the system's temp dir), locked by this process
    until ``remove_owned_directory``."""
    parent = Path(os.path.realpath(root if root is not None else tempfile.gettempdir()))
    parent.mkdir(parents=True, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=STAGING, dir=parent)
    fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        while True:
            final = parent / f"{prefix}{secrets.token_hex(6)}"
            if not os.path.lexists(final):
                break
        os.rename(staging, final)
    except BaseException:
        os.close(fd)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    with _guard:
        _held[str(final)] = fd
    return final


def remove_owned_directory(path: Path) -> None:
    """Remove a directory of ``make_owned_directory`` and let go of its lock."""
    shutil.rmtree(path, ignore_errors=True)
    with _guard:
        fd = _held.pop(str(path), None)
    if fd is not None:
        os.close(fd)


def sweep_owned_directories(prefix: str, root: Path | None = None, *, any_owner: bool = False) -> list[Path]:
    """Remove the directories ``<root>/<prefix>*`` whose lock nobody holds (their server is gone), and staging
    directories older than ``STAGING_AGE_S`` that nobody holds either. Only real directories of this user (or,
    with ``any_owner``, of anyone: a root server's gates belong to the sandbox uids) are considered."""
    folder = Path(root if root is not None else tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        staging = entry.name.startswith(STAGING)
        if not (entry.name.startswith(prefix) or staging):
            continue
        try:
            info = entry.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or not (any_owner or info.st_uid == os.geteuid()):
            continue
        if staging and now - info.st_mtime < STAGING_AGE_S:
            continue
        try:
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: its server is alive (this one included)
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
        finally:
            os.close(fd)
    if removed:
        logger.info("removed %d directories that stopped servers left in %s", len(removed), folder)
    return removed


__all__ = ["make_owned_directory", "remove_owned_directory", "sweep_owned_directories"]
