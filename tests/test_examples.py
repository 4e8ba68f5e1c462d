"""The worked examples run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import ROOT, filesystem_entry, server_env, write_config


def test_the_agent_loop_example_answers_from_a_real_run_of_its_one_tool(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    config = write_config(tmp_path / "servers.json", {"filesystem": filesystem_entry(files)})
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent_loop.py"), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env=server_env(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "model calls: 2, tool calls: 1, tools offered: ['execute_code']" in proc.stdout
    assert "script output: regions: ['north', 'south']" in proc.stdout
    assert "answer: north sold the most: 165.5" in proc.stdout
    # The script really wrote through the filesystem server.
    assert (files / "sales.csv").read_text(encoding="utf-8").startswith("region,amount\n")
