"""One run's gate: the policy, caps, approvals and plans applied to each of its tool calls, on the host.

``RunGate.admit`` is the dispatcher's ``CallGate``: it sees the tool by its server's original names (the
index has resolved whatever spelling the script used) and answers

- ``deny`` → refused: ``ToolError("denied: …")`` in the script, naming the rule;
- over a per-run cap or the per-minute rate → refused (``over_cap``);
- ``allow`` → called;
- ``ask`` → in a plan (``mode="plan"``) recorded, not called: the script gets ``{"planned": true, "id": …}``
  and goes on; in a run that carries an approved plan, a call matching one of the plan's calls (same tool,
  same arguments, at most as many times) is called without asking; otherwise the person is asked
  (``Approver``), or, for a client that cannot be asked, refused with how to get it approved.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..bridge.dispatcher import Admission
from ..downstream.tools import ToolInfo
from ..governance import PolicyBook, RateLimiter, RunCounter
from ..governance.approvals import Approver, Gated

RunMode = Literal["run", "plan"]


def call_key(server: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """A call's identity for matching a plan: its tool and its arguments as canonical JSON."""
    return json.dumps([server, tool, arguments], sort_keys=True, separators=(",", ":"), default=repr)


@dataclass(frozen=True)
class PlannedCall:
    id: str
    server: str
    tool: str
    arguments: dict[str, Any]
    position: int
    rule: str
    line: int | None = None
    """The script's line that made the call (as the sandbox reported it)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "server": self.server,
            "tool": self.tool,
            "arguments": self.arguments,
            "line": self.line,
            "position": self.position,
            "rule": self.rule,
        }


NO_ELICITATION = (
    "{server}.{reason}, and this client cannot be asked (it has no elicitation): run the script with "
    'mode="plan" to list its gated calls, then run it again with approvePlan=<planId> to make them'
)


@dataclass
class RunGate:
    book: PolicyBook
    rate: RateLimiter
    mode: RunMode = "run"
    approver: Approver | None = None
    approved: Iterable[Mapping[str, Any]] = ()
    """The calls of an approved plan (``PlannedCall.to_json``): each lets one identical call through unasked."""
    planned: list[PlannedCall] = field(default_factory=list[PlannedCall])
    counter: RunCounter = field(default_factory=RunCounter)
    mask: Callable[[Any], Any] | None = None
    """What a person or a model may see of arguments (``privacy``: tokens for personal data, ``[SECRET]``):
    applied to what a plan keeps and an approval question shows, and to the plan's matching."""

    def __post_init__(self) -> None:
        self._budget = Counter(call_key(c["server"], c["tool"], c["arguments"]) for c in self.approved)

    async def admit(
        self, tool: ToolInfo, arguments: dict[str, Any], position: int, line: int | None = None
    ) -> Admission:
        server, name = tool.server, tool.name
        verdict = self.book.decide(server, name, tool.annotations, arguments)
        if verdict.decision == "deny":
            return Admission("denied", error=f"denied: {server}.{verdict.reason}")
        shown = self.mask(arguments) if self.mask is not None and verdict.decision == "ask" else arguments
        if verdict.decision == "ask" and self.mode == "plan":  # recorded, not made: no cap counts it yet
            number = f"c{len(self.planned) + 1}"
            planned = PlannedCall(number, server, name, dict(shown), position, verdict.rule, line)
            self.planned.append(planned)
            return Admission("planned", answered=True, value={"planned": True, "id": planned.id})
        max_per_run, per_minute = self.book.limits(server, name)
        over = self.counter.check_and_count(server, name, max_per_run, rule=verdict.rule)
        if over is None:
            over = self.rate.check_and_count(server, name, per_minute, rule=verdict.rule)
        if over is not None:
            return Admission("over_cap", error=f"over cap: {server}.{over}")
        if verdict.decision == "allow":
            return Admission("allowed")
        key = call_key(server, name, shown)
        if self._budget[key] > 0:
            self._budget[key] -= 1
            return Admission("approved")
        if self.approver is None:
            return Admission("refused", error=NO_ELICITATION.format(server=server, reason=verdict.reason))
        answer = await self.approver.decide(Gated(server, name, shown, position, verdict.rule, line))
        if answer.allowed:
            return Admission("approved")
        return Admission("denied", error=f"denied: {server}.{name}: {answer.how} ({verdict.rule})")


__all__ = ["NO_ELICITATION", "PlannedCall", "RunGate", "RunMode", "call_key"]
