"""The MCP tools. Each one is a few lines that call the engine."""

from __future__ import annotations

import functools
import json
import logging
import math
import warnings
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from functools import partial
from typing import Annotated, Any, Literal, get_args
from weakref import WeakKeyDictionary

import anyio
import mcp_types as types
from mcp.server import MCPServer
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import CallToolResult, ImageContent, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from . import __version__
from ._clients import TenantMiddleware, http_client, scoped, tenant_of
from ._skill_tools import register_skill_tools
from ._tasks import TaskBook, capability, install
from .artifacts import URI_PREFIX, Artifact, parse_uri
from .cache import CACHE_MODES
from .engine import CodeMode, ErrorDetail, RunProgress, RunResult
from .errors import CodeModeError
from .governance.approvals import ApprovalForm, Choice, Elicit
from .presentation import describe_servers, execution_limits, runner_choices, supported_languages
from .tenants import Tenant, acting_as, current_tenant

logger = logging.getLogger(__name__)

_INSTRUCTIONS_START = """\
Code mode: instead of calling tools one by one, write one script (Python, JavaScript or TypeScript) and
run it with execute_code. Inside the script every tool of every connected MCP server is a plain function,
e.g. filesystem.read_text_file(path="notes.txt") in Python or await filesystem.read_text_file({ path: "notes.txt" })
in JavaScript. Print what you need to see; intermediate data stays in the sandbox. Find tools with
search_tools, get exact signatures with get_tool_stubs"""
INSTRUCTIONS = (
    _INSTRUCTIONS_START
    + """, check a script with validate_code, and look
for a proven script with search_cached_scripts before writing a new one."""
)
MINIMAL_INSTRUCTIONS = _INSTRUCTIONS_START + "."
"""``INSTRUCTIONS`` for ``CODE_MODE_TOOLS=minimal``, which has neither validate_code nor the cache tools."""

EXECUTE_CODE_HEAD = (
    "Run a script in a sandbox where each tool of the servers below is a function: Python "
    "`server.tool(arg=value)`, JS/TS `await server.tool({ arg: value })`, returning its structured content "
    "or text (JSON parsed); a failing tool raises/throws ToolError. Print what you "
    "need; the last expression (Python) or `export default` (JS) is returnValue. Find tools with search_tools, "
    "signatures with get_tool_stubs."
)
MINIMAL_TOOLS = ("execute_code", "search_tools", "get_tool_stubs")
"""The tools of ``CODE_MODE_TOOLS=minimal``."""


def result_text(result: RunResult) -> str:
    """The short text for clients that read only text content."""
    parts: list[str] = []
    if result.output:
        parts.append(result.output.rstrip("\n"))
        if result.truncated:
            parts.append("[output truncated]")
    if result.return_value is not None:
        parts.append("Return value: " + json.dumps(result.return_value, ensure_ascii=False, default=repr)[:4000])
    if result.error is not None:
        where = f" (line {result.error.line})" if result.error.line else ""
        parts.append(f"Error: {result.error.type}{where}: {result.error.message}")
    status = "succeeded" if result.success else "failed"
    parts.append(
        f"[{status} in {result.execution_time} ms, {result.tool_calls} tool calls"
        + (", cached" if result.cached else "")
        + "]"
    )
    return "\n".join(parts)


def _images(value: Any) -> list[ImageContent]:
    """Images a script returned (as a tool's image value, alone or in a list) become image content."""
    items = value if isinstance(value, list) else [value]
    return [
        ImageContent(type="image", data=item["data"], mime_type=item["mimeType"])
        for item in items
        if isinstance(item, dict)
        and item.get("type") == "image"
        and isinstance(item.get("data"), str)
        and isinstance(item.get("mimeType"), str)
    ]


def _as_text(data: bytes, mime: str) -> str | bytes:
    """A text artifact's content as text (``text`` in resources/read), anything else as bytes (``blob``)."""
    if mime.startswith("text/") or mime in ("application/json", "application/xml", "application/javascript"):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data
    return data


