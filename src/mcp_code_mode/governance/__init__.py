"""Governance: what a run's tool calls may do, decided on the host.

- ``policy``: the servers file's ``policy`` entries (per server and per tool: allow, ask or deny, with
  conditions on the arguments, a per-run cap and a per-minute rate) and ``CODE_MODE_POLICY=annotations``
  (defaults from the tools' MCP annotations, untrusted hints); ``PolicyBook`` answers for a call,
  ``RunCounter`` and ``RateLimiter`` keep the caps.
"""

from __future__ import annotations

from .policy import (
    MISSING,
    ArgumentCondition,
    Decision,
    PiiPolicy,
    PolicyBook,
    PolicyMode,
    RateLimiter,
    RunCounter,
    ServerPolicy,
    StaticDecision,
    ToolRule,
    Verdict,
    glob_regex,
    parse_pointer,
    resolve_pointer,
)

__all__ = [
    "MISSING",
    "ArgumentCondition",
    "PiiPolicy",
    "Decision",
    "PolicyBook",
    "PolicyMode",
    "RateLimiter",
    "RunCounter",
    "ServerPolicy",
    "StaticDecision",
    "ToolRule",
    "Verdict",
    "glob_regex",
    "parse_pointer",
    "resolve_pointer",
]
