"""The MCP tools. Each one is a few lines that call the engine."""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from collections.abc import AsyncGenerator, Generator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from typing import Annotated, Any, Literal, get_args
from weakref import WeakKeyDictionary

import anyio
import mcp_types as types
from mcp.server import MCPServer
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import CallToolResult, ImageContent, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from . import __version__
from .cache import CACHE_MODES
from .engine import CodeMode, ErrorDetail, RunProgress, RunResult
from .errors import CodeModeError
from .governance.approvals import ApprovalForm, Choice, Elicit
from .presentation import describe_runners, describe_servers, execution_limits, runner_choices, supported_languages

logger = logging.getLogger(__name__)

INSTRUCTIONS = """\
Code mode: instead of calling tools one by one, write one script (Python, JavaScript or TypeScript) and
run it with execute_code. Inside the script every tool of every connected MCP server is a plain function,
e.g. filesystem.read_text_file(path="notes.txt") in Python or await filesystem.read_text_file({ path: "notes.txt" })
in JavaScript. Print what you need to see; intermediate data stays in the sandbox. Find tools with
search_tools, get exact signatures with get_tool_stubs, check a script with validate_code, and look
for a proven script with search_cached_scripts before writing a new one."""

EXECUTE_CODE_HEAD = """\
Run a script in a sandbox where every tool of the connected MCP servers is an ordinary function.

Python: call tools as `server.tool(arg=value)`; a failing tool raises ToolError (`except ToolError as e`).
JavaScript and TypeScript run as an ES module (top-level await works): `await server.tool({ arg: value })`;
a failing tool throws ToolError; `export default value` returns value; allowed npm packages
(`require('axios')`) work; type errors do not stop a run. Results are the tool's structured content (a
dict) or its text (parsed when JSON). `call_tool(server, tool, {...})` calls a tool by name. Print what you
need to see, or end with an expression (or `final_answer(x)`) to return it as returnValue. `open()` works
in the run's own workspace (deleted after the run).

Discover tools with search_tools(query) and get exact signatures with get_tool_stubs(names=[...]).
An identical script whose run had no side effects (no tool calls, files or connections) answers from the
cache (cached: true); cache="reuse" replays any stored run, "refresh" runs again; search_cached_scripts
finds proven ones. Network: only via an egress proxy (no private addresses).
get_execution_limits tells what is in force."""


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


def to_call_result(result: RunResult) -> CallToolResult:
    content: list[types.ContentBlock] = [TextContent(type="text", text=result_text(result))]
    content.extend(_images(result.return_value))
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
    in seconds and the message names the tool calls made so far. A client that went away only stops
    the reports; the run goes on (a cancelled request is what stops a run).
    """

    def __init__(self, ctx: Context, server: CodeModeServer, hold: float = 0.0) -> None:
        self._ctx = ctx
        self._gone = False
        self._log = server.logs_at(ctx.request_context, "info")
        self._hold = hold
        self._live = hold <= 0
        self._held: list[str] = []
        self._lock = anyio.Lock()  # held output goes out before anything printed after it

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
        if progress.queued is not None:
            message = f"queued: {progress.queued} ahead"
        else:
            calls = f"{progress.tool_calls} tool call{'' if progress.tool_calls == 1 else 's'}"
            message = f"running: {progress.elapsed:.1f} s, {calls}"
        await self._send(self._ctx.report_progress(progress.elapsed, None, message))

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
    printed output) and remembers each connection's level.
    """

    def __init__(self, engine: CodeMode, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.engine = engine
        self._log_levels: WeakKeyDictionary[object, str] = WeakKeyDictionary()
        self._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, self._set_level)

    async def _set_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> dict[str, Any]:
        self._log_levels[_connection_of(ctx)] = params.level
        return {}

    def logs_at(self, ctx: ServerRequestContext[Any], level: str) -> bool:
        """Whether the client of this request wants log messages at ``level`` (all, until it sets a level)."""
        minimum = self._log_levels.get(_connection_of(ctx), LOG_LEVELS[0])
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(minimum)

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
        tools = await super().list_tools()
        description = (
            EXECUTE_CODE_HEAD + "\n\n" + describe_runners(self.engine) + "\n\n" + describe_servers(self.engine)
        )
        out: list[types.Tool] = []
        for tool in tools:
            update: dict[str, Any] = {"input_schema": compact_schema(tool.input_schema, inputs=True)}
            if tool.name == "execute_code":
                update["description"] = description
                schema = update["input_schema"]
                runner_schema = (schema.get("properties") or {}).get("runner")
                if isinstance(runner_schema, dict):
                    runner_schema["description"] = runner_choices(self.engine)
            if tool.output_schema is not None:
                # a free-form dict result says nothing a model can use; a real schema is kept, compacted
                free_form = (
                    tool.output_schema.get("additionalProperties") is True and "properties" not in tool.output_schema
                )
                update["output_schema"] = None if free_form else compact_output_schema(tool.output_schema)
            out.append(tool.model_copy(update=update))
        return out


