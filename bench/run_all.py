#!/usr/bin/env python3
"""Run every benchmark section, one after another, and rewrite ``bench/RESULTS.md``.

    .venv/bin/python bench/run_all.py [--only bridge latency ...] [--output bench/RESULTS.md]

(``make bench`` installs what is needed, then runs this.) Each section is its own script and its own
process (``bench/<name>.py``, runnable alone; it prints the same tables); this runner starts them in
order, never two at once, collects what each wrote with ``--json``, and renders one markdown file: the
machine, a summary of every target (met / not met), then each section with its exact command. A
section that fails is reported as failed, and the exit status is then 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, Section, machine_facts, met_text, render_section, section_from_json

SECTIONS = [
    "bridge",
    "latency",
    "orchestration",
    "context",
    "cache_search",
    "concurrency",
    "memory",
    "packages",
    "load",
    "egress",
    "pii_detection",
    "pii",
    "tool_search",
    "fan_out",
    "startup",
]
BUDGET_SECONDS = 600
SECTION_TIMEOUT = 600


def run(name: str, folder: Path) -> Section:
    out = folder / f"{name}.json"
    script = Path(__file__).resolve().parent / f"{name}.py"
    print(f"\n=== {name} ===", flush=True)
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, str(script), "--json", str(out)],
            cwd=ROOT,
            stdout=sys.stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=SECTION_TIMEOUT,
            check=False,
        )
        stderr, status = done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        stderr, status = str(exc.stderr or ""), None
    if stderr:
        sys.stderr.write(stderr)
    if out.exists():
        section = section_from_json(json.loads(out.read_text(encoding="utf-8")))
        if status not in (0, None) and not section.failed:
            section.failed = f"exit status {status}"
        return section
    section = Section(name, f"{name} (failed)", f".venv/bin/python bench/{name}.py")
    section.seconds = round(time.perf_counter() - started, 1)
    tail = stderr.strip().splitlines()[-5:]
    reason = "timed out" if status is None else f"exit status {status}"
    section.failed = f"{reason}: " + " / ".join(tail)
    return section


def render(sections: list[Section], facts: dict[str, str], started: str, loads: list[list[float]], wall: float) -> str:
    load = " / ".join(" ".join(f"{x:.2f}" for x in triple) for triple in loads)
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`.venv/bin/python bench/run_all.py`); every figure below comes from that one "
        "run, on this machine, beside the alternative a user would pick instead. Each section is also "
        "runnable alone with the command shown under its title. Medians unless said otherwise; the machine "
        "is shared, so the load average is given for each section.",
        "",
        f"- date: {started}",
        f"- total time: {wall:.0f} s"
        + ("" if wall <= BUDGET_SECONDS else f" (**over the {BUDGET_SECONDS} s budget**)"),
        f"- machine: {facts['cores']} cores ({facts['cpu']}), {facts['memory']} memory, Linux {facts['kernel']}",
        f"- load average (1, 5, 15 min) at start / at end: {load}",
        f"- Python {facts['python']}, {facts['deno']}, sandbox: {facts['sandbox']}, commit {facts['commit']}",
        f"- fork() + exit + waitpid of a bare Python process: {facts['fork']} (median of 30; every zygote run "
        "pays a fork of a larger process)",
        "",
        "## Targets",
        "",
        "| section | target | measured | result |",
        "|---|---|---|---|",
    ]
    for section in sections:
        lines.extend(f"| {section.title} | {t.target} | {t.measured} | {met_text(t.met)} |" for t in section.targets)
        if section.failed:
            lines.append(f"| {section.title} | (the section failed) | {section.failed[:200]} | **failed** |")
    lines.append("")
    return "\n".join(lines) + "\n" + "\n".join(render_section(s) for s in sections)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS, help="run only these sections")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "RESULTS.md")
    args = parser.parse_args()
    facts = machine_facts()
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    load_start = [round(x, 2) for x in os.getloadavg()]
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        sections = [run(name, Path(tmp)) for name in args.only]
    wall = time.perf_counter() - began
    loads = [load_start, [round(x, 2) for x in os.getloadavg()]]
    args.output.write_text(render(sections, facts, started, loads, wall), encoding="utf-8")
    print(f"\nwrote {args.output} ({wall:.0f} s)")
    return 1 if any(s.failed for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
