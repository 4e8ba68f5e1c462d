"""Admission control: how many runs exist at once, how much memory they may claim together, and how
much of that one client may take.

Every run that is not a cache replay holds a slot of ``Admission`` while it runs. A run that finds
no slot waits in a bounded queue; a full queue, or a client that already holds its share of the
queue (its share of the slots, in proportion), is answered at once with ``ServerBusy`` (retryable,
with the current load), never a hang. A slot goes to the queued run whose client holds the fewest
running slots (oldest first among equals), and a client never holds more than ``per_client`` slots,
so one looping agent cannot keep the others waiting for more than one run of its own. The memory
limits of the running runs add up to at most ``memory_budget_mb`` (one run always may run alone). A
queued run's wait is bounded by ``queue_timeout`` and ends at once when its caller is cancelled; its
own timeout starts only once it runs.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from .errors import ServerBusy


def host_memory_mb() -> int:
    """The host's memory (MemTotal), or 4 GiB where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4096


def default_budget_mb() -> int:
    """Half of the host's memory: the rest stays for the server, the downstream servers and the host."""
    return max(256, host_memory_mb() // 2)


def default_max_running(memory_budget_mb: int, run_memory_mb: int) -> int:
    """Four runs per core (runs mostly wait on tool calls), and no more than the memory budget holds."""
    cores = os.cpu_count() or 1
    return max(1, min(4 * cores, memory_budget_mb // max(1, run_memory_mb)))


@dataclass
class _Ticket:
    client: str
    memory_mb: int
    arrived: float
    granted: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class Admission:
    """The slots, the queue and the memory budget of one server."""

    max_running: int
    max_queued: int
    per_client: int
    memory_budget_mb: int
    queue_timeout: float
    """Seconds a run may wait in the queue before it gets ``ServerBusy``."""
    running: list[_Ticket] = field(default_factory=list[_Ticket])
    queue: list[_Ticket] = field(default_factory=list[_Ticket])
    _changed: anyio.Event = field(default_factory=anyio.Event)
    refused: int = 0
    """Runs answered with ``ServerBusy`` since start."""

    @classmethod
    def create(
        cls,
        *,
        run_memory_mb: int,
        max_running: int | None = None,
        max_queued: int | None = None,
        per_client: int | None = None,
        memory_budget_mb: int | None = None,
        queue_timeout_ms: int = 60_000,
    ) -> Admission:
        """Defaults derived from the host: a memory budget of half its memory, four runs per core within it,
        a queue four times the slots, and every slot for one client (``share_among_clients`` halves that
        where many clients are served)."""
        budget = memory_budget_mb or default_budget_mb()
        slots = max_running or default_max_running(budget, run_memory_mb)
        return cls(
            max_running=slots,
            max_queued=4 * slots if max_queued is None else max_queued,
            per_client=per_client or slots,
            memory_budget_mb=budget,
            queue_timeout=queue_timeout_ms / 1000,
        )

    def share_among_clients(self) -> None:
        """Serving many clients (HTTP) without a configured share: each gets half the slots (at least one)."""
        self.per_client = min(self.per_client, max(1, math.ceil(self.max_running / 2)))

    @property
    def queue_share(self) -> int:
        """Runs one client may have waiting: its share of the slots, in proportion, of the queue."""
        return max(1, math.ceil(self.per_client * self.max_queued / self.max_running))

    def load(self) -> dict[str, Any]:
        """What is in force and in use right now (``get_execution_limits``)."""
        return {
            "maxConcurrentRuns": self.max_running,
            "maxQueuedRuns": self.max_queued,
            "maxRunsPerClient": self.per_client,
            "maxQueuedPerClient": self.queue_share,
            "memoryBudgetMB": self.memory_budget_mb,
            "queueTimeoutMs": round(self.queue_timeout * 1000),
            "running": len(self.running),
            "queued": len(self.queue),
            "memoryInUseMB": self._memory_in_use(),
            "refused": self.refused,
        }

    @asynccontextmanager
    async def slot(
        self, client: str, memory_mb: int, on_queued: Callable[[int], Awaitable[None]] | None = None
    ) -> AsyncGenerator[None]:
        """Hold a run slot for the block; wait in the queue first if there is none (``on_queued`` hears how
        many runs are ahead, whenever that changes). ``ServerBusy`` when the run cannot even queue."""
        ticket = _Ticket(client, memory_mb, time.monotonic())
        self._enter(ticket)
        try:
            if not ticket.granted.is_set():
                await self._wait(ticket, on_queued)
            yield
        finally:
            self._leave(ticket)

    def _enter(self, ticket: _Ticket) -> None:
        self.queue.append(ticket)
        self._grant()
        if ticket.granted.is_set():
            return
        mine = sum(1 for t in self.queue if t.client == ticket.client)
        reason = None
        if len(self.queue) > self.max_queued:
            reason = "the queue is full"
        elif mine > self.queue_share:
            reason = f"this client already has {mine - 1} runs waiting (its share: {self.queue_share})"
        if reason is not None:
            self.queue.remove(ticket)
            self.refused += 1
            raise ServerBusy(self._busy(reason))

    async def _wait(self, ticket: _Ticket, on_queued: Callable[[int], Awaitable[None]] | None) -> None:
        reported: int | None = None
        with anyio.move_on_after(self.queue_timeout) as scope:
            while not ticket.granted.is_set():
                ahead = self._ahead(ticket)
                if on_queued is not None and ahead != reported:
                    reported = ahead
                    await on_queued(ahead)
                changed = self._changed
                if ticket.granted.is_set():
                    break
                await changed.wait()
        if scope.cancelled_caught and not ticket.granted.is_set():
            self.refused += 1
            waited = self.queue_timeout * 1000
            raise ServerBusy(self._busy(f"the run waited {waited:.0f} ms in the queue (CODE_MODE_QUEUE_TIMEOUT_MS)"))

    def _leave(self, ticket: _Ticket) -> None:
        if ticket in self.running:
            self.running.remove(ticket)
        if ticket in self.queue:
            self.queue.remove(ticket)
        self._grant()
        self._notify()

    def _ahead(self, ticket: _Ticket) -> int:
        order = self._order()
        return order.index(ticket) if ticket in order else 0

    def _order(self) -> list[_Ticket]:
        """The queue in the order slots are given: clients holding the fewest slots first, then oldest."""
        holding: dict[str, int] = {}
        for t in self.running:
            holding[t.client] = holding.get(t.client, 0) + 1
        return sorted(self.queue, key=lambda t: (holding.get(t.client, 0), t.arrived))

    def _grant(self) -> None:
        granted = False
        progress = True
        while progress and len(self.running) < self.max_running:
            progress = False
            for ticket in self._order():
                if self._fits(ticket):
                    self.queue.remove(ticket)
                    self.running.append(ticket)
                    ticket.granted.set()
                    granted = progress = True
                    break
        if granted:
            self._notify()

    def _fits(self, ticket: _Ticket) -> bool:
        if sum(1 for t in self.running if t.client == ticket.client) >= self.per_client:
            return False
        return not self.running or self._memory_in_use() + ticket.memory_mb <= self.memory_budget_mb

    def _memory_in_use(self) -> int:
        return sum(t.memory_mb for t in self.running)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _busy(self, reason: str) -> str:
        return (
            f"server busy: {reason}; {len(self.running)} of {self.max_running} runs running, "
            f"{len(self.queue)} of {self.max_queued} queued, {self._memory_in_use()} of {self.memory_budget_mb} MB "
            "of the memory budget in use. Retry in a few seconds."
        )