def _links(result: RunResult) -> list[types.ResourceLink]:
    """Each kept file as a ``resource_link`` (readable with ``resources/read`` by the client that ran it)."""
    return [
        types.ResourceLink(type="resource_link", uri=f.uri, name=f.path, mime_type=f.mime_type, size=f.size)
        for f in result.files
        if f.uri is not None
    ]


def to_call_result(result: RunResult) -> CallToolResult:
    content: list[types.ContentBlock] = [TextContent(type="text", text=result_text(result))]
    content.extend(_images(result.return_value))
    content.extend(ImageContent(type="image", data=i.data, mime_type=i.mime_type) for i in result.images)
    content.extend(_links(result))
    return CallToolResult(
        content=content,
        structured_content=result.model_dump(mode="json", by_alias=True),
        is_error=not result.success,
    )


def refused(error: CodeModeError, language: str, runner: str) -> CallToolResult:
    """A request that could not run at all, reported with the language and runner it asked for."""
    detail = ErrorDetail(type=type(error).__name__, message=str(error))
    result = RunResult(success=False, error=detail, language=language, runner=runner)
    return to_call_result(result)


class RunReporter:
    """Streams one ``execute_code`` run to its client: printed output as log messages, and progress.

    Output goes out as ``notifications/message`` (level ``info``, logger ``stdout``) once the run has
    lasted ``hold`` seconds (``stream_output_after_ms``): what was printed before then goes out in one
    message at that moment, and later output as the worker sends it (chunks of about 50 ms). A run
    that ends sooner sends none: its result, which always has all the output, is already there, and
    each notification costs the client a message to read. Progress (``notifications/progress``) is
    sent only when the client's request carried a ``progressToken``: ``progress`` is the elapsed time
    in seconds and the message names the tool calls made so far. Once the script reports its own
    progress (``report_progress(done, total, message)``), its figures are sent instead and the
    elapsed-time reports stop. ``progress`` never goes backwards for one token: a report whose ``done``
    is not above the last value sent is not sent, and a script whose first figures are below the elapsed
    seconds already sent has its ``done`` and ``total`` both multiplied by a power of ten (their ratio
    kept). A client that went away only stops the reports; the run goes on (a cancelled request is what
    stops a run).
    """

    def __init__(self, ctx: Context, server: CodeModeServer, hold: float = 0.0) -> None:
        self._ctx = ctx
        self._gone = False
        self._log = server.logs_at(ctx.request_context, "info")
        self._hold = hold
        self._live = hold <= 0
        self._held: list[str] = []
        self._lock = anyio.Lock()  # held output goes out before anything printed after it
        self._sent = -math.inf
        """The last ``progress`` value sent: every next one is greater."""
        self._scale: float | None = None
        """Set at the script's first report that is sent: what its figures are multiplied by."""

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        """Around the run: releases held output when the run outlasts ``hold``; a shorter run's is dropped."""
        if self._live or not self._log:
            yield
            return

        async def release() -> None:
            await anyio.sleep(self._hold)
            async with self._lock:
                self._live = True
                text, self._held = "".join(self._held), []
                await self._send_output(text)

        async with anyio.create_task_group() as tg:
            tg.start_soon(release)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def output(self, text: str) -> None:
        if self._gone or not self._log or not text:
            return
        async with self._lock:
            if self._live:
                await self._send_output(text)
            else:
                self._held.append(text)

    async def _send_output(self, text: str) -> None:
        if self._gone or not text:
            return
        with warnings.catch_warnings():
            # The SDK deprecates logging for the 2026-07-28 protocol, where it only delivers what a
            # request opted into; earlier protocols (what clients speak today) deliver it as before.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            sending = self._ctx.session.send_log_message(  # pyright: ignore[reportDeprecated]
                level="info", data=text, logger="stdout", related_request_id=self._ctx.request_id
            )
        await self._send(sending)

    async def progress(self, progress: RunProgress) -> None:
        if self._gone:
            return
        if progress.done is not None:
            await self._script_progress(progress.done, progress.total, progress.message)
            return
        if self._scale is not None or progress.elapsed <= self._sent:
            return  # the script's figures are what this client sees now
        if progress.waiting:
            message = f"starting: waiting for {', '.join(progress.waiting)}"
        elif progress.queued is not None:
            message = f"queued: {progress.queued} ahead"
        else:
            calls = f"{progress.tool_calls} tool call{'' if progress.tool_calls == 1 else 's'}"
            message = f"running: {progress.elapsed:.1f} s, {calls}"
        self._sent = progress.elapsed
        await self._send(self._ctx.report_progress(progress.elapsed, None, message))

    async def _script_progress(self, done: float, total: float | None, message: str | None) -> None:
        scale = self._scale
        if scale is None:
            if done <= 0 and done <= self._sent:
                return  # nothing to scale up: not sent
            scale = 1.0
            while done * scale <= self._sent:
                scale *= 10
        if done * scale <= self._sent:
            return  # a decrease (or a repeat) is not progress
        self._scale = scale
        self._sent = done * scale
        await self._send(self._ctx.report_progress(done * scale, None if total is None else total * scale, message))

    async def _send(self, sending: Any) -> None:
        try:
            await sending
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            logger.debug("the client stopped listening; no more reports for this run")
            self._gone = True


