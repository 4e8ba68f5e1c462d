"""The package's public surface is declared once, in ``__all__``, and every name in it exists."""

from __future__ import annotations

import mcp_code_mode


def test_all_names_exactly_the_public_api() -> None:
    assert sorted(mcp_code_mode.__all__) == sorted(
        [
            "CodeMode",
            "CodeModeError",
            "ConfigError",
            "DownstreamError",
            "ErrorDetail",
            "PackageError",
            "FileEntry",
            "RunProgress",
            "RunResult",
            "RunnerError",
            "ServerBusy",
            "ServerUnavailable",
            "UnsupportedError",
            "__version__",
        ]
    )
    for name in mcp_code_mode.__all__:
        assert hasattr(mcp_code_mode, name), name


def test_a_busy_server_is_a_code_mode_error_a_caller_can_catch() -> None:
    assert issubclass(mcp_code_mode.ServerBusy, mcp_code_mode.CodeModeError)


def test_a_result_and_its_parts_are_pydantic_models_as_before() -> None:
    error = mcp_code_mode.ErrorDetail("ToolError", "it failed", 3)
    result = mcp_code_mode.RunResult(success=False, error=error, files=[mcp_code_mode.FileEntry("out.txt", 5)])
    assert error.model_dump() == {"type": "ToolError", "message": "it failed", "line": 3, "traceback": None}
    assert mcp_code_mode.ErrorDetail(type="X", message="y") == mcp_code_mode.ErrorDetail("X", "y")
    wire = result.model_dump(mode="json")
    assert wire["files"] == [{"path": "out.txt", "size": 5}] and "returnValue" in wire and "toolCalls" in wire
    assert mcp_code_mode.RunResult.model_validate(wire) == result
