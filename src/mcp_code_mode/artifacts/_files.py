"""A run's files and shown images as the host receives them: counted, capped, written under safe names.

``RunFiles`` is the ``FileSink`` of one run (``bridge.host.serve_run``). Everything it is given comes from the
sandbox and is untrusted: it counts the bytes that actually arrive (never a size the run reports), writes each
file as ``<n>`` in its own staging directory (a path from the sandbox only ever names a row, never a file of the
host), and stops keeping a file the moment a cap is passed, naming the cap. The sandbox is told the caps in its
``run`` message (``ArtifactLimits.message``) and skips files over them, so a 50 MB file under a 10 MB cap is
never sent; one sent anyway is dropped chunk by chunk as it arrives, never held.
"""

from __future__ import annotations

import base64
import mimetypes
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..bridge.outcome import FileEntry, ShownImage

MB = 1024 * 1024
MAX_SHOWN = 10
"""Images a run may ``show()``; the rest are refused."""
MAX_REFUSALS = 200
"""Files not kept, and images refused, that a run's result names (a script can send any number of either: past
this, later ones are counted by no record, so a flood of tiny forged files costs the host no memory)."""
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""What may come back inline as image content (its bytes must look like it, too)."""

CAP_FILE = "CODE_MODE_ARTIFACT_MAX_FILE_MB"
CAP_RUN = "CODE_MODE_ARTIFACT_MAX_RUN_MB"
CAP_TOTAL = "CODE_MODE_ARTIFACT_MAX_TOTAL_MB"
CAP_FILES = "CODE_MODE_ARTIFACT_MAX_FILES"
CAP_IMAGE = "CODE_MODE_ARTIFACT_INLINE_IMAGE_KB"

_TYPES = mimetypes.MimeTypes(filenames=())  # the standard library's table only, the same on every host


def mime_type(path: str) -> str:
    """The MIME type of a file name by its extension; ``application/octet-stream`` when unknown."""
    guessed, _ = _TYPES.guess_type(path, strict=False)
    return guessed or "application/octet-stream"


def image_type(data: bytes) -> str | None:
    """The image type ``data`` is (by its first bytes), among ``IMAGE_TYPES``; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True)
class ArtifactLimits:
    """The ``CODE_MODE_ARTIFACT_*`` settings in bytes and seconds."""

    max_file: int = 10 * MB
    max_run: int = 50 * MB
    max_total: int = 1024 * MB
    max_files: int = 100
    ttl: float = 3600.0
    inline_image: int = 512 * 1024

    @classmethod
    def from_settings(cls, settings: Any) -> ArtifactLimits:
        return cls(
            max_file=int(settings.artifact_max_file_mb * MB),
            max_run=int(settings.artifact_max_run_mb * MB),
            max_total=int(settings.artifact_max_total_mb * MB),
            max_files=settings.artifact_max_files,
            ttl=settings.artifact_ttl_s,
            inline_image=settings.artifact_inline_image_kb * 1024,
        )

    def message(self) -> dict[str, int]:
        """What the run message tells the sandbox, so that it sends no file the host would not keep."""
        return {
            "max_file": self.max_file,
            "max_run": self.max_run,
            "max_files": self.max_files,
            "max_image": self.inline_image,
            "max_shown": MAX_SHOWN,
        }


@dataclass
class Staged:
    """A file received whole: where it is on disk and the bytes the host counted."""

    path: str
    file: Path
    size: int


@dataclass
class _Open:
    path: str
    file: Path
    handle: IO[bytes]
    size: int = 0


