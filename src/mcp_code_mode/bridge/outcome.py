"""The one result type of a run, from the host loop that hears it to the MCP tool that answers with it.

``serve_run`` fills what the host understood of the run (never what the sandbox claimed beyond its own
run): ``success``, ``output``, ``return_value``, ``error``, ``files``, ``truncated``, ``execution_time``.
The engine adds what it knows around the run (``language``, ``runner``, ``hash``, ``tool_calls``,
``install_time``, ``cached``), and the server sends it as the tool's structured content. Fields are
snake_case in Python and camelCase on the wire.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer


class ErrorDetail(BaseModel):
    """Why a run failed. ``ErrorDetail("ToolError", "message", 3)`` or by keyword."""

    type: str
    """Exception type, e.g. ``ZeroDivisionError``, ``ToolError``, ``TimeoutError``."""
    message: str
    line: int | None = None
    """Line in the submitted code, when known."""
    traceback: str | None = None

    def __init__(
        self, type: str, message: str, line: int | None = None, traceback: str | None = None, **extra: Any
    ) -> None:
        super().__init__(type=type, message=message, line=line, traceback=traceback, **extra)


class FileEntry(BaseModel):
    """A file the script left in its workspace. ``FileEntry("out.txt", 5)`` or by keyword."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    path: str
    """Relative to the run's workspace."""
    size: int
    """Bytes: the host's count of what it kept, else what the sandbox listed."""
    uri: str | None = None
    """``code-mode://runs/<hash>/files/<path>``: the kept file, for ``resources/read`` (its client only)."""
    mime_type: str | None = Field(
        default=None, validation_alias=AliasChoices("mimeType", "mime_type"), serialization_alias="mimeType"
    )
    dropped: str | None = None
    """Why the file was not kept: the cap that refused it (``CODE_MODE_ARTIFACT_MAX_FILE_MB``, ...)."""

    @model_serializer(mode="wrap")
    def _without_nones(self, handler: SerializerFunctionWrapHandler) -> Any:
        # ``uri``, ``mimeType`` and ``dropped`` appear only when they say something.
        out = handler(self)
        return {k: v for k, v in out.items() if v is not None} if isinstance(out, dict) else out

    def __init__(self, path: str, size: int, **extra: Any) -> None:
        super().__init__(path=path, size=size, **extra)


class NetworkUse(BaseModel):
    # What a run did through the egress proxy, as the host counted it (no docstring: it would be in every
    # tools/list, as the output schema's description).

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    hosts: list[str] = Field(default_factory=list[str])
    """``host:port`` of every connection the proxy allowed."""
    bytes_out: int = Field(
        default=0, validation_alias=AliasChoices("bytesOut", "bytes_out"), serialization_alias="bytesOut"
    )
    bytes_in: int = Field(
        default=0, validation_alias=AliasChoices("bytesIn", "bytes_in"), serialization_alias="bytesIn"
    )
    refused: list[str] = Field(default_factory=list[str])
    """Each refused connection: ``host:port: the rule that refused it``."""
    limit: str | None = None
    """The per-run cap that ended the run's network use (bytes or connections), if one did."""

    @property
    def used(self) -> bool:
        """Whether the run tried to reach anything (allowed or refused)."""
        return bool(self.hosts or self.refused or self.bytes_out or self.bytes_in)


class CallEntry(BaseModel):
    # One tool call of a run and what the host decided (no docstring: it would be in every tools/list).
    server: str
    tool: str
    decision: str
    """``allowed``, ``approved``, ``denied``, ``planned``, ``over_cap`` or ``refused``."""
    ms: int = 0


class PlanResult(BaseModel):
    # A plan (mode="plan"): the calls that need approval, recorded instead of made.
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    plan_id: str = Field(validation_alias=AliasChoices("planId", "plan_id"), serialization_alias="planId")
    calls: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    expires_in: int = Field(
        default=0, validation_alias=AliasChoices("expiresIn", "expires_in"), serialization_alias="expiresIn"
    )
    """Seconds left to approve it (``approvePlan``)."""
    error: str | None = None


class ShownImage(BaseModel):
    # An image for the result's image content: base64 data and a checked MIME type.
    data: str
    mime_type: str


class Savings(BaseModel):
    """What the run's work would have cost as direct tool calls (``observability.savings``)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    round_trips: int = Field(
        default=0, validation_alias=AliasChoices("roundTrips", "round_trips"), serialization_alias="roundTrips"
    )
    """Tool calls that reached a server: each would have been a model round trip."""
    tokens: int = 0
    """o200k tokens of those calls' results that stayed in the sandbox (exact for the first 16 K characters of
    a run's results, estimated at the same rate beyond). 0 for a replay, which made no call."""


class RunResult(BaseModel):
    """The outcome of one ``execute_code`` call (also its MCP output schema)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    success: bool
    output: str = ""
    """Printed output, capped; see ``truncated``."""
    error: ErrorDetail | None = None
    return_value: Any = Field(
        default=None, validation_alias=AliasChoices("returnValue", "return_value"), serialization_alias="returnValue"
    )
    """The last expression's value or ``final_answer(x)``; JSON where possible, else its repr; cut to the
    output cap (as JSON text) when larger, with ``truncated`` set."""
    execution_time: int = Field(
        default=0, validation_alias=AliasChoices("executionTime", "execution_time"), serialization_alias="executionTime"
    )
    """Milliseconds the run took (the script, its tool calls and its worker), not counting installs."""
    install_time: int = Field(
        default=0, validation_alias=AliasChoices("installTime", "install_time"), serialization_alias="installTime"
    )
    """Milliseconds spent installing (or waiting for) the run's packages; 0 when they were cached."""
    language: str = "python"
    runner: str = ""
    cached: bool = False
    hash: str = ""
    tool_calls: int = Field(
        default=0, validation_alias=AliasChoices("toolCalls", "tool_calls"), serialization_alias="toolCalls"
    )
    truncated: bool = False
    files: list[FileEntry] = Field(default_factory=list[FileEntry])
    """Files the script left in its workspace (the workspace is deleted after the run)."""
    network: NetworkUse | None = None
    """The run's traffic through the egress proxy; None when the run had no network."""
    calls: list[CallEntry] = Field(default_factory=list[CallEntry])
    """The run's tool calls (the first 200) with the host's decision about each."""
    plan: PlanResult | None = None
    """For ``mode="plan"``: the gated calls recorded and the plan's id."""
    session_id: str | None = Field(
        default=None, validation_alias=AliasChoices("sessionId", "session_id"), serialization_alias="sessionId"
    )
    """The session the run ran in (``execute_code(session=...)``); None for a fresh run."""
    savings: Savings = Field(default_factory=Savings)
    """What the same work would have cost as direct tool calls: ``roundTrips`` and ``tokens``."""
    images: list[ShownImage] = Field(default_factory=list[ShownImage], exclude=True)
    """Images for the result's content (``show()``, small image artifacts); not in the structured content."""


def failed(type_: str, message: str, line: int | None = None) -> RunResult:
    """A result that says why a run failed."""
    return RunResult(success=False, error=ErrorDetail(type_, message, line))


__all__ = ["ErrorDetail", "FileEntry", "RunResult", "Savings", "ShownImage", "failed"]
