"""The engine: ``CodeMode`` and the stages of a run (see ``_codemode``)."""

from __future__ import annotations

from ..bridge import ErrorDetail, FileEntry, RunResult
from ._codemode import CodeMode, RunnerFacts
from ._progress import ProgressCallback, RunProgress

__all__ = ["CodeMode", "ErrorDetail", "FileEntry", "ProgressCallback", "RunProgress", "RunResult", "RunnerFacts"]
