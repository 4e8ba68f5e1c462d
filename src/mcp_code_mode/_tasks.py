"""MCP tasks (protocol 2025-11-25) for ``execute_code``: a long run a client may leave and come back to.

A ``tools/call`` of ``execute_code`` whose params carry ``task`` (``{"ttl": ms}``) is answered at once with a
``CreateTaskResult``; the call itself goes on in the server's task group. ``tasks/get`` says how it is,
``tasks/result`` waits for it and answers with the ``CallToolResult`` the call would have had, ``tasks/list``
lists the caller's tasks and ``tasks/cancel`` cancels one (its run's worker is killed, as for a cancelled
request). A task belongs to the client that made it (its HTTP session, else its connection): another sees
no such task. Each lives ``ttl`` (at most ``MAX_TTL_MS``) from its creation, then it and its result are
gone (a run still going is cancelled); a client holds at most ``MAX_TASKS_PER_CLIENT``. A call without
``task`` is served as before.

The mcp SDK (2.3) has the wire types (``mcp_types``: ``Task``, ``CreateTaskResult``, ``ToolExecution`` ...)
but no server side: its method tables leave ``tasks/*`` out and it checks a ``tools/call`` result as a
``CallToolResult``. So ``TaskMiddleware`` answers a task-augmented call before the SDK's own handling (a
middleware that returns without ``call_next`` owns its result), and the ``tasks/*`` methods are handlers
of the lowlevel server.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel

from ._clients import http_client, scoped, tenant_of
from .tenants import Tenant, acting_as, current_tenant

logger = logging.getLogger(__name__)

TASKS_VERSION = "2025-11-25"
"""The protocol version that has tasks."""
TASK_TOOLS = frozenset({"execute_code"})
"""The tools a client may call as a task (``execution.taskSupport: optional``)."""
DEFAULT_TTL_MS = 3_600_000
MAX_TTL_MS = 86_400_000
MAX_TASKS_PER_CLIENT = 16
POLL_MS = 1000
RELATED_TASK = "io.modelcontextprotocol/related-task"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


@dataclass
class TaskEntry:
    id: str
    owner: str
    ttl_ms: int
    created: float = field(default_factory=time.monotonic)
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    status: types.TaskStatus = "working"
    message: str | None = None
    result: dict[str, Any] | None = None
    error: MCPError | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def wire(self) -> dict[str, Any]:
        task = types.Task(
            task_id=self.id,
            status=self.status,
            status_message=self.message,
            created_at=self.created_at,
            last_updated_at=self.updated_at,
            ttl=self.ttl_ms,
            poll_interval=POLL_MS,
        )
        return task.model_dump(by_alias=True, mode="json", exclude_none=True)

    def finish(self, status: types.TaskStatus, message: str | None = None) -> None:
        if self.status == "working":
            self.status, self.message, self.updated_at = status, message, _now()
        self.done.set()


class TaskBook:
    """The tasks of every client of one server, run in the server's task group (``attach``)."""

    def __init__(self, *, max_per_client: int = MAX_TASKS_PER_CLIENT) -> None:
        self._tasks: dict[str, TaskEntry] = {}
        self._group: anyio.abc.TaskGroup | None = None
        self._max = max_per_client

    def attach(self, group: anyio.abc.TaskGroup) -> None:
        self._group = group

    def _sweep(self) -> None:
        now = time.monotonic()
        for entry in [e for e in self._tasks.values() if now - e.created > e.ttl_ms / 1000]:
            entry.scope.cancel()
            del self._tasks[entry.id]

    def start(self, owner: str, ttl_ms: Any, work: Callable[[], Awaitable[dict[str, Any]]]) -> TaskEntry:
        """A new task of ``owner`` running ``work`` (the call's wire result); ``MCPError`` over the cap."""
        self._sweep()
        if self._group is None:
            raise MCPError(code=INVALID_PARAMS, message="this server is not running tasks now")
        if sum(1 for e in self._tasks.values() if e.owner == owner) >= self._max:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"a client holds at most {self._max} tasks: fetch or cancel one, or wait for one's ttl",
            )
        ttl = ttl_ms if isinstance(ttl_ms, int) and not isinstance(ttl_ms, bool) and ttl_ms > 0 else DEFAULT_TTL_MS
        entry = TaskEntry(id=uuid.uuid4().hex, owner=owner, ttl_ms=min(ttl, MAX_TTL_MS))
        entry.scope.deadline = anyio.current_time() + entry.ttl_ms / 1000  # a run still going at its ttl stops
        self._tasks[entry.id] = entry
        self._group.start_soon(self._run, entry, work, current_tenant())
        return entry

    async def _run(self, entry: TaskEntry, work: Callable[[], Awaitable[dict[str, Any]]], tenant: Tenant) -> None:
        try:
            with entry.scope, acting_as(tenant):  # the run goes on as the tenant that started it
                result = await work()
                entry.result = result
                entry.finish("failed" if result.get("isError") else "completed")
        except MCPError as exc:
            entry.error = exc
            entry.finish("failed", exc.error.message)
        except Exception:  # the top of this task: a failure is the task's, never the server's
            logger.exception("task %s failed", entry.id)
            entry.error = MCPError(code=INVALID_PARAMS, message="the task failed inside the server")
            entry.finish("failed", "the task failed inside the server")
        finally:
            entry.finish("cancelled", "cancelled")  # only if it has not finished otherwise

    def get(self, owner: str, task_id: str) -> TaskEntry:
        self._sweep()
        entry = self._tasks.get(task_id)
        if entry is None or entry.owner != owner:
            raise MCPError(code=INVALID_PARAMS, message=f"no task {task_id!r} (or its ttl has passed)")
        return entry

    def listed(self, owner: str) -> list[TaskEntry]:
        self._sweep()
        return [e for e in self._tasks.values() if e.owner == owner]

    def cancel(self, owner: str, task_id: str) -> TaskEntry:
        entry = self.get(owner, task_id)
        if entry.status != "working":
            raise MCPError(code=INVALID_PARAMS, message=f"task {task_id!r} is already {entry.status}")
        entry.scope.cancel()
        entry.finish("cancelled", "cancelled by the client")
        return entry


