"""Using the library leaves the process's root logger alone (wordllama calls logging.basicConfig on import)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, logging, sys
before = logging.getLogger()
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
handlers = list(logging.getLogger().handlers)
import mcp_code_mode, mcp_code_mode.engine, mcp_code_mode.server
from mcp_code_mode.cache.embed import StaticEmbedder
StaticEmbedder().embed(["parse a csv file"])  # loads the model from the wordllama wheel
import wordllama, wordllama.inference
root = logging.getLogger()
print(json.dumps({"same": root.handlers == handlers, "count": len(root.handlers), "level": root.level}))
"""


def _probe(mode: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_library_and_loading_the_embedder_leaves_the_root_logger_untouched() -> None:
    assert _probe("bare") == {"same": True, "count": 0, "level": 30}


def test_an_applications_own_logging_setup_is_kept() -> None:
    assert _probe("configured") == {"same": True, "count": 1, "level": 40}
