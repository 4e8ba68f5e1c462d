"""What the ``local`` runner cannot run, found without running it: for ``validate_code`` on the host.

The analysis itself lives with the worker (``runners/sandboxed/cm_constructs.py``, standard library
only), which refuses the same findings inside the sandbox before a script runs; this module is its
host-side name.
"""

from __future__ import annotations

from .runners.sandboxed.cm_constructs import ADVICE, unsupported

__all__ = ["ADVICE", "unsupported"]