def compact_schema(schema: Any, *, inputs: bool = False) -> Any:
    """A JSON Schema without pydantic's ``title`` noise; for ``inputs``, ``X | None`` written as ``X`` and no
    ``"default": null``.

    ``tools/list`` is read by the model on every turn: this keeps it small. Optional parameters keep
    a default other than null and the server still accepts ``null`` for them; output schemas keep
    ``null`` because clients validate results against them.
    """
    if isinstance(schema, list):
        return [compact_schema(item, inputs=inputs) for item in schema]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():  # pyright: ignore[reportUnknownVariableType]
        if key == "title" and isinstance(value, str):
            continue
        if inputs and key == "default" and value is None:  # an omitted argument is its default anyway
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: compact_schema(sub, inputs=inputs) for name, sub in value.items()}  # pyright: ignore[reportUnknownVariableType]
        else:
            out[key] = compact_schema(value, inputs=inputs)
    options = out.get("anyOf")
    if inputs and isinstance(options, list) and {"type": "null"} in options:  # pyright: ignore[reportUnknownArgumentType]
        others = [o for o in options if o != {"type": "null"}]  # pyright: ignore[reportUnknownVariableType]
        if len(others) == 1 and isinstance(others[0], dict):
            del out["anyOf"]
            out = {**others[0], **out}
        else:
            out["anyOf"] = others
    return out


LOOSE_OUTPUT_TYPES = frozenset({"NetworkUse", "CallEntry", "PlanResult"})
"""Result parts described in the tool's description, not in its schema: ``{"type": "object"}`` there."""


def compact_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema for ``tools/list``: ``compact_schema``, without the descriptions of the result types
    themselves (class docstrings written for Python callers, not for a model), and the parts a model
    reads about in the description (network use, calls, plan) as plain objects."""
    out = compact_schema(schema)
    out.pop("description", None)
    definitions: dict[str, Any] = out.get("$defs") or {}
    for name in LOOSE_OUTPUT_TYPES & set(definitions):
        definitions[name] = {"type": "object"}
    for definition in definitions.values():
        if isinstance(definition, dict):
            definition.pop("description", None)  # pyright: ignore[reportUnknownMemberType]
    return out


def build_server(
    engine: CodeMode, *, token_verifier: TokenVerifier | None = None, auth: AuthSettings | None = None
) -> CodeModeServer:
    """The MCP server around an engine; the engine is started and stopped with the server's lifespan.

    ``token_verifier`` and ``auth`` turn on the SDK's bearer auth for HTTP (see ``http_server``).
    """

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncGenerator[dict[str, Any]]:
        async with engine:
            yield {}

    server = CodeModeServer(
        engine,
        name="mcp-code-mode",
        version=__version__,
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level=engine.settings.log_level,
        token_verifier=token_verifier,
        auth=auth,
    )

    @server.tool(name="execute_code", description=EXECUTE_CODE_HEAD)
    async def execute_code(
        language: Annotated[
            str, Field(description="Language of the code: python, javascript (js) or typescript (ts).")
        ],
        code: Annotated[str, Field(description="The script to run.")],
        packages: Annotated[
            list[str] | None,
            Field(description='Allowed packages (list_allowed_packages), e.g. ["requests", "numpy>=1.26"].'),
        ] = None,
        timeout: Annotated[
            int | None,
            Field(description="Timeout in ms (default and maximum: get_execution_limits)."),
        ] = None,
        allowNetworking: Annotated[
            bool | list[str] | None,
            Field(description='Network via the egress proxy: true, false, or only these hosts (["api.github.com"]).'),
        ] = None,
        description: Annotated[str | None, Field(description="What the script does, in a few words.")] = None,
        runner: Annotated[
            str | None,
            Field(description="Runner (default: the language's; the list is in this tool's description)."),
        ] = None,
        cache: Annotated[
            str,
            Field(
                description="auto: replay a side-effect-free identical run; reuse: any; refresh: run again; off.",
                json_schema_extra={"enum": list(CACHE_MODES)},
            ),
        ] = "auto",
        mode: Annotated[Literal["run", "plan"], Field(description="plan: record gated calls, not make them.")] = "run",
        approvePlan: Annotated[str | None, Field(description="A planId: run with its calls approved.")] = None,
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
                )
            except CodeModeError as exc:  # caught in here: the reporter's task group would wrap it
                return refused(exc, language, engine.runner_for(language, runner))
        return to_call_result(result)

    @server.tool(name="get_execution_limits")
    def get_execution_limits() -> dict[str, Any]:
        """Timeouts, output cap, tool-call cap, network policy, the isolation in force on this host, runners and
        the state of each connected server, as they are right now."""
        return execution_limits(engine)

    @server.tool(name="list_supported_languages")
    def list_supported_languages() -> list[dict[str, Any]]:
        """Languages execute_code accepts, with their runners, each runner's isolation and the package manager."""
        return supported_languages(engine)

    @server.tool(name="list_allowed_packages")
    def list_allowed_packages(
        language: Annotated[str, Field(description="python, javascript, typescript, or all.")] = "all",
    ) -> dict[str, Any]:
        """The packages execute_code may install (its `packages` parameter), per language. Anything else is refused."""
        return engine.allowed_packages(language)

    @server.tool(name="get_tool_stubs")
    def get_tool_stubs(
        names: Annotated[
            list[str] | None, Field(description="Tools, e.g. ['filesystem.read_text_file'] (from search_tools).")
        ] = None,
        server: Annotated[str | None, Field(description="All tools of this server.")] = None,
        language: Annotated[
            str, Field(description="Stub language: python, or typescript (also for javascript).")
        ] = "python",
    ) -> str:
        """The stubs of downstream tools exactly as the sandbox defines them (all tools if no names or server)."""
        with tool_errors():
            servers = [server] if server else None
            return engine.policy_notes(language, servers, names) + engine.stubs(language, servers, names)

    register_discovery_tools(server, engine)
    if engine.settings.audit_tool:
        register_audit_tool(server, engine)
    return server


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
        entries = await anyio.to_thread.run_sync(lambda: audit.query(run=run, tool=tool, since=moment, limit=limit))
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
    """Who asks, for fair shares of the run slots (``admission``).

    Over HTTP: the MCP session (``Mcp-Session-Id``), else the bearer token, else one shared "http" client
    (stateless requests carry nothing that tells clients apart). Otherwise (stdio, in-process): the
    connection on the session-based protocol; on the request-scoped one a process serves one client."""
    if ctx is None:
        return "library"
    headers = ctx.headers
    if headers is not None:
        session_id = headers.get("mcp-session-id")
        if session_id:
            return f"http-session:{session_id}"
        authorization = headers.get("authorization")
        if authorization:
            return "http-token:" + hashlib.sha256(authorization.encode()).hexdigest()[:16]
        return "http"
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


