"""What a run ends with, as the host understood it (never as the sandbox claimed it beyond its own run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ErrorInfo:
    type: str
    message: str
    line: int | None = None
    traceback: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "line": self.line, "traceback": self.traceback}


@dataclass
class FileInfo:
    path: str
    size: int


@dataclass
class RunOutcome:
    success: bool
    output: str = ""
    truncated: bool = False
    return_value: Any = None
    error: ErrorInfo | None = None
    files: list[FileInfo] = field(default_factory=list)
    duration: float = 0.0
    """Seconds from sending the code to the end of the run."""
