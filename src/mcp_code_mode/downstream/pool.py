"""``ToolPool``: one MCP client session per configured server, its tool index, calls and restarts.

Each server's connection lives in its own task inside the pool's task group, so that the SDK's
context managers are entered and left in one task. Servers start concurrently; one that fails is
reported and the others serve. Entering the pool waits for every server's start, unless it is made with
``background=True``: then servers connect while the pool is already in use, a call to a server still
starting waits for it (bounded by its start-up timeout), and ``settled`` waits for the servers a caller
needs. A server that dies is restarted on the next call to it, and the call in flight fails with
``ServerUnavailable`` naming it.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from ..config import ResolvedServer, ServerConfig, resolve_server
from ..errors import ConfigError, DownstreamError, ServerUnavailable
from .env import child_environment
from .tools import ToolInfo

logger = logging.getLogger(__name__)

ServerState = Literal["starting", "ready", "failed", "crashed", "disabled", "stopped"]

# A server that failed to start is tried again on a call at most this often (seconds).
RETRY_FAILED_AFTER = 10.0
_STDERR_TAIL = 2000


@dataclass
class DownstreamServer:
    """A configured server and what is known about it right now."""

    config: ServerConfig
    state: ServerState = "starting"
    error: str | None = None
    tools: list[ToolInfo] = field(default_factory=list)
    client: Client | None = None
    started_at: float | None = None
    failed_at: float | None = None
    restarts: int = 0
    calls: int = 0
    stop: anyio.Event = field(default_factory=anyio.Event)
    stopped: anyio.Event = field(default_factory=anyio.Event)
    ready: anyio.Event = field(default_factory=anyio.Event)

    @property
    def name(self) -> str:
        return self.config.name

    def status(self) -> dict[str, Any]:
        """A JSON-able summary for discovery tools and the CLI."""
        return {
            "name": self.name,
            "state": self.state,
            "transport": self.config.transport,
            "tools": len(self.tools),
            "error": self.error,
            "restarts": self.restarts,
            "description": self.config.description,
        }


def _leaf_exceptions(exc: BaseException) -> Iterable[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:  # pyright: ignore[reportUnknownVariableType]
            yield from _leaf_exceptions(inner)  # pyright: ignore[reportUnknownArgumentType]
    else:
        yield exc


def _describe_start_failure(exc: BaseException, resolved: ResolvedServer | None, stderr: str) -> str:
    leaves = list(_leaf_exceptions(exc))
    leaf = next((e for e in leaves if not isinstance(e, anyio.get_cancelled_exc_class())), leaves[0])
    if isinstance(leaf, ConfigError):
        return str(leaf)
    if isinstance(leaf, FileNotFoundError) and resolved is not None and resolved.command:
        message = f"cannot start {resolved.command!r}: command not found"
    elif isinstance(leaf, MCPError) and leaf.error.code == types.CONNECTION_CLOSED:
        message = "the server exited during start-up"
    else:
        message = f"{type(leaf).__name__}: {leaf}"
    tail = stderr.strip()[-_STDERR_TAIL:]
    return f"{message}; its stderr ended with: {tail}" if tail else message


def _is_connection_closed(exc: BaseException) -> bool:
    return any(
        isinstance(e, MCPError)
        and e.error.code == types.CONNECTION_CLOSED
        or isinstance(e, anyio.ClosedResourceError | anyio.BrokenResourceError | ConnectionError)
        for e in _leaf_exceptions(exc)
    )


_DOWN = {"failed": "it failed to start", "disabled": "it is disabled in the servers file"}


def down_servers(servers: Mapping[str, DownstreamServer]) -> dict[str, str]:
    """Server name → why it is down, for each server without tools that failed to start or is disabled:
    what ``StubIndex.build`` takes as ``unavailable``. A server that crashed keeps its tools (a call restarts it)."""
    return {
        name: server.error or _DOWN[server.state]
        for name, server in servers.items()
        if server.state in _DOWN and not server.tools
    }


class ToolPool:
    """The downstream servers: started together, called by name, restarted when they die.

    Use as an async context manager; leaving it stops every server and its child processes.
    """

    def __init__(
        self,
        servers: dict[str, ServerConfig],
        env: dict[str, str],
        *,
        default_timeout: float = 60.0,
        on_change: Callable[[], None] | None = None,
        background: bool = False,
    ) -> None:
        self._servers = {name: DownstreamServer(config) for name, config in servers.items()}
        self._background = background
        self._env = env
        self._default_timeout = default_timeout
        self._on_change = on_change
        self._tg: TaskGroup | None = None
        self._exit_stack: AsyncExitStack | None = None
        self._restart_lock = anyio.Lock()
        self.version = 0
        """Increases whenever any server's tool list changes."""

    # ----- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> ToolPool:
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.push_async_callback(self._stop_all)
            for server in self._servers.values():
                if server.config.disabled:
                    server.state = "disabled"
                    server.ready.set()
                    continue
                self._tg.start_soon(self._connection, server)
            if self._background:
                self._tg.start_soon(self._report_start)
            else:
                await self._report_start()
            self._exit_stack = stack.pop_all()
        return self

    async def _report_start(self) -> None:
        for server in self._servers.values():
            await server.ready.wait()
        for server in self._servers.values():
            if server.state == "failed":
                logger.warning("downstream server %r failed to start: %s", server.name, server.error)
            elif server.state == "ready":
                logger.info("downstream server %r ready with %d tools", server.name, len(server.tools))

    def starting(self) -> list[str]:
        """Servers whose first start is still under way."""
        return [name for name, server in self._servers.items() if server.state == "starting"]

    async def settled(self, names: Iterable[str] | None = None) -> None:
        """Return once each named server (all when None) has started or failed to: each is bounded by its own
        start-up timeout, which its connection enforces."""
        for name in list(self._servers) if names is None else names:
            server = self._servers.get(name)
            if server is not None and server.state == "starting":
                await server.ready.wait()

    async def __aexit__(self, *exc_info: object) -> None:
        if self._exit_stack is not None:
            stack, self._exit_stack = self._exit_stack, None
            await stack.aclose()

    async def _stop_all(self) -> None:
        for server in self._servers.values():
            server.stop.set()
        with anyio.move_on_after(15):
            for server in self._servers.values():
                if server.state not in ("disabled",) and server.started_at is not None:
                    await server.stopped.wait()

    # ----- connections -----------------------------------------------------------------------

    @asynccontextmanager
    async def _open(self, server: DownstreamServer, resolved: ResolvedServer, errlog: TextIO) -> AsyncGenerator[Client]:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification) and self._tg is not None:
                self._tg.start_soon(self._refresh_tools, server)

        target: Any
        stack = AsyncExitStack()
        if resolved.transport == "stdio":
            assert resolved.command is not None
            target = StdioServerParameters(
                command=resolved.command,
                args=resolved.args,
                env=child_environment(resolved.env),
                cwd=resolved.cwd,
            )
            from mcp.client.stdio import stdio_client

            transport: Any = stdio_client(target, errlog=errlog)
        else:
            assert resolved.url is not None
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = await stack.enter_async_context(create_mcp_http_client(headers=resolved.headers or None))
            transport = streamable_http_client(resolved.url, http_client=http)
        async with stack, Client(transport, mode="legacy", message_handler=on_message, cache=None) as client:
            yield client

    async def _connection(self, server: DownstreamServer) -> None:
        """Run one server's session until ``server.stop`` is set or the connection breaks."""
        server.state = "starting"
        server.started_at = time.monotonic()
        resolved: ResolvedServer | None = None
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            start_scope = anyio.CancelScope()
            try:
                resolved = resolve_server(server.config, self._env, self._default_timeout)
                start_scope.deadline = anyio.current_time() + resolved.startup_timeout
                with start_scope:
                    async with self._open(server, resolved, errlog) as client:
                        tools = await self._list_tools(client, server.name)
                        start_scope.deadline = math.inf
                        server.client, server.tools, server.state, server.error = client, tools, "ready", None
                        self._changed()
                        server.ready.set()
                        await server.stop.wait()
                if start_scope.cancelled_caught and server.state == "starting":
                    raise TimeoutError(f"did not answer within {resolved.startup_timeout:g} s of starting")
            except Exception as exc:  # the boundary of one server's task: report it, keep the others serving
                errlog.seek(0)
                stderr = errlog.read()
                if server.state == "ready":
                    server.state = "crashed"
                    server.error = f"the connection broke: {exc}"
                else:
                    server.state = "failed"
                    server.error = (
                        f"did not answer within {resolved.startup_timeout:g} s of starting"
                        if isinstance(exc, TimeoutError) and resolved is not None
                        else _describe_start_failure(exc, resolved, stderr)
                    )
                    server.failed_at = time.monotonic()
                logger.debug("server %r connection ended", server.name, exc_info=True)
            finally:
                if server.state == "ready":
                    server.state = "stopped" if server.stop.is_set() else "crashed"
                server.client = None
                server.ready.set()
                server.stopped.set()

    async def _list_tools(self, client: Client, server: str) -> list[ToolInfo]:
        tools: list[ToolInfo] = []
        cursor: str | None = None
        for _ in range(1000):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(ToolInfo.from_mcp(server, t) for t in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _refresh_tools(self, server: DownstreamServer) -> None:
        client = server.client
        if client is None:
            return
        try:
            with anyio.fail_after(self.timeout_of(server)):
                tools = await self._list_tools(client, server.name)
        except (MCPError, TimeoutError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            logger.warning("refreshing the tools of %r failed: %s", server.name, exc)
            return
        server.tools = tools
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        if self._on_change is not None:
            self._on_change()

    def timeout_of(self, server: DownstreamServer) -> float:
        return server.config.timeout or self._default_timeout

    async def _restart(self, server: DownstreamServer) -> None:
        async with self._restart_lock:
            if server.state == "ready" and server.client is not None:
                return
            if server.started_at is not None and not server.stopped.is_set():
                server.stop.set()
                await server.stopped.wait()
            server.stop, server.stopped, server.ready = anyio.Event(), anyio.Event(), anyio.Event()
            server.restarts += 1
            assert self._tg is not None
            self._tg.start_soon(self._connection, server)
            await server.ready.wait()
            logger.info("restarted downstream server %r: %s", server.name, server.state)

    # ----- public API ------------------------------------------------------------------------

    @property
    def servers(self) -> dict[str, DownstreamServer]:
        return self._servers

    def tools(self) -> list[ToolInfo]:
        """Every tool of every ready server, in config order then the server's order."""
        return [tool for server in self._servers.values() for tool in server.tools]

    def find(self, server: str, tool: str) -> ToolInfo | None:
        entry = self._servers.get(server)
        return next((t for t in entry.tools if t.name == tool), None) if entry else None

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult:
        """Call one tool. A tool's own failure is a result with ``is_error``; other failures raise.

        Raises:
            DownstreamError: unknown server, a timeout, or an error from the server's protocol layer.
            ServerUnavailable: the server is disabled, could not be started, or died during the call.
        """
        return await self._request(server, tool, lambda client: client.call_tool(tool, arguments or {}))

    async def server_call(self, server: str, op: str, arguments: dict[str, Any]) -> Any:
        """One of ``SERVER_CALLS`` (a server's resources and prompts, what ``srv.read_resource(uri)`` asks), as
        MCP's result in JSON: ``{"resources": [...]}``, ``{"contents": [...]}`` (a binary resource's ``blob`` is
        base64, with its ``mimeType``), ``{"prompts": [...]}``, ``{"description", "messages"}``. ``ValueError``
        for arguments of the wrong type; raises as ``call_tool`` does."""

        async def call(client: Client) -> Any:
            if op == "resources/read":
                return await client.read_resource(_string(arguments, "uri"))
            if op == "prompts/get":
                given = arguments.get("arguments") or {}
                if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
                    raise ValueError("a prompt's arguments are an object of strings")
                return await client.get_prompt(_string(arguments, "name"), {str(k): v for k, v in given.items()})
            listed: list[Any] = []
            cursor: str | None = None
            key = "resources" if op == "resources/list" else "prompts"
            for _ in range(MAX_PAGES):
                page = await (client.list_resources if key == "resources" else client.list_prompts)(cursor=cursor)
                listed.extend(page.resources if isinstance(page, types.ListResourcesResult) else page.prompts)
                cursor = page.next_cursor
                if not cursor:
                    break
            return {key: listed}

        if op not in SERVER_CALLS:
            raise ValueError(f"not a server call: {op!r}")
        result = await self._request(server, op, call)
        return _jsonable(result)

    async def _request(self, server: str, tool: str, send: Callable[[Client], Awaitable[Any]]) -> Any:
        """``send`` on the server's client session, once the server is ready, within its timeout (``tool`` names
        the request in errors)."""
        entry = self._servers.get(server)
        if entry is None:
            known = ", ".join(sorted(self._servers)) or "none"
            raise DownstreamError(server, f"no such server (configured: {known})")
        if entry.state == "disabled":
            raise ServerUnavailable(server, "the server is disabled in the config")
        if entry.state == "starting":  # its first start (or a restart) is under way: it ends within its timeout
            await entry.ready.wait()
        if entry.state != "ready" or entry.client is None:
            recently_failed = (
                entry.state == "failed"
                and entry.failed_at is not None
                and time.monotonic() - entry.failed_at < RETRY_FAILED_AFTER
            )
            if not recently_failed:
                await self._restart(entry)
            if entry.state != "ready" or entry.client is None:
                raise ServerUnavailable(server, f"not available: {entry.error or entry.state}")
        client = entry.client
        timeout = self.timeout_of(entry)
        entry.calls += 1
        try:
            with anyio.fail_after(timeout):
                return await send(client)
        except TimeoutError:
            raise DownstreamError(server, f"tool {tool!r} did not answer within {timeout:g} s") from None
        except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError) as exc:
            if _is_connection_closed(exc):
                entry.state = "crashed"
                entry.error = f"the server's connection closed during a call to {tool!r}"
                entry.stop.set()
                raise ServerUnavailable(
                    server, f"the server died during the call to {tool!r}; it will be restarted on the next call"
                ) from None
            message = exc.error.message if isinstance(exc, MCPError) else str(exc)
            raise DownstreamError(server, f"{tool!r} failed: {message}") from None


SERVER_CALLS = ("resources/list", "resources/read", "prompts/list", "prompts/get")
"""What a script may ask a server besides its tools (``srv.list_resources()``, ``srv.read_resource(uri)``,
``srv.list_prompts()``, ``srv.get_prompt(name, arguments)``): reserved names no MCP tool can have (a ``/``)."""
MAX_PAGES = 20
"""Pages of a server's resources or prompts read for one listing."""


def _string(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key} must be a non-empty string")
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]  # pyright: ignore[reportUnknownVariableType]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value