def register_discovery_tools(server: CodeModeServer, engine: CodeMode) -> None:
    """search_tools, validate_code and the script cache tools."""

    @server.tool(name="search_tools")
    def search_tools(
        query: Annotated[str, Field(description="What the tool should do, e.g. 'read a file'.")],
        server: Annotated[str | None, Field(description="Only this server.")] = None,
        detail: Annotated[
            str,
            Field(
                description="name | summary (one line + signature) | full (stub).",
                json_schema_extra={"enum": ["name", "summary", "full"]},
            ),
        ] = "summary",
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> Json:
        """Find downstream tools by what they do, best first."""
        with tool_errors():
            return engine.search_tools(query, server=server, detail=detail, limit=limit)

    @server.tool(name="validate_code")
    async def validate_code(
        language: Annotated[str, Field(description="python, javascript or typescript.")],
        code: Annotated[str, Field(description="The script to check.")],
        runner: Annotated[str | None, Field(description="The runner it will run on (default: the language's).")] = None,
        packages: Annotated[list[str] | None, Field(description="The packages it will ask for.")] = None,
    ) -> Json:
        """Check a script without running it or calling any tool. Python: syntax, imports the runner refuses,
        tool names, literal arguments vs the tools' schemas. JavaScript/TypeScript: type errors against the
        tool declarations. Every finding at once, each with its line."""
        with tool_errors():
            return await engine.validate(language, code, runner=runner, packages=packages)

    @server.tool(name="search_cached_scripts")
    async def search_cached_scripts(
        query: Annotated[str, Field(description="The task, in words.")],
        language: Annotated[str | None, Field(description="Only this language.")] = None,
        limit: Annotated[int, Field(ge=1, le=50)] = 5,
        ctx: Context | None = None,
    ) -> Json:
        """Find scripts that worked before, ranked by relevance (stale: a tool they used changed)."""
        with tool_errors():
            results = await engine.search_scripts(query, language, limit, client=client_of(ctx))
        return {"query": query, "scripts": results}

    @server.tool(name="list_cached_scripts")
    async def list_cached_scripts(
        language: Annotated[str | None, Field(description="Only this language.")] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        ctx: Context | None = None,
    ) -> Json:
        """Cached scripts, most recently used first."""
        with tool_errors():
            scripts = await engine.list_scripts(language, limit, client=client_of(ctx))
        return {"scripts": scripts}

    @server.tool(name="get_cached_script")
    async def get_cached_script(
        hash: Annotated[str, Field(description="Its hash (or a unique prefix).")], ctx: Context | None = None
    ) -> Json:
        """A cached script: code, result, tools, packages and stats."""
        with tool_errors():
            script = await engine.get_script(hash, client=client_of(ctx))
        if script is None:
            raise ToolError(f"no cached script with hash {hash!r} (or the prefix is ambiguous)")
        return script

    @server.tool(name="get_cache_stats")
    async def get_cache_stats() -> Json:
        """Cache totals: scripts, size, per language, hit rate, and the cached package environments."""
        return await anyio.to_thread.run_sync(engine.cache_stats)
