"""Kept artifacts: their rows in the stores' database, their bytes on disk or in the database.

With SQLite the files are under ``<cache root>/artifacts/`` (a name the host chose); with PostgreSQL their bytes
are in the row (``data``), so that any replica can serve them (replicas share no disk; each file is bounded by
``CODE_MODE_ARTIFACT_MAX_FILE_MB`` and a tenant's total by ``CODE_MODE_ARTIFACT_MAX_TOTAL_MB``).

An artifact belongs to a tenant and to the client that made its run, and is read back by that client of that
tenant only, by its run's hash and the path it was shown (``find``); another client's or tenant's, an expired
one and a made-up one are all the same "not found". A new run with the same hash by the same client replaces
that run's artifacts. The bytes of a tenant's kept artifacts stay within ``max_total``: keeping a run's files
removes that tenant's oldest artifacts first (of any of its clients; never another tenant's), and a file that
still does not fit is not kept. Expired ones (of every tenant: the host's sweep) are removed whenever a run
keeps files, and when the store opens. Every method blocks: call it in a worker thread.
"""

from __future__ import annotations

import base64
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..bridge.outcome import FileEntry, ShownImage
from ..database import Database, Tx, open_database
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
    file: Path | None
    """Where its bytes are on disk (SQLite); None when they are in the database (``data``)."""
    size: int
    mime: str
    data: bytes | None = None

    def read_bytes(self) -> bytes:
        if self.data is not None:
            return self.data
        return self.file.read_bytes() if self.file is not None else b""


