"""Runners: one module per runner, each a plug-in (``base.RunnerPlugin``) found by ``registry``.

Everything the rest of the code asks about a runner (languages, isolation, packages, imports,
validation, settings, description) it asks the plug-in's ``RunnerInfo`` or the built ``Runner``.
"""

from __future__ import annotations

from ..languages import LANGUAGE_ALIASES
from .base import (
    CheckRequest,
    Diagnosis,
    OutputCallback,
    Runner,
    RunnerContext,
    RunnerInfo,
    RunnerPlugin,
    RunnerSession,
    RunRequest,
    SessionRunner,
    StubBundle,
)
from .registry import build_runners, default_runners, plugins

__all__ = [
    "LANGUAGE_ALIASES",
    "CheckRequest",
    "Diagnosis",
    "OutputCallback",
    "RunRequest",
    "Runner",
    "RunnerContext",
    "RunnerInfo",
    "RunnerPlugin",
    "RunnerSession",
    "SessionRunner",
    "StubBundle",
    "build_runners",
    "default_runners",
    "plugins",
]
