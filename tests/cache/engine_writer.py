"""An engine process that runs scripts and stores them until it is killed (for the kill -9 test).

    python -m tests.cache.engine_writer CACHE_DIR WORKSPACE_DIR

Prints ``stored <hash>`` after each run has returned (and so has been stored), flushed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from mcp_code_mode.config import CodeModeConfig, Settings
from mcp_code_mode.engine import CodeMode


async def main(cache_dir: Path, workspace: Path) -> None:
    settings = Settings(cache_dir=cache_dir, workspace_dir=workspace, cache_embedder="hashing", pool_size=1)
    async with CodeMode(CodeModeConfig.from_servers({}, settings=settings, env={})) as cm:
        for i in range(100_000):
            result = await cm.execute(f"'''run {i}'''\nprint({i} * 2)", allow_networking=False)
            assert result.success and not result.cached
            print("stored", result.hash, flush=True)


if __name__ == "__main__":
    anyio.run(main, Path(sys.argv[1]), Path(sys.argv[2]))
