"""``python -m mcp_code_mode.executor_server``: serve the executor over stdio.

Takes the same options as ``mcp-code-mode serve``.
"""

from __future__ import annotations

import sys

from .cli import main as cli_main


def main(argv: list[str] | None = None) -> int:
    return cli_main(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