LOG_LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)
"""Severity-ascending."""


def _connection_of(ctx: ServerRequestContext[Any]) -> object:
    # The SDK keeps one Connection per client connection; a request's session is a per-request proxy.
    return ctx.session._connection


class CodeModeServer(MCPServer[Any]):
    """MCPServer whose ``execute_code`` description names the servers connected right now.

    It also answers ``logging/setLevel`` (so it declares the logging capability it uses to stream
    printed output) and remembers each connection's level. It declares ``tools.listChanged``: a client that
    listed the tools while a downstream server was still starting (or before one's tools changed) gets
    ``notifications/tools/list_changed`` when that server's tools arrive (``notify_tool_changes``).
    """

    def __init__(self, engine: CodeMode, **kwargs: Any) -> None:
        with _plain_sdk_logging():
            super().__init__(**kwargs)
        self.engine = engine
        self._log_levels: WeakKeyDictionary[object, str] = WeakKeyDictionary()
        self._listed: WeakKeyDictionary[Any, tuple[str, Tenant, frozenset[str]]] = WeakKeyDictionary()
        """Connections that have listed the tools (those a change is worth telling): their client, its tenant and
        the tools they were shown."""
        self._shown_when: dict[str, Callable[[str], bool]] = {}
        """Tools listed only to a client for whom they have something to act on (``show_when``)."""
        self._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._set_level)
        self.tasks = TaskBook()
        """``execute_code`` called as an MCP task (2025-11-25; ``_tasks``)."""
        install(self._lowlevel_server, self.tasks)
        self._lowlevel_server.middleware.insert(0, TenantMiddleware())  # outermost: everything acts as the tenant
        lowlevel = self._lowlevel_server
        options = lowlevel.create_initialization_options
        lowlevel.create_initialization_options = functools.partial(  # type: ignore[method-assign]
            _with_tools_changed, options
        )

    async def _handle_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = await super()._handle_list_tools(ctx, params)
        client = request_client(ctx)
        listed.tools = [t for t in listed.tools if self._shown(t.name, client)]
        self._listed[_connection_of(ctx)] = (client, current_tenant(), frozenset(t.name for t in listed.tools))
        return listed

    def show_when(self, tool: str, relevant: Callable[[str], bool]) -> None:
        """List ``tool`` to a client only while ``relevant(client)`` holds (``close_session`` once it has a session,
        ``get_skill`` once a skill exists): every tool a model is shown costs it context on every turn. The tool
        answers whether listed or not; ``refresh_surface`` tells a client when its list changed."""
        self._shown_when[tool] = relevant

    def _shown(self, tool: str, client: str) -> bool:
        relevant = self._shown_when.get(tool)
        return relevant is None or relevant(client)

    async def refresh_surface(self) -> None:
        """Tell each connection whose list of tools would now differ from what it was shown (``show_when``), each
        judged as its own tenant (a tenant's skill or session changes no other tenant's list)."""
        for connection, (client, tenant, shown) in list(self._listed.items()):
            with acting_as(tenant):
                now = frozenset(n for n in self._shown_when if self._shown(n, client))
            if now != shown & frozenset(self._shown_when):
                self._listed[connection] = (client, tenant, (shown - frozenset(self._shown_when)) | now)
                await connection.send_tool_list_changed()  # best effort: a closed stream drops it

    async def notify_tool_changes(self) -> None:
        """Until cancelled: after each change of the downstream tools, tell every connection that listed them."""
        while True:
            await self.engine.tools_changed()
            for connection in list(self._listed):
                await connection.send_tool_list_changed()  # best effort: a closed stream drops it

    async def _set_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> dict[str, Any]:
        self._log_levels[_connection_of(ctx)] = params.level
        return {}

    def logs_at(self, ctx: ServerRequestContext[Any], level: str) -> bool:
        """Whether the client of this request wants log messages at ``level`` (all, until it sets a level)."""
        minimum = self._log_levels.get(_connection_of(ctx), LOG_LEVELS[0])
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(minimum)

    async def read_resource(self, uri: Any, context: Context[Any, Any] | None = None) -> Any:
        """An artifact (``code-mode://runs/<hash>/files/<path>``) for the client that made its run; another
        client's, an expired one and a made-up one are the same "not found"."""
        text = str(uri)
        if not text.startswith(URI_PREFIX):
            return await super().read_resource(uri, context)
        found = await self._artifact(text, context)
        if found is None:
            raise ResourceNotFoundError(f"Unknown resource: {text}")
        data = await anyio.to_thread.run_sync(found.read_bytes)
        return [ReadResourceContents(content=_as_text(data, found.mime), mime_type=found.mime)]

    async def _handle_list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        """The server's resources, and this client's artifacts that can still be read (newest first, 50)."""
        listed = await super()._handle_list_resources(ctx, params)
        store = self.engine.artifacts
        if store is None:
            return listed
        client = client_of(Context(request_context=ctx, mcp_server=self))
        recent = await anyio.to_thread.run_sync(partial(store.recent, client, tenant=current_tenant().name))
        listed.resources.extend(
            types.Resource(uri=uri, name=found.path, mime_type=found.mime, size=found.size) for uri, found in recent
        )
        return listed

    async def _artifact(self, uri: str, context: Context[Any, Any] | None) -> Artifact | None:
        parsed = parse_uri(uri)
        store = self.engine.artifacts
        if parsed is None or store is None:
            return None
        client = client_of(context)
        return await anyio.to_thread.run_sync(partial(store.find, client, *parsed, tenant=current_tenant().name))

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        return [
            *await super().list_resource_templates(),
            types.ResourceTemplate(
                uri_template=URI_PREFIX + "{hash}/files/{+path}",
                name="run-file",
                description="A file a run left in its workspace (execute_code links it), for the client that ran it.",
            ),
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None) -> Any:
        """Refuse arguments a tool does not have (a typo would otherwise be ignored, and the call answer
        something else than was asked), naming the valid ones."""
        tool = self._tool_manager.get_tool(name)
        if tool is not None and isinstance(arguments, dict):  # pyright: ignore[reportUnnecessaryIsInstance]
            valid = sorted((tool.parameters.get("properties") or {}).keys())
            unknown = sorted(set(arguments) - set(valid))
            if unknown:
                names = ", ".join(repr(u) for u in unknown)
                raise ToolError(
                    f"{name} has no argument{'s' if len(unknown) > 1 else ''} {names} (valid: {', '.join(valid)})"
                )
        return await super().call_tool(name, arguments, context)

    async def list_tools(self) -> list[types.Tool]:
        """The tools as a model reads them on every turn (``tools/list``): compact input schemas
        (``compact_schema``), one-line descriptions, no output schemas, and ``execute_code`` described with the
        servers and runners of right now.

        No output schema: the MCP spec lets a tool omit it, a client hands a model only names, descriptions
        and input schemas, and each result still carries its structured content (``execute_code``'s: the
        ``RunResult``, whose fields the description names); the schemas cost more of the context than the
        whole rest of a tool.
        """
        tools = await super().list_tools()
        out: list[types.Tool] = []
        for tool in tools:
            update: dict[str, Any] = {
                "input_schema": compact_schema(tool.input_schema),
                "output_schema": None,
                "description": " ".join((tool.description or "").split()),
            }
            if tool.name == "execute_code":
                update["execution"] = types.ToolExecution(task_support="optional")
                update["description"] = EXECUTE_CODE_HEAD + "\n" + describe_servers(self.engine)
                properties: dict[str, Any] = update["input_schema"].get("properties") or {}
                if isinstance(properties.get("runner"), dict):
                    properties["runner"]["description"] = runner_choices(self.engine)
                if isinstance(properties.get("timeout"), dict):
                    settings = self.engine.settings
                    properties["timeout"]["description"] = (
                        f"ms (default {settings.default_timeout_ms}, max {settings.max_timeout_ms})"
                    )
            out.append(tool.model_copy(update=update))
        return out


