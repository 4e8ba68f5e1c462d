"""A separate process that writes scripts into a cache file (for the concurrency and kill -9 tests).

    python -m tests.cache.writer DB PREFIX COUNT

Prints ``stored <hash>`` after each committed script, flushed, so the parent knows what was committed.
It loads only the cache modules (not the package's ``__init__``, which imports the MCP SDK) so that
several writers start quickly.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

_package = types.ModuleType("mcp_code_mode")
_package.__path__ = [str(Path(__file__).resolve().parents[2] / "src" / "mcp_code_mode")]
sys.modules.setdefault("mcp_code_mode", _package)

from mcp_code_mode.cache.store import ScriptStore  # noqa: E402

from .helpers import new_script  # noqa: E402


def main(path: str, prefix: str, count: int) -> None:
    store = ScriptStore(Path(path)).open()
    try:
        for i in range(count):
            stored = store.put(
                new_script(f"print('{prefix} {i}')\n" + "x = 1\n" * 200, output=f"{prefix} {i}\n"), tenant="default"
            )
            print("stored", stored.hash, flush=True)
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
