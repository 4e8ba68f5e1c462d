"""The server's task book (``_tasks.TaskBook``): a cap per client, a TTL, cancellation, and whose a task is."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from mcp_code_mode._tasks import TaskBook

pytestmark = pytest.mark.anyio


async def forever() -> dict[str, Any]:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def answer() -> dict[str, Any]:
    return {"content": [], "isError": False}


async def test_a_client_holds_at_most_its_cap_of_tasks_and_others_are_not_counted() -> None:
    book = TaskBook(max_per_client=2)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            book.attach(tg)
            book.start("a", None, forever)
            book.start("a", None, forever)
            with pytest.raises(MCPError, match="at most 2 tasks"):
                book.start("a", None, forever)
            book.start("b", None, forever)
            assert [e.owner for e in book.listed("b")] == ["b"]
            tg.cancel_scope.cancel()


async def test_a_task_and_its_result_are_gone_after_its_ttl_and_a_run_still_going_is_cancelled() -> None:
    book = TaskBook()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            book.attach(tg)
            done = book.start("a", 50, answer)
            going = book.start("a", 50, forever)
            await done.done.wait()
            assert book.get("a", done.id).status == "completed"
            await anyio.sleep(0.1)
            for entry in (done, going):
                with pytest.raises(MCPError, match="no task"):
                    book.get("a", entry.id)
            await going.done.wait()
            assert going.status == "cancelled"


async def test_a_cancelled_task_says_so_and_cannot_be_cancelled_twice() -> None:
    book = TaskBook()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            book.attach(tg)
            entry = book.start("a", None, forever)
            with pytest.raises(MCPError, match="no task"):
                book.cancel("b", entry.id)
            assert book.cancel("a", entry.id).status == "cancelled"
            await entry.done.wait()
            with pytest.raises(MCPError, match="already cancelled"):
                book.cancel("a", entry.id)
            assert entry.wire()["status"] == "cancelled" and entry.wire()["ttl"] == 3_600_000
