"""Stage 2 and 5, the script cache: a key before the run, a lookup that may answer without running, and what
is stored after it.

The key holds what the run depends on: the policy in force, the runner's identity, the stubs the script
will see, besides code and packages. "Replayable" is decided from what the host saw (tool calls that reached
a server, files left, connections through the egress proxy), never from what a runner is assumed unable to do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import anyio

from ..bridge import FileEntry, RunResult
from ..cache import (
    KeyContext,
    NewScript,
    ScriptCache,
    StoredScript,
    ToolUse,
    code_key,
    derive_description,
    full_key,
    runner_identity,
    stubs_digest,
)
from ..runners import StubBundle
from ..tenants import current_tenant
from ._request import RunPlan


@dataclass(frozen=True)
class Keyed:
    plan: RunPlan
    key: str


class CacheStage:
    def __init__(self, scripts: ScriptCache, *, network_observed: bool = True) -> None:
        self.scripts = scripts
        self.network_observed = network_observed
        """Whether a run's only way out is the egress proxy, which counts it (a network namespace); else a run
        with the network counts as having used it."""

    def key(self, plan: RunPlan, bundle: StubBundle) -> Keyed:
        context = KeyContext(
            language=plan.language,
            runner=plan.runner.name,
            runner_identity=runner_identity(plan.runner),
            network=plan.network,
            packages=plan.requirements,
            stubs=stubs_digest(bundle.source + (_skills_part(bundle) if bundle.skills else "")),
            egress=plan.grant.policy.fingerprint() if plan.grant is not None else None,
        )
        return Keyed(plan, code_key(plan.code, context))

    async def lookup(
        self, keyed: Keyed, started: float, readable: Callable[[StoredScript], bool] | None = None
    ) -> StoredScript | None:
        """A stored run for this key, when the mode replays and one fits (in a worker thread: a hit is
        counted, and another process may hold the write lock a moment; a mode that reads nothing skips the
        thread hop). ``readable``: whether this server can give the client its own tokens for the stored
        ones (a run stored under another key is run again)."""
        mode = keyed.plan.mode
        if not self.scripts.reads(mode):
            return None
        hit = await anyio.to_thread.run_sync(
            partial(self.scripts.lookup, mode, keyed.key, tenant=current_tenant().name)
        )
        if hit is None or (readable is not None and not readable(hit)):
            return None
        return hit

    async def store(
        self,
        keyed: Keyed,
        result: RunResult,
        tools: list[ToolUse],
        description: str | None,
        pii_tokens: bytes | None = None,
    ) -> str:
        """Record a finished run as the mode says; the run's full hash (its key and the tools it used)."""
        plan = keyed.plan
        run_hash = full_key(keyed.key, tools)
        new: NewScript | None = None
        given = (description or "").strip()
        if result.success and plan.mode != "off":
            new = NewScript(
                hash=run_hash,
                code_key=keyed.key,
                language=plan.language,
                runner=plan.runner.name,
                code=plan.code,
                packages=list(plan.requirements),
                description=given or derive_description(plan.code, [t.name for t in tools]),
                description_given=bool(given),
                output=result.output,
                return_value=result.return_value,
                truncated=result.truncated,
                files=[{"path": f.path, "size": f.size} for f in result.files]
                + [{"path": "(shown image)", "size": len(i.data)} for i in result.images],  # never replayed
                tools=tools,
                tool_calls=result.tool_calls,
                network=self.used_network(plan, result),
                network_use=result.network.model_dump() if result.network is not None else None,
                execution_ms=result.execution_time,
                pii_tokens=pii_tokens,
            )
        if self.scripts.writes(plan.mode):
            await anyio.to_thread.run_sync(
                partial(self.scripts.after_run, plan.mode, new, tenant=current_tenant().name)
            )
        return run_hash

    def used_network(self, plan: RunPlan, result: RunResult) -> bool:
        """Whether the run reached for the network: any connection through the proxy, allowed or refused (or
        just being granted it, where the proxy is not the only way out)."""
        if not plan.network:
            return False
        if not self.network_observed or result.network is None:
            return True
        return result.network.used


def replayed(script: StoredScript, started: float) -> RunResult:
    """The result of a stored run, answered without running it."""
    return RunResult(
        success=True,
        output=script.output,
        return_value=script.return_value,
        execution_time=round((time.perf_counter() - started) * 1000),
        language=script.language,
        runner=script.runner,
        cached=True,
        hash=script.hash,
        tool_calls=0,
        truncated=script.truncated,
        files=[FileEntry(str(f["path"]), int(f["size"])) for f in script.files],
    )


def _skills_part(bundle: StubBundle) -> str:
    """The skills a run may call are part of what it depends on: a changed skill is another key."""
    return json.dumps(list(bundle.skills), sort_keys=True, default=str)


__all__ = ["CacheStage", "Keyed", "replayed"]