def task_owner(ctx: ServerRequestContext[Any, Any]) -> str:
    """Whose a task is: the HTTP session (``Mcp-Session-Id``), else the bearer token, else the connection; within
    its tenant (``_clients.scoped``)."""
    return scoped(tenant_of(ctx), _owner(ctx))


def _owner(ctx: ServerRequestContext[Any, Any]) -> str:
    client = http_client(ctx)
    if client is not None:
        return client
    return f"connection:{id(ctx.session._connection)}"  # pyright: ignore[reportPrivateUsage]


class TaskMiddleware:
    """Answers a task-augmented ``tools/call`` of a ``TASK_TOOLS`` tool with a task; passes everything else on."""

    def __init__(self, book: TaskBook) -> None:
        self.book = book

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping) or params.get("task") is None:
            return await call_next(ctx)
        name = params.get("name")
        if ctx.protocol_version != TASKS_VERSION or name not in TASK_TOOLS:
            raise MCPError(code=INVALID_PARAMS, message=f"{name!r} cannot be called as a task here")
        task = params["task"]
        ttl = task.get("ttl") if isinstance(task, Mapping) else None
        inner = dataclasses.replace(ctx, params={k: v for k, v in params.items() if k != "task"})

        async def work() -> dict[str, Any]:  # the call's wire result, as the SDK shaped it
            result = await call_next(inner)
            if isinstance(result, BaseModel):
                return result.model_dump(by_alias=True, mode="json", exclude_none=True)
            return dict(result) if isinstance(result, Mapping) else {}

        entry = self.book.start(task_owner(ctx), ttl, work)
        return {"task": entry.wire()}


def install(server: Server[Any], book: TaskBook) -> None:
    """The middleware and the ``tasks/*`` methods on a lowlevel server."""
    server.middleware.append(TaskMiddleware(book))

    async def get(ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> dict[str, Any]:
        return book.get(task_owner(ctx), params.task_id).wire()

    async def result(ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        entry = book.get(task_owner(ctx), params.task_id)
        await entry.done.wait()
        if entry.error is not None:
            raise entry.error
        if entry.result is None:
            raise MCPError(code=INVALID_PARAMS, message=f"task {entry.id!r} was cancelled: it has no result")
        meta = {**(entry.result.get("_meta") or {}), RELATED_TASK: {"taskId": entry.id}}
        return {**entry.result, "_meta": meta}

    async def listed(ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams) -> dict[str, Any]:
        return {"tasks": [e.wire() for e in book.listed(task_owner(ctx))]}

    async def cancel(ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams) -> dict[str, Any]:
        return book.cancel(task_owner(ctx), params.task_id).wire()

    server.add_request_handler("tasks/get", types.GetTaskRequestParams, get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, result)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, listed)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel)


def capability() -> types.ServerTasksCapability:
    """What the server declares: tasks of ``tools/call``, listed and cancellable."""
    return types.ServerTasksCapability(
        list=types.TasksListCapability(),
        cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(
            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
        ),
    )


__all__ = ["TaskBook", "TaskMiddleware", "capability", "install", "task_owner"]
