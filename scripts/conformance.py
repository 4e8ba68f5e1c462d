"""Run the official MCP conformance suite's server scenarios against mcp-code-mode over HTTP.

    .venv/bin/python scripts/conformance.py [--config FILE] [--scenario NAME]   (or: make conformance)

Installs Node 22 and the pinned suite into ./.tools (scripts/node_tools.py), starts
``mcp-code-mode serve --http`` on a free loopback port (no token: the suite cannot send one, and a
loopback bind without a token is allowed), runs the active server scenarios, and compares them with
scripts/conformance-baseline.yml, the scenarios that do not apply to a tools-only server, each with
its reason. Exits non-zero on a failure not in the baseline, or on a baseline entry that passes.
Results (one checks.json per scenario) are kept in .tools/conformance-results/.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import node_tools

BASELINE = node_tools.ROOT / "scripts" / "conformance-baseline.yml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, default=node_tools.ROOT / "mcp_servers.json", help="servers file")
    parser.add_argument("--scenario", help="run only this scenario (default: the active suite)")
    args = parser.parse_args(argv)

    env = node_tools.ensure()
    results = node_tools.TOOLS / "conformance-results"
    shutil.rmtree(results, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        log = Path(tmp) / "server.log"
        with node_tools.running_server(args.config.resolve(), log) as (url, _):
            command = ["conformance", "server", "--url", url, "--expected-failures", str(BASELINE), "-o", str(results)]
            if args.scenario:
                command += ["--scenario", args.scenario]
            print(f"$ {' '.join(command)}", file=sys.stderr, flush=True)
            status = subprocess.run(command, env=env, cwd=node_tools.ROOT).returncode
        server_log = log.read_text(encoding="utf-8", errors="replace")
        kept = results / "server.log"
        results.mkdir(exist_ok=True)
        kept.write_text(server_log, encoding="utf-8")
    print(f"\nconformance: {'OK' if status == 0 else 'FAILED'} (exit {status}); server log: {kept}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
