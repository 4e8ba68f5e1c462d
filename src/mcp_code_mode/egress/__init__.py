"""Egress: what a run may reach over the network, decided on the host.

- ``policy``: the rules (allow and deny lists of hosts, ``*.`` wildcards and ports; private addresses an
  operator opens explicitly) and the address classes that are refused whatever the lists say;
- ``proxy``: the HTTP ``CONNECT`` and absolute-form proxy that applies them, resolving names itself and
  connecting only to the address it approved, with per-run accounting, a byte cap and a connection cap;
- ``gate``: one run's Unix socket, bound into the worker's sandbox (whose network namespace is empty) and
  served only while that run runs.

Inside the sandbox, ``runners/sandboxed/cm_egress.py`` forwards a loopback port to the socket and the
run's environment names it in ``HTTP_PROXY``/``HTTPS_PROXY``.
"""

from __future__ import annotations

from .gate import GATE_PREFIX, SANDBOX_EGRESS, SOCKET_NAME, NetworkGrant, make_gate_directory, serve_gate, serve_unix
from .policy import AddressRefused, EgressPolicy, HostRule, classify, parse_rules

__all__ = [
    "SANDBOX_EGRESS",
    "SOCKET_NAME",
    "AddressRefused",
    "EgressPolicy",
    "HostRule",
    "NetworkGrant",
    "classify",
    "GATE_PREFIX",
    "make_gate_directory",
    "parse_rules",
    "serve_gate",
    "serve_unix",
]
