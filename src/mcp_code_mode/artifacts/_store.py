"""Kept artifacts: their files under ``<cache root>/artifacts/`` and their rows in the cache database.

An artifact belongs to the client that made its run and is read back by that client only, by its run's hash
and the path it was shown (``find``); another client's, an expired one and a made-up one are all the same
"not found". A new run with the same hash by the same client replaces that run's artifacts. The bytes of all
kept artifacts stay within ``max_total``: keeping a run's files removes the oldest artifacts first (of any
client), and a file that still does not fit is not kept (``CODE_MODE_ARTIFACT_MAX_TOTAL_MB``). Expired ones are
removed whenever a run keeps files, and when the store opens. Every method blocks: call it in a worker thread.
"""

from __future__ import annotations

import base64
import shutil
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..bridge.outcome import FileEntry, ShownImage
from ..cache.store import ScriptStore
from ._files import CAP_TOTAL, IMAGE_TYPES, MAX_SHOWN, ArtifactLimits, Staged, image_type

SCHEME = "code-mode"
URI_PREFIX = f"{SCHEME}://runs/"


def artifact_uri(run_hash: str, path: str) -> str:
    from urllib.parse import quote

    return f"{URI_PREFIX}{run_hash}/files/{quote(path, safe='/')}"


def parse_uri(uri: str) -> tuple[str, str] | None:
    """``(run hash, path)`` of an artifact URI, or None when it is not one."""
    from urllib.parse import unquote

    if not uri.startswith(URI_PREFIX):
        return None
    run_hash, sep, path = uri[len(URI_PREFIX) :].partition("/files/")
    if not sep or not run_hash or not path or "/" in run_hash:
        return None
    return run_hash, unquote(path)


@dataclass(frozen=True)
class Artifact:
    path: str
    file: Path
    size: int
    mime: str


