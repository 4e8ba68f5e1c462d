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
