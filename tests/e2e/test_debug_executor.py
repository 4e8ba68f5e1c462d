"""scripts/debug_executor.py drives the executor over stdio as a real client and fails loudly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..conftest import filesystem_entry, memory_entry

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "scripts" / "debug_executor.py"


def write_config(tmp_path: Path) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    config = tmp_path / "servers.json"
    servers = {"filesystem": filesystem_entry(files), "memory": memory_entry(tmp_path / "memory.jsonl")}
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return config


def run_harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HARNESS), *args], capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL
    )


def test_the_harness_runs_the_task_over_stdio_and_succeeds(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    proc = run_harness("--config", str(config), "--files", "12")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tools: execute_code" in proc.stdout
    assert '"sum_of_values": 506' in proc.stdout
    assert "OK: 2" in proc.stdout  # 2x tool calls: at least 26 for 12 files
    assert sorted(p.name for p in (tmp_path / "files" / "demo").iterdir())[:2] == ["item_00.json", "item_01.json"]


def test_the_harness_exits_non_zero_when_the_script_fails(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    script = tmp_path / "broken.py"
    script.write_text("filesystem.read_text_file(path='missing.txt')\n", encoding="utf-8")
    proc = run_harness("--config", str(config), "--script", str(script))
    assert proc.returncode == 1
    assert "FAIL: the script failed" in proc.stderr
