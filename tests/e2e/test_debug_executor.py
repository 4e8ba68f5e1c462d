"""scripts/debug_executor.py drives the executor over stdio as a real client and fails loudly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..conftest import filesystem_entry, memory_entry

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "scripts" / "debug_executor.py"


def write_config(tmp_path: Path, policy: dict[str, object] | None = None) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    config = tmp_path / "servers.json"
    filesystem = {**filesystem_entry(files), **({"policy": policy} if policy else {})}
    servers = {"filesystem": filesystem, "memory": memory_entry(tmp_path / "memory.jsonl")}
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
    names = sorted(p.name for p in (tmp_path / "files" / "demo").iterdir())
    assert "item_01.json" in names and "item_00.json" not in names  # archived: moved away
    assert [n for n in names if n.startswith("archived-")][0].endswith("-item_00.json")
    assert "asks for approval" not in proc.stdout  # nothing gated in this servers file


def test_the_demo_shows_a_gated_call_asked_and_approved(tmp_path: Path) -> None:
    """As the shipped mcp_servers.json gates it: move_file asks; the harness answers the elicitation."""
    config = write_config(tmp_path, {"default": "allow", "tools": {"move_file": "ask"}})
    proc = run_harness("--config", str(config), "--files", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--- the server asks for approval ---" in proc.stdout
    assert "filesystem.move_file" in proc.stdout and "1 approved by the person" in proc.stdout


def test_the_harness_exits_non_zero_when_the_script_fails(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    script = tmp_path / "broken.py"
    script.write_text("filesystem.read_text_file(path='missing.txt')\n", encoding="utf-8")
    proc = run_harness("--config", str(config), "--script", str(script))
    assert proc.returncode == 1
    assert "FAIL: the script failed" in proc.stderr