class ArtifactStore:
    """Artifacts on disk (``root``) and in the cache database at ``db``. Thread-safe; ``close`` after use."""

    def __init__(self, root: Path, db: Path, limits: ArtifactLimits) -> None:
        self.root = root
        self.limits = limits
        self._store = ScriptStore(db).open()
        root.mkdir(parents=True, exist_ok=True)
        self.prune()

    def close(self) -> None:
        self._store.close()

    def staging(self) -> Path:
        """A new directory for one run's files as they arrive (made on its first file)."""
        return self.root / ".staging" / uuid.uuid4().hex

    def keep(self, client: str, run_hash: str, files: list[tuple[FileEntry, Staged | None]]) -> None:
        """Keep the staged files of a run (``FileEntry.path`` as the client was shown it), filling in each
        entry's ``uri``; what cannot be kept gets its ``dropped`` reason. The staging directory is removed."""
        now = time.time()
        directory = f"{int(now)}-{uuid.uuid4().hex[:12]}"
        incoming = sum(staged.size for _, staged in files if staged is not None)
        removed: list[str] = []

        def write(conn: sqlite3.Connection) -> list[tuple[FileEntry, Staged, str]]:
            removed.extend(
                row[0]
                for row in conn.execute(
                    "SELECT file FROM artifacts WHERE client = ? AND run_hash = ? OR expires_at <= ?",
                    (client, run_hash, now),
                )
            )
            conn.execute(
                "DELETE FROM artifacts WHERE client = ? AND run_hash = ? OR expires_at <= ?", (client, run_hash, now)
            )
            used = conn.execute("SELECT COALESCE(SUM(size), 0) FROM artifacts").fetchone()[0]
            while used + incoming > self.limits.max_total:
                oldest = conn.execute("SELECT id, file, size FROM artifacts ORDER BY created_at, id LIMIT 1").fetchone()
                if oldest is None:
                    break
                conn.execute("DELETE FROM artifacts WHERE id = ?", (oldest[0],))
                removed.append(oldest[1])
                used -= oldest[2]
            kept: list[tuple[FileEntry, Staged, str]] = []
            for entry, staged in files:
                if staged is None:
                    continue
                if used + staged.size > self.limits.max_total:
                    entry.dropped = CAP_TOTAL
                    continue
                name = f"{directory}/{staged.file.name}"
                conn.execute(
                    "INSERT INTO artifacts(run_hash, client, path, file, size, mime, created_at, expires_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_hash, client, entry.path, name, staged.size, entry.mime_type, now, now + self.limits.ttl),
                )
                used += staged.size
                kept.append((entry, staged, name))
            return kept

        staging = next((s.file.parent for _, s in files if s is not None), None)
        try:
            if staging is not None:
                (self.root / directory).mkdir(parents=True)
                for _, staged in files:
                    if staged is not None:
                        staged.file.rename(self.root / directory / staged.file.name)
            kept = self._store._write(write) if staging is not None else []
        except BaseException:
            shutil.rmtree(self.root / directory, ignore_errors=True)  # no file without its row
            raise
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
        for entry, _staged, _name in kept:
            entry.uri = artifact_uri(run_hash, entry.path)
        keptnames = {name for _, _, name in kept}
        if staging is not None:
            for _, staged in files:
                if staged is not None and f"{directory}/{staged.file.name}" not in keptnames:
                    (self.root / directory / staged.file.name).unlink(missing_ok=True)
        self._remove(removed)

    def inline(
        self, client: str, run_hash: str, entries: list[FileEntry], already: list[ShownImage]
    ) -> list[ShownImage]:
        """The kept image files within the inline cap, as image content (bytes checked to be the type their name
        says; none already shown; at most ``MAX_SHOWN`` images in the result)."""
        out: list[ShownImage] = []
        for entry in entries:
            if len(already) + len(out) >= MAX_SHOWN:
                break  # the rest are links only
            if entry.uri is None or entry.mime_type not in IMAGE_TYPES or entry.size > self.limits.inline_image:
                continue
            found = self.find(client, run_hash, entry.path)
            data = found.file.read_bytes() if found is not None else b""
            encoded = base64.b64encode(data).decode()
            if image_type(data) == entry.mime_type and all(i.data != encoded for i in [*already, *out]):
                out.append(ShownImage(data=encoded, mime_type=entry.mime_type))
        return out

    def find(self, client: str, run_hash: str, path: str) -> Artifact | None:
        """The artifact this client may read, or None (another client's, expired, made up: all the same)."""
        with self._store._lock:
            row = self._store.conn.execute(
                "SELECT path, file, size, mime FROM artifacts"
                " WHERE client = ? AND run_hash = ? AND path = ? AND expires_at > ?",
                (client, run_hash, path, time.time()),
            ).fetchone()
        if row is None:
            return None
        file = self.root / str(row[1])
        return Artifact(str(row[0]), file, int(row[2]), str(row[3])) if file.is_file() else None

    def recent(self, client: str, limit: int = 50) -> list[tuple[str, Artifact]]:
        """This client's unexpired artifacts, newest first, each with its URI."""
        with self._store._lock:
            rows = self._store.conn.execute(
                "SELECT run_hash, path, file, size, mime FROM artifacts WHERE client = ? AND expires_at > ?"
                " ORDER BY created_at DESC, id LIMIT ?",
                (client, time.time(), limit),
            ).fetchall()
        return [(artifact_uri(r[0], r[1]), Artifact(r[1], self.root / r[2], r[3], r[4])) for r in rows]

    def prune(self) -> int:
        """Remove expired artifacts (rows and files) and stale staging directories; how many artifacts."""
        now = time.time()

        def expire(conn: sqlite3.Connection) -> list[str]:
            files = [r[0] for r in conn.execute("SELECT file FROM artifacts WHERE expires_at <= ?", (now,))]
            conn.execute("DELETE FROM artifacts WHERE expires_at <= ?", (now,))
            return files

        removed: list[str] = self._store._write(expire)
        self._remove(removed)
        staging = self.root / ".staging"
        if staging.is_dir():
            for entry in staging.iterdir():  # a run's staging outlives it only if a server died mid-run
                try:
                    if entry.stat().st_mtime < now - max(self.limits.ttl, 3600):
                        shutil.rmtree(entry, ignore_errors=True)
                except OSError:
                    continue
        return len(removed)

    def _remove(self, names: list[str]) -> None:
        for name in names:
            file = self.root / name
            file.unlink(missing_ok=True)
            try:
                file.parent.rmdir()  # the run's directory, once empty
            except OSError:
                pass
