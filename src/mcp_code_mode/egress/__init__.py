"""Egress: what a run may reach over the network, decided on the host (issue 19, in progress).

``policy``: the rules (allow and deny lists of hosts, ``*.`` wildcards and ports; private addresses an
operator opens explicitly) and the address classes that are refused whatever the lists say. The proxy that
enforces them is still to come.
"""

from __future__ import annotations

from .policy import AddressRefused, EgressPolicy, HostRule, classify, parse_rules

__all__ = ["AddressRefused", "EgressPolicy", "HostRule", "classify", "parse_rules"]
