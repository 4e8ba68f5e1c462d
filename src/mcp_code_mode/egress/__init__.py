"""Egress: what a run may reach over the network, decided on the host (issue 19, in progress).

- ``policy``: the rules (allow and deny lists of hosts, ``*.`` wildcards and ports; private addresses an
  operator opens explicitly) and the address classes that are refused whatever the lists say;
- ``proxy``: the HTTP ``CONNECT`` and absolute-form proxy that applies them, resolving names itself and
  connecting only to the address it approved, with per-run accounting and a byte cap.

Not wired into the sandboxes yet: runs still get the host's network namespace when networking is allowed
(see SECURITY.md). Binding the proxy's Unix socket into an empty network namespace is the next step.
"""

from __future__ import annotations

from .policy import AddressRefused, EgressPolicy, HostRule, classify, parse_rules

__all__ = ["AddressRefused", "EgressPolicy", "HostRule", "classify", "parse_rules"]