class ArtifactStore:
    """Artifacts: staged under ``root``, kept there (SQLite) or in the database; their rows in ``db`` (a SQLite
    file opened here, or an open ``Database``, shared). Thread-safe; ``close`` after use."""

    def __init__(self, root: Path, db: Path | Database, limits: ArtifactLimits) -> None:
        self.root = root
        self.limits = limits
        self._owned = isinstance(db, Path)
        self._db: Database = open_database(db) if isinstance(db, Path) else db
        self._inline = self._db.dialect == "postgresql"
        """Whether the bytes go into the row (replicas share no disk)."""
        root.mkdir(parents=True, exist_ok=True)
        self.prune()

    def close(self) -> None:
        if self._owned:
            self._db.close()

    def staging(self) -> Path:
        """A new directory for one run's files as they arrive (made on its first file)."""
        return self.root / ".staging" / uuid.uuid4().hex

    def keep(self, client: str, run_hash: str, files: list[tuple[FileEntry, Staged | None]], *, tenant: str) -> None:
        """Keep the staged files of a run (``FileEntry.path`` as the client was shown it), filling in each
        entry's ``uri``; what cannot be kept gets its ``dropped`` reason. The staging directory is removed."""
        now = time.time()
        directory = f"{int(now)}-{uuid.uuid4().hex[:12]}"
        incoming = sum(staged.size for _, staged in files if staged is not None)
        removed: list[str] = []

        inline = self._inline

        def write(tx: Tx) -> list[tuple[FileEntry, Staged, str]]:
            mine = "tenant = ? AND client = ? AND run_hash = ? OR expires_at <= ?"
            removed.extend(
                row[0]
                for row in tx.execute(f"SELECT file FROM artifacts WHERE {mine}", (tenant, client, run_hash, now))
            )
            tx.execute(f"DELETE FROM artifacts WHERE {mine}", (tenant, client, run_hash, now))
            used = int(
                tx.execute("SELECT COALESCE(SUM(size), 0) FROM artifacts WHERE tenant = ?", (tenant,)).fetchone()[0]
            )
            while used + incoming > self.limits.max_total:
                oldest = tx.execute(
                    "SELECT id, file, size FROM artifacts WHERE tenant = ? ORDER BY created_at, id LIMIT 1", (tenant,)
                ).fetchone()
                if oldest is None:
                    break
                tx.execute("DELETE FROM artifacts WHERE id = ?", (oldest[0],))
                removed.append(oldest[1])
                used -= int(oldest[2])
            kept: list[tuple[FileEntry, Staged, str]] = []
            for entry, staged in files:
                if staged is None:
                    continue
                if used + staged.size > self.limits.max_total:
                    entry.dropped = CAP_TOTAL
                    continue
                name = f"{directory}/{staged.file.name}"
                data = (self.root / name).read_bytes() if inline else None
                tx.execute(
                    "INSERT INTO artifacts(tenant, run_hash, client, path, file, size, mime, created_at, expires_at,"
                    " data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        tenant,
                        run_hash,
                        client,
                        entry.path,
                        name,
                        staged.size,
                        entry.mime_type,
                        now,
                        now + self.limits.ttl,
                        data,
                    ),
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
            kept = self._db.write(write, scope="artifacts") if staging is not None else []
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
                if staged is not None and (inline or f"{directory}/{staged.file.name}" not in keptnames):
                    (self.root / directory / staged.file.name).unlink(missing_ok=True)
            if inline:
                shutil.rmtree(self.root / directory, ignore_errors=True)  # the bytes are in the rows
        self._remove(removed)

    def inline(
        self, client: str, run_hash: str, entries: list[FileEntry], already: list[ShownImage], *, tenant: str
    ) -> list[ShownImage]:
        """The kept image files within the inline cap, as image content (bytes checked to be the type their name
        says; none already shown; at most ``MAX_SHOWN`` images in the result)."""
        out: list[ShownImage] = []
        for entry in entries:
            if len(already) + len(out) >= MAX_SHOWN:
                break  # the rest are links only
            if entry.uri is None or entry.mime_type not in IMAGE_TYPES or entry.size > self.limits.inline_image:
                continue
            found = self.find(client, run_hash, entry.path, tenant=tenant)
            data = found.read_bytes() if found is not None else b""
            encoded = base64.b64encode(data).decode()
            if image_type(data) == entry.mime_type and all(i.data != encoded for i in [*already, *out]):
                out.append(ShownImage(data=encoded, mime_type=entry.mime_type))
        return out

    def find(self, client: str, run_hash: str, path: str, *, tenant: str) -> Artifact | None:
        """The artifact this client of this tenant may read, or None (another client's or tenant's, expired, made
        up: all the same)."""
        rows = self._db.read(
            "SELECT path, file, size, mime, data FROM artifacts"
            " WHERE tenant = ? AND client = ? AND run_hash = ? AND path = ? AND expires_at > ?",
            (tenant, client, run_hash, path, time.time()),
        )
        if not rows:
            return None
        row = rows[0]
        if row[4] is not None:
            return Artifact(str(row[0]), None, int(row[2]), str(row[3]), bytes(row[4]))
        file = self.root / str(row[1])
        return Artifact(str(row[0]), file, int(row[2]), str(row[3])) if file.is_file() else None

    def recent(self, client: str, limit: int = 50, *, tenant: str) -> list[tuple[str, Artifact]]:
        """This client's unexpired artifacts (of this tenant), newest first, each with its URI (no bytes)."""
        rows = self._db.read(
            "SELECT run_hash, path, file, size, mime FROM artifacts WHERE tenant = ? AND client = ? AND expires_at > ?"
            " ORDER BY created_at DESC, id LIMIT ?",
            (tenant, client, time.time(), limit),
        )
        return [
            (artifact_uri(r[0], r[1]), Artifact(r[1], None if self._inline else self.root / r[2], int(r[3]), r[4]))
            for r in rows
        ]

    def prune(self) -> int:
        """The host's sweep: remove expired artifacts of every tenant (rows and files) and stale staging
        directories; how many artifacts."""
        now = time.time()

        def expire(tx: Tx) -> list[str]:
            files = [r[0] for r in tx.execute("SELECT file FROM artifacts WHERE expires_at <= ?", (now,))]
            tx.execute("DELETE FROM artifacts WHERE expires_at <= ?", (now,))
            return files

        removed: list[str] = self._db.write(expire, scope="artifacts")
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
