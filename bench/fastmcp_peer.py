# pyright: reportMissingImports=false
# (fastmcp is in .tools/peers/fastmcp, not in the virtualenv the type checker reads)
"""FastMCP's CodeMode in front of one stdio MCP server: the peer the benchmarks run beside ours.

    .tools/peers/fastmcp/bin/python bench/fastmcp_peer.py COMMAND [ARG ...]

Run with the Python of ``.tools/peers/fastmcp`` (``make bench`` installs ``fastmcp[code-mode]`` there; it
pins its own ``mcp``), never with ours: it imports nothing of this project. It serves stdio, proxying the
server that ``COMMAND ARG ...`` starts (a ``StdioTransport``, whose process FastMCP keeps between sessions)
with ``transforms=[CodeMode(...)]``, as FastMCP's documentation sets CodeMode up. The model then sees
CodeMode's meta-tools (``search``, ``get_schema``, ``execute``); ``execute`` runs a Python script in
pydantic-monty (``MontySandboxProvider``: a new ``AsyncMonty`` pool, one ``monty`` process, per script) with
``await call_tool(name, params)`` in scope.

One setting differs from CodeMode's defaults: ``max_tool_calls`` (default 50 a script) is
``FASTMCP_PEER_MAX_CALLS`` (default 1,000), so that the benchmarks' 300-call and 100-call scripts can run.
"""

from __future__ import annotations

import os
import sys

from fastmcp.client.transports import StdioTransport
from fastmcp.experimental.transforms.code_mode import CodeMode
from fastmcp.server import create_proxy


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    backend = StdioTransport(command=argv[0], args=argv[1:], env=dict(os.environ))
    code_mode = CodeMode(max_tool_calls=int(os.environ.get("FASTMCP_PEER_MAX_CALLS", "1000")))
    proxy = create_proxy(backend, name="fastmcp-code-mode", transforms=[code_mode])
    proxy.run(transport="stdio", show_banner=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
