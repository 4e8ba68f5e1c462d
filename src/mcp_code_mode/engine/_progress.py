"""Progress of a run: what is reported while it waits for a slot and while it runs."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

T = TypeVar("T")


@dataclass(frozen=True)
class RunProgress:
    """Where a run is: reported every ``progress_interval_ms`` while it goes on."""

    elapsed: float
    """Seconds since the run started; strictly increasing from one report to the next."""
    tool_calls: int
    """Tool calls finished so far."""
    queued: int | None = None
    """While the run waits for a slot: how many runs are ahead of it (``None`` once it runs)."""
    waiting: tuple[str, ...] = ()
    """Before it runs: what it waits for to start (downstream servers still connecting, its runner's start)."""
    done: float | None = None
    """A report of the script itself (``report_progress(done, total, message)``): how far it says it is; None
    for the engine's own reports. The script's figures are its claim, passed on as it made it (a decrease
    too); ``message`` is masked like anything else of the run that reaches the client."""
    total: float | None = None
    message: str | None = None


ProgressCallback = Callable[[RunProgress], Awaitable[None]]


async def reporting(
    work: Callable[[], Awaitable[T]],
    on_progress: ProgressCallback | None,
    calls: Callable[[], int],
    *,
    started: float,
    interval: float,
) -> T:
    """``work()`` with a report at its start and every ``interval`` seconds until it ends; elapsed time counts
    from ``started`` (``perf_counter``, when the request came: a queued run reported before). An exception of
    ``work`` is raised as itself, never wrapped in the reporter's task group."""
    if on_progress is None:
        return await work()

    async def report() -> None:
        while True:
            await on_progress(RunProgress(time.perf_counter() - started, calls()))
            await anyio.sleep(interval)

    done: list[T] = []
    failure: list[BaseException] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(report)
        try:
            done.append(await work())
        except Exception as exc:  # raised again below, not wrapped in the task group's ExceptionGroup
            failure.append(exc)
        finally:
            tg.cancel_scope.cancel()
    if failure:
        raise failure[0]
    return done[0]


__all__ = ["ProgressCallback", "RunProgress", "reporting"]
