"""Artifacts: files a run leaves in its workspace, kept for a while and linked from its result.

- ``_files``: ``RunFiles``, one run's files and ``show()``n images as they arrive from the sandbox (counted,
  capped, staged under names the host chose), and the ``CODE_MODE_ARTIFACT_*`` caps (``ArtifactLimits``);
- ``_store``: ``ArtifactStore``, the kept files on disk and their rows in the cache database, read back
  (``resources/read`` of ``code-mode://runs/<hash>/files/<path>``) by the client that made the run only.
"""

from __future__ import annotations

from ._files import IMAGE_TYPES, MAX_SHOWN, ArtifactLimits, RunFiles, Staged, image_type, mime_type
from ._store import URI_PREFIX, Artifact, ArtifactStore, artifact_uri, parse_uri

__all__ = [
    "IMAGE_TYPES",
    "MAX_SHOWN",
    "URI_PREFIX",
    "Artifact",
    "ArtifactLimits",
    "ArtifactStore",
    "RunFiles",
    "Staged",
    "artifact_uri",
    "image_type",
    "mime_type",
    "parse_uri",
]
