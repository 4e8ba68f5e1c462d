"""The ``mcp-code-mode`` command. ``main(argv)`` returns the exit status; tests call it directly."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import anyio

from . import __version__
from .config import CodeModeConfig
from .engine import CodeMode, RunResult
from .errors import CodeModeError, ConfigError

CONFIG_HELP = "servers file (default: $CODE_MODE_CONFIG, else ./mcp_servers.json)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-code-mode",
        description="A code-mode MCP server: one script calls every tool of every configured MCP server.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the executor over stdio (what MCP clients start)")
    serve.add_argument("--config", type=Path, help=CONFIG_HELP)

    run = sub.add_parser("run", help="run a script against the configured servers and print its result")
    run.add_argument("script", type=Path, help="the script file ('-' reads standard input)")
    run.add_argument("--config", type=Path, help=CONFIG_HELP)
    run.add_argument("--language", default="python", help="language of the script (default: python)")
    run.add_argument("--runner", help="runner to use (default: the language's default runner)")
    run.add_argument("--timeout", type=int, help="timeout in milliseconds (default: 30000)")
    run.add_argument("--json", action="store_true", help="print the whole result as JSON")

    stubs = sub.add_parser("stubs", help="print the stubs scripts see for the configured servers")
    stubs.add_argument("server", nargs="?", help="only this server")
    stubs.add_argument("--config", type=Path, help=CONFIG_HELP)
    return parser


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return 2
    try:
        config = CodeModeConfig.load(args.config)
    except ConfigError as exc:
        print(f"mcp-code-mode: configuration error\n{exc}", file=sys.stderr)
        return 2
    _setup_logging(config.settings.log_level if args.command == "serve" else "WARNING")
    try:
        if args.command == "serve":
            return _serve(config)
        if args.command == "run":
            return anyio.run(_run, config, args)
        if args.command == "stubs":
            return anyio.run(_stubs, config, args.server)
    except CodeModeError as exc:
        print(f"mcp-code-mode: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 2


def _serve(config: CodeModeConfig) -> int:
    from .server import build_server

    engine = CodeMode(config)
    server = build_server(engine)
    server.run("stdio")
    return 0


def _one_shot(config: CodeModeConfig) -> CodeModeConfig:
    """For a command that runs at most one script: no warm Pyodide interpreters (each is a Deno process)."""
    settings = config.settings.model_copy(update={"pyodide_pool_size": 0})
    return config.model_copy(update={"settings": settings})


async def _run(config: CodeModeConfig, args: argparse.Namespace) -> int:
    code = sys.stdin.read() if str(args.script) == "-" else args.script.read_text(encoding="utf-8")
    async with CodeMode(_one_shot(config)) as cm:
        result = await cm.execute(code, args.language, timeout_ms=args.timeout, runner=args.runner)
    _print_result(result, as_json=args.json)
    return 0 if result.success else 1


def _print_result(result: RunResult, *, as_json: bool) -> None:
    if as_json:
        print(result.model_dump_json(by_alias=True, indent=2))
        return
    if result.output:
        sys.stdout.write(result.output if result.output.endswith("\n") else result.output + "\n")
    if result.return_value is not None:
        print(json.dumps(result.return_value, indent=2, ensure_ascii=False, default=repr))
    if result.error is not None:
        where = f" at line {result.error.line}" if result.error.line else ""
        print(f"{result.error.type}{where}: {result.error.message}", file=sys.stderr)
        if result.error.traceback:
            print(result.error.traceback, file=sys.stderr)
    print(
        f"[{'ok' if result.success else 'failed'}: {result.execution_time} ms, {result.tool_calls} tool calls"
        + (", output truncated" if result.truncated else "")
        + "]",
        file=sys.stderr,
    )


async def _stubs(config: CodeModeConfig, server: str | None) -> int:
    async with CodeMode(_one_shot(config)) as cm:
        for status in cm.pool.servers.values():
            if status.state not in ("ready", "disabled"):
                print(f"# {status.name}: {status.state}: {status.error}", file=sys.stderr)
        print(cm.stubs("python", [server] if server else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