@dataclass
class RunFiles:
    """One run's files (``write``) and shown images (``show``), within ``limits``, staged in ``directory``."""

    directory: Path
    limits: ArtifactLimits
    staged: dict[str, Staged] = field(default_factory=dict[str, Staged])
    dropped: dict[str, str] = field(default_factory=dict[str, str])
    """Each file not kept, and the cap (or reason) that refused it (at most ``MAX_REFUSALS``)."""
    images: list[ShownImage] = field(default_factory=list[ShownImage])
    refused_images: list[str] = field(default_factory=list[str])
    _open: _Open | None = None
    _total: int = 0

    def caps(self) -> dict[str, int]:
        return self.limits.message()

    def write(self, path: str, data: bytes, end: bool) -> None:
        try:
            self._write(path, data, end)
        except OSError as exc:  # the host's disk, not the run: the file is not kept, the run goes on
            if self._open is not None:
                self._drop(self._open, f"not kept: {exc.strerror or exc}")
            else:
                self._refuse(path, f"not kept: {exc.strerror or exc}")

    def _write(self, path: str, data: bytes, end: bool) -> None:
        if path in self.dropped or path in self.staged:
            return  # past a cap, or sent twice: nothing more of it is kept
        current = self._open
        if current is None or current.path != path:
            if current is not None:
                self._drop(current, "incomplete: the run sent another file before its end")
            if len(self.staged) >= self.limits.max_files:
                self._refuse(path, CAP_FILES)
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            file = self.directory / str(len(self.staged) + len(self.dropped) + 1)
            current = self._open = _Open(path, file, file.open("xb"))
        current.size += len(data)
        if current.size > self.limits.max_file:
            self._drop(current, CAP_FILE)
            return
        if self._total + current.size > self.limits.max_run:
            self._drop(current, CAP_RUN)
            return
        current.handle.write(data)
        if end:
            current.handle.close()
            self._open = None
            self._total += current.size
            self.staged[path] = Staged(path, current.file, current.size)

    def _drop(self, current: _Open, reason: str) -> None:
        try:
            current.handle.close()
            current.file.unlink(missing_ok=True)
        except OSError:
            pass
        self._refuse(current.path, reason)
        self._open = None

    def _refuse(self, path: str, reason: str) -> None:
        if len(self.dropped) < MAX_REFUSALS:
            self.dropped[path] = reason

    def show(self, data: bytes, mime_type: str) -> None:
        """An image for the result's content: at most ``MAX_SHOWN``, each within the inline cap, and bytes
        that are the image type it claims."""
        actual = image_type(data)
        if len(self.refused_images) >= MAX_REFUSALS:
            return
        if len(self.images) >= MAX_SHOWN:
            self.refused_images.append(f"more than {MAX_SHOWN} images shown")
        elif len(data) > self.limits.inline_image:
            self.refused_images.append(f"an image of {len(data)} bytes is over {CAP_IMAGE}")
        elif actual is None or actual != mime_type:
            self.refused_images.append(f"not an image of type {mime_type[:40]!r} (png, jpeg, gif or webp)")
        else:
            self.images.append(ShownImage(data=base64.b64encode(data).decode(), mime_type=actual))

    def entries(self, listed: list[FileEntry]) -> list[tuple[FileEntry, Staged | None]]:
        """Every file the run listed or sent, with the staged file of each one kept: the sizes the host
        counted for kept files, and for the others why not (the cap the listed size passes, else what
        refused it as it arrived)."""
        if self._open is not None:
            self._drop(self._open, "incomplete: the run ended before the file's end")
        out: list[tuple[FileEntry, Staged | None]] = []
        seen: set[str] = set()
        total = self._total
        count = len(self.staged)
        for entry in listed:
            seen.add(entry.path)
            staged = self.staged.get(entry.path)
            if staged is not None:
                out.append((FileEntry(entry.path, staged.size, mime_type=mime_type(entry.path)), staged))
                continue
            reason = self.dropped.get(entry.path)
            if reason is None:
                if entry.size > self.limits.max_file:
                    reason = CAP_FILE
                elif count >= self.limits.max_files:
                    reason = CAP_FILES
                elif total + entry.size > self.limits.max_run:
                    reason = CAP_RUN
                else:
                    reason = "not sent by the run (not a regular file, or unreadable)"
            out.append((FileEntry(entry.path, entry.size, dropped=reason), None))
        for path, staged in self.staged.items():  # sent but not listed (the listing has a cap of its own)
            if path not in seen:
                out.append((FileEntry(path, staged.size, mime_type=mime_type(path)), staged))
        for path, reason in self.dropped.items():
            if path not in seen:
                out.append((FileEntry(path, 0, dropped=reason), None))
        return out

    def discard(self) -> None:
        """Remove whatever is staged (a run whose files are not kept)."""
        if self._open is not None:
            self._open.handle.close()
            self._open = None
        shutil.rmtree(self.directory, ignore_errors=True)