def _with_tools_changed(create: Callable[..., Any], notification_options: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The SDK's initialization options, declaring ``tools.listChanged`` (the SDK's default leaves it off) and
    tasks (``_tasks``, which the SDK does not know)."""
    options = create(notification_options or NotificationOptions(tools_changed=True), *args, **kwargs)
    options.capabilities.tasks = capability()
    return options


LISTED_WITHOUT = frozenset({"title", "minimum", "maximum"})
"""Schema keywords an input schema in ``tools/list`` leaves out: pydantic's titles, and numeric bounds (the server
still refuses a value out of bounds, naming the bound)."""


def compact_schema(schema: Any) -> Any:
    """An input schema for ``tools/list``: without ``LISTED_WITHOUT``, ``X | None`` written as ``X``, no
    ``"default": null``, no ``"additionalProperties": true`` (JSON Schema's default) and no empty ``properties``.

    ``tools/list`` is read by the model on every turn: this keeps it small. Optional parameters keep
    a default other than null and the server still accepts ``null`` for them.
    """
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():  # pyright: ignore[reportUnknownVariableType]
        if key in LISTED_WITHOUT and not isinstance(value, (dict, list)):
            continue
        if key == "default" and value is None:  # an omitted argument is its default anyway
            continue
        if key == "additionalProperties" and value is True:  # what an object allows anyway
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: compact_schema(sub) for name, sub in value.items()}  # pyright: ignore[reportUnknownVariableType]
        else:
            out[key] = compact_schema(value)
    options = out.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:  # pyright: ignore[reportUnknownArgumentType]
        others = [o for o in options if o != {"type": "null"}]  # pyright: ignore[reportUnknownVariableType]
        if len(others) == 1 and isinstance(others[0], dict):
            del out["anyOf"]
            out = {**others[0], **out}
        else:
            out["anyOf"] = others
    if out.get("type") == "object" and out.get("properties") == {}:
        del out["properties"]
    return out


@contextmanager
def _plain_sdk_logging() -> Generator[None]:
    """While an ``MCPServer`` is made: its ``configure_logging`` without ``rich``. The SDK imports ``rich`` (about
    50 ms of every start) for a handler that ``logging.basicConfig`` then drops when logging is configured
    already, as ``serve`` does; where it is not, the root logger gets a plain handler on stderr."""
    from mcp.server.mcpserver import server as sdk_server

    def configure_logging(level: str = "INFO") -> None:
        logging.basicConfig(level=level, format="%(message)s")

    name = "configure_logging"  # not among the module's exports: reached by name
    original = getattr(sdk_server, name, None)
    if original is None:  # an SDK that no longer has it: nothing to replace
        yield
        return
    setattr(sdk_server, name, configure_logging)
    try:
        yield
    finally:
        setattr(sdk_server, name, original)


def build_server(
    engine: CodeMode, *, token_verifier: TokenVerifier | None = None, auth: AuthSettings | None = None
) -> CodeModeServer:
    """The MCP server around an engine; the engine is started and stopped with the server's lifespan.

    ``token_verifier`` and ``auth`` turn on the SDK's bearer auth for HTTP (see ``http_server``).
    """

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncGenerator[dict[str, Any]]:
        async with engine, anyio.create_task_group() as tg:
            tg.start_soon(server.notify_tool_changes)
            server.tasks.attach(tg)
            try:
                yield {}
            finally:
                tg.cancel_scope.cancel()

    server = CodeModeServer(
        engine,
        name="mcp-code-mode",
        version=__version__,
        instructions=INSTRUCTIONS if engine.settings.tools == "full" else MINIMAL_INSTRUCTIONS,
        lifespan=lifespan,
        log_level=engine.settings.log_level,
        token_verifier=token_verifier,
        auth=auth,
    )

    @server.tool(name="execute_code", description=EXECUTE_CODE_HEAD)
    async def execute_code(
        language: Annotated[str, Field(description="python, javascript or typescript.")],
        code: str,
        packages: Annotated[list[str] | None, Field(description='Allow-listed, e.g. ["numpy"].')] = None,
        timeout: Annotated[int | None, Field(description="In ms.")] = None,
        allowNetworking: Annotated[
            bool | list[str] | None, Field(description="true, false or only these hosts.")
        ] = None,
        description: str | None = None,
        runner: Annotated[str | None, Field(description="Default: the language's.")] = None,
        cache: Annotated[
            str,
            Field(
                description="auto replays an identical side-effect-free run.",
                json_schema_extra={"enum": list(CACHE_MODES)},
            ),
        ] = "auto",
        mode: Literal["run", "plan"] = "run",  # described with the gated tools, when a server has some
        approvePlan: str | None = None,
        session: Annotated[str | None, Field(description='"new" or a sessionId: state persists.')] = None,
        ctx: Context | None = None,
    ) -> Annotated[CallToolResult, RunResult]:
        hold = engine.settings.stream_output_after_ms / 1000
        reporter = RunReporter(ctx, server, hold) if ctx is not None else None
        async with reporter.running() if reporter else nullcontext():
            try:
                result = await engine.execute(
                    code,
                    language,
                    packages=packages,
                    timeout_ms=timeout,
                    allow_networking=allowNetworking,
                    description=description,
                    runner=runner,
                    on_output=reporter.output if reporter else None,
                    on_progress=reporter.progress if reporter else None,
                    cache=cache,
                    client=client_of(ctx),
                    mode=mode,
                    approve_plan=approvePlan,
                    elicit=elicitor(ctx),
                    session=session,
                )
            except CodeModeError as exc:  # caught in here: the reporter's task group would wrap it
                return refused(exc, language, engine.runner_for(language, runner))
        if session is not None:  # a first session lists the session tools; an ended last one unlists them
            await server.refresh_surface()
        return to_call_result(result)

    @server.tool(name="get_tool_stubs")
    def get_tool_stubs(
        names: Annotated[list[str] | None, Field(description="e.g. ['filesystem.read_text_file']")] = None,
        server: str | None = None,
        language: Annotated[str, Field(description="python or typescript")] = "python",
    ) -> str:
        """Tool stubs as scripts see them (all if no names or server)."""
        with tool_errors():
            anyio.from_thread.run(engine.settled)  # servers still starting list their tools first
            servers = [server] if server else None
            return engine.policy_notes(language, servers, names) + engine.stubs(language, servers, names)

    register_search_tool(server, engine)
    if engine.settings.tools == "full":
        register_full_tools(server, engine)
        if engine.settings.audit_tool:
            register_audit_tool(server, engine)
    return server


def register_full_tools(server: CodeModeServer, engine: CodeMode) -> None:
    """The tools beyond ``MINIMAL_TOOLS`` (``CODE_MODE_TOOLS=full``, the default)."""

    @server.tool(name="get_execution_limits")
    def get_execution_limits() -> dict[str, Any]:
        """Limits, policies, isolation, runners and servers in force."""
        return execution_limits(engine)

    @server.tool(name="list_supported_languages")
    def list_supported_languages() -> list[dict[str, Any]]:
        """Languages, runners, isolation, package managers."""
        return supported_languages(engine)

    @server.tool(name="list_allowed_packages")
    def list_allowed_packages(
        language: str = "all",
    ) -> dict[str, Any]:
        """Packages execute_code may install (python, javascript or all)."""
        return engine.allowed_packages(language)

    register_discovery_tools(server, engine)
    register_session_tools(server, engine)
    register_skill_tools(server, engine, client_of, tool_errors)


def register_session_tools(server: CodeModeServer, engine: CodeMode) -> None:
    """``list_sessions`` and ``close_session``, listed to a client while it has a session (``show_when``)."""

    def has_sessions(client: str) -> bool:
        return bool(engine.list_sessions(client))

    server.show_when("list_sessions", has_sessions)
    server.show_when("close_session", has_sessions)

    @server.tool(name="list_sessions")
    def list_sessions(ctx: Context | None = None) -> list[dict[str, Any]]:
        """Your open execute_code sessions."""
        return engine.list_sessions(client_of(ctx))

    @server.tool(name="close_session")
    async def close_session(sessionId: str, ctx: Context | None = None) -> dict[str, Any]:
        """Close a session and kill its interpreter."""
        if not await engine.close_session(sessionId, client=client_of(ctx)):
            raise ToolError(f"unknown session {sessionId!r}")
        await server.refresh_surface()
        return {"closed": sessionId}


def register_audit_tool(server: CodeModeServer, engine: CodeMode) -> None:
    """``get_audit_log``, offered only with ``CODE_MODE_AUDIT_TOOL=true`` (operators decide whether a model
    may read which tools were called, by whom, with what)."""

    @server.tool(name="get_audit_log")
    async def get_audit_log(
        run: Annotated[str | None, Field(description="A run's hash (or its first 8+ characters).")] = None,
        tool: Annotated[str | None, Field(description="A tool, or a glob over server.tool.")] = None,
        since: Annotated[str | None, Field(description="ISO 8601 time, or an age such as 15m, 2h, 3d.")] = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> Json:
        """Tool calls of past runs, newest first: time, client, run, server, tool, decision, ms, success and a
        shortened (redacted) preview of the arguments."""
        from .cache.audit import parse_since

        if engine.audit is None:
            raise ToolError("the audit log is off: the cache database cannot be used")
        try:
            moment = parse_since(since) if since else None
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        audit = engine.audit
        tenant = current_tenant().name
        entries = await anyio.to_thread.run_sync(
            lambda: audit.query(run=run, tool=tool, since=moment, limit=limit, tenant=tenant)
        )
        return {"entries": entries}


Json = dict[str, Any]


def elicitor(ctx: Context | None) -> Elicit | None:
    """How to ask this client's person about a gated call (an MCP elicitation in form mode), or None for a
    client that did not declare the elicitation capability."""
    if ctx is None:
        return None
    try:
        session = ctx.request_context.session
        able = session.check_client_capability(types.ClientCapabilities(elicitation=types.ElicitationCapability()))
    except (AttributeError, LookupError, ValueError):
        return None
    if not able:
        return None

    async def elicit(message: str) -> Choice | None:
        answer = await ctx.elicit(message, ApprovalForm)
        return answer.data.decision if answer.action == "accept" else None

    return elicit


def client_of(ctx: Context | None) -> str:
    """Who asks: whose run slots (``admission``), sessions, plans, tokens and artifacts these are.

    Over HTTP: the MCP session (``Mcp-Session-Id``), else the bearer token, else one shared "http" client
    (stateless requests carry nothing that tells clients apart). Otherwise (stdio, in-process): the
    connection on the session-based protocol; on the request-scoped one a process serves one client. Within
    its tenant (``_clients.scoped``): two tenants never share a client, whatever session id they send."""
    if ctx is None:
        return "library"
    return request_client(ctx.request_context)


def request_client(ctx: ServerRequestContext[Any]) -> str:
    """``client_of`` for a lowlevel request context (``tools/list``, the task handlers)."""
    return scoped(tenant_of(ctx), _unscoped_client(ctx))


def _unscoped_client(ctx: ServerRequestContext[Any]) -> str:
    client = http_client(ctx, otherwise="http")
    if client is not None:
        return client
    connection = getattr(ctx.session, "_connection", None)
    if connection is None or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return "stdio"
    return f"connection:{id(connection)}"


@contextmanager
def tool_errors() -> Generator[None]:
    """A refused request becomes a tool error whose text the model reads (not a hidden internal error)."""
    try:
        yield
    except CodeModeError as exc:
        raise ToolError(str(exc)) from exc


def register_search_tool(server: CodeModeServer, engine: CodeMode) -> None:
    @server.tool(name="search_tools")
    def search_tools(
        query: Annotated[str, Field(description="e.g. read a file")],
        server: str | None = None,
        detail: Annotated[
            str,
            Field(
                json_schema_extra={"enum": ["name", "summary", "full"]},
            ),
        ] = "summary",
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> Json:
        """Find tools by what they do, best first."""
        with tool_errors():
            anyio.from_thread.run(engine.settled)  # servers still starting list their tools first
            return engine.search_tools(query, server=server, detail=detail, limit=limit)


def register_discovery_tools(server: CodeModeServer, engine: CodeMode) -> None:
    """validate_code and the script cache tools."""

    @server.tool(name="validate_code")
    async def validate_code(
        language: str,
        code: str,
        runner: str | None = None,
        packages: list[str] | None = None,
    ) -> Json:
        """Check a script without running it (syntax, imports, tools, arguments)."""
        with tool_errors():
            return await engine.validate(language, code, runner=runner, packages=packages)

    @server.tool(name="search_cached_scripts")
    async def search_cached_scripts(
        query: str,
        language: str | None = None,
        limit: Annotated[int, Field(ge=1, le=50)] = 5,
        ctx: Context | None = None,
    ) -> Json:
        """Scripts that worked before, best first."""
        with tool_errors():
            results = await engine.search_scripts(query, language, limit, client=client_of(ctx))
        return {"query": query, "scripts": results}

    @server.tool(name="list_cached_scripts")
    async def list_cached_scripts(
        language: str | None = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        ctx: Context | None = None,
    ) -> Json:
        """Cached scripts, latest used first."""
        with tool_errors():
            scripts = await engine.list_scripts(language, limit, client=client_of(ctx))
        return {"scripts": scripts}

    @server.tool(name="get_cached_script")
    async def get_cached_script(
        hash: Annotated[str, Field(description="Or a unique prefix.")], ctx: Context | None = None
    ) -> Json:
        """A cached script (code, result, tools) by hash."""
        with tool_errors():
            script = await engine.get_script(hash, client=client_of(ctx))
        if script is None:
            raise ToolError(f"no cached script with hash {hash!r} (or the prefix is ambiguous)")
        return script

    @server.tool(name="get_cache_stats")
    async def get_cache_stats() -> Json:
        """Cache totals, hit rate, environments."""
        return await anyio.to_thread.run_sync(engine.cache_stats)
