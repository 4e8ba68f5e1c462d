"""The ``mcp-code-mode`` command. ``main(argv)`` returns the exit status; tests call it directly."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from . import __version__
from ._audit_cli import add_audit_parser, run_audit_command
from ._cache_cli import add_cache_parser, run_cache_command
from ._skills_cli import add_skills_parser, run_skills_command
from ._tokens_cli import add_tokens_parser, run_tokens_command
from .cache import CACHE_MODES
from .config import CodeModeConfig, Settings, load_environment
from .errors import CodeModeError, ConfigError

if TYPE_CHECKING:
    from .engine import RunResult
    from .http_server import HttpOptions

# The engine (and with it the MCP SDK, about 0.5 s) is imported by the commands that need it: `serve` starts
# the sandbox probe first (``_serve``), and `doctor`, `cache`, `audit`, `skills` and `tokens` never need it.

CONFIG_HELP = (
    "servers file (default: $CODE_MODE_CONFIG, else ./mcp_servers.json). Variables and CODE_MODE_* settings "
    "come from the environment, then from the .env beside this file, then from ./.env"
)
RUN_CACHE_HELP = (
    "what a stored result of the same script does (default: refresh): refresh always runs the script and "
    "stores its result; off runs it and stores nothing; auto replays a stored result of a run that had no side "
    "effects and is younger than CODE_MODE_CACHE_TTL; reuse replays any stored result. A replay says so on stderr"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-code-mode",
        description="A code-mode MCP server: one script calls every tool of every configured MCP server.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="serve the executor over stdio (what MCP clients start) or streamable HTTP",
        description="Serve the executor over stdio (default) or, with --http, over streamable HTTP. "
        "Over HTTP, clients must send 'Authorization: Bearer $CODE_MODE_AUTH_TOKEN' when that is set, or a "
        "tenant's token when CODE_MODE_AUTH_TOKENS names a tokens file (see 'mcp-code-mode tokens add'; each "
        "tenant sees only its own stored things, and its servers if the file lists them); "
        "listening on a non-loopback --host without a token is refused. Host and Origin headers are "
        "checked against loopback plus CODE_MODE_HTTP_ALLOWED_HOSTS / _ORIGINS (DNS-rebinding protection).",
    )
    serve.add_argument("--config", type=Path, help=CONFIG_HELP)
    serve.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    serve.add_argument("--host", help="address to listen on with --http (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on with --http (default: 8000)")
    serve.add_argument("--path", help="path of the MCP endpoint with --http (default: /mcp)")
    serve.add_argument(
        "--stateless",
        action="store_true",
        help="with --http: no sessions, every request stands alone (for replicas behind a load balancer)",
    )

    run = sub.add_parser(
        "run",
        help="run a script against the configured servers and print its output and errors",
        description="Run a script with the same runners and tools as execute_code, outside any agent: printed "
        "output streams to stdout as it is printed; the return value follows, and the error and a summary go to "
        "stderr. Exit status 0 when the script succeeded, 1 when it failed. The script runs every time unless "
        "--cache auto or reuse lets a stored result be replayed, which is said on stderr.",
    )
    run.add_argument("script", type=Path, help="the script file ('-' reads standard input)")
    run.add_argument("--config", type=Path, help=CONFIG_HELP)
    run.add_argument(
        "--language",
        help="language of the script, e.g. python, ts (default: from the file's extension: "
        + ", ".join(f"{ext} {lang}" for ext, lang in EXTENSIONS.items())
        + "; else python)",
    )
    run.add_argument("--runner", help="runner to use (default: the language's default runner)")
    run.add_argument("--timeout", type=int, help="timeout in milliseconds (default: $CODE_MODE_DEFAULT_TIMEOUT_MS)")
    run.add_argument("--json", action="store_true", help="print only the whole result, as JSON, at the end")
    run.add_argument("--cache", choices=CACHE_MODES, default="refresh", help=RUN_CACHE_HELP)
    run.add_argument(
        "--packages",
        action="append",
        default=[],
        metavar="REQ",
        help="whitelisted packages to install for the script, e.g. --packages requests --packages 'numpy>=1.26'; "
        "also a comma list: --packages requests,pyyaml (see list_allowed_packages)",
    )

    stubs = sub.add_parser("stubs", help="print the stubs scripts see for the configured servers")
    stubs.add_argument("server", nargs="?", help="only this server")
    stubs.add_argument("--language", default="python", help="python (default) or typescript (also for javascript)")
    stubs.add_argument("--config", type=Path, help=CONFIG_HELP)

    doctor = sub.add_parser(
        "doctor",
        help="check the config, each server, each runner, Deno, bubblewrap and the cache; print fixes",
        description="Check the servers file and settings, start each server, run a script through each runner, "
        "look for Deno and bubblewrap, and check that the cache and workspace folders are writable. Each problem "
        "is printed with its fix. Exit status 1 when something failed; warnings (optional pieces) leave it 0.",
    )
    doctor.add_argument("--config", type=Path, help=CONFIG_HELP)

    add_cache_parser(sub)
    add_audit_parser(sub)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=Path, help=CONFIG_HELP)
    add_skills_parser(sub, common)
    add_tokens_parser(sub)
    return parser


EXTENSIONS = {".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript"}


def _setup_logging(level: str) -> None:
    """Log to stderr at ``level``; the first call installs the handler, a later one only sets the level."""
    root = logging.getLogger()
    if root.handlers:
        root.setLevel(level)
        return
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    _setup_logging("WARNING")  # what reading the settings warns of (a misspelled CODE_MODE_* name) is seen
    if args.command == "serve" and not args.http:
        given = [f"--{name}" for name in ("host", "port", "path") if getattr(args, name) is not None]
        if args.stateless:
            given.append("--stateless")
        if given:
            parser.error(f"{', '.join(given)} only apply with --http")
    if args.command == "doctor":
        from .doctor import diagnose, report

        _setup_logging("CRITICAL")
        return report(anyio.run(diagnose, args.config), sys.stdout)
    if args.command in ("cache", "audit", "skills"):
        return _cache(args)
    if args.command == "tokens":  # no settings, no servers: a file of hashes
        return run_tokens_command(args)
    try:
        config = CodeModeConfig.load(args.config)
    except ConfigError as exc:
        print(f"mcp-code-mode: configuration error\n{exc}", file=sys.stderr)
        return 2
    _setup_logging(config.settings.log_level if args.command == "serve" else "WARNING")
    try:
        if args.command == "serve":
            return _serve(config, args)
        if args.command == "run":
            return anyio.run(_run, config, args)
        if args.command == "stubs":
            return anyio.run(_stubs, config, args.server, args.language)
    except ConfigError as exc:
        print(f"mcp-code-mode: {exc}", file=sys.stderr)
        return 2
    except CodeModeError as exc:
        print(f"mcp-code-mode: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 2


def _cache(args: argparse.Namespace) -> int:
    """The cache and audit commands need settings only: no servers file, no servers started."""
    try:
        settings = Settings.from_env(load_environment(config=args.config))
    except ConfigError as exc:
        print(f"mcp-code-mode: configuration error\n{exc}", file=sys.stderr)
        return 2
    _setup_logging("WARNING")
    try:
        if args.command == "skills":
            return run_skills_command(settings, args)
        return (run_audit_command if args.command == "audit" else run_cache_command)(settings, args)
    except CodeModeError as exc:
        print(f"mcp-code-mode: {exc}", file=sys.stderr)
        return 1


def _serve(config: CodeModeConfig, args: argparse.Namespace) -> int:
    options = None
    if args.http:
        from .http_server import HttpOptions, check_bind

        options = HttpOptions(
            host=args.host or HttpOptions.host,
            port=HttpOptions.port if args.port is None else args.port,
            path=args.path or HttpOptions.path,
            stateless=args.stateless,
        )
        check_bind(options, config.settings)
    url = config.settings.database_url
    if url is not None:  # reached and migrated before serving: a StoreError is a message naming the host
        from .database import open_database

        open_database(url.get_secret_value()).close()
    anyio.run(_serve_async, config, options)
    return 0


async def _serve_async(config: CodeModeConfig, options: HttpOptions | None) -> None:
    """Serve over stdio (``options`` None) or HTTP. Before the engine exists: the sandbox probe (a bubblewrap
    worker started and waited for, about 60–90 ms) runs on a thread while the MCP SDK's types are imported, and
    then the default Python runner's first worker starts (``runners._early``) while the rest of the engine
    and the SDK are imported (about 0.3 s): a client's first run, sent as soon as it is initialized, finds
    it ready."""
    from concurrent.futures import ThreadPoolExecutor

    from .sandbox import detect_sandbox

    with ThreadPoolExecutor(1, thread_name_prefix="mcp-code-mode-probe") as probing:
        probed = probing.submit(detect_sandbox, config.settings)
        # Meanwhile: the SDK's types, and what starts the worker (the probe takes longer than both).
        import mcp_types  # noqa: F401  # pyright: ignore[reportUnusedImport]

        from .runners._early import start_early

        sandbox = probed.result()
    early = await start_early(config.settings, sandbox)
    try:
        from .engine import CodeMode

        engine = CodeMode(config, sandbox=sandbox, early=early)
    except BaseException:
        if early is not None:
            await early.discard()
        raise
    if options is None:
        from .server import build_server

        await build_server(engine).run_stdio_async()
        return
    from .http_server import serve_http

    await serve_http(engine, options)


def _one_shot(config: CodeModeConfig) -> CodeModeConfig:
    """For a command that runs at most one script: no warm Pyodide interpreters (each is a Deno process)."""
    settings = config.settings.model_copy(update={"pyodide_pool_size": 0})
    return config.model_copy(update={"settings": settings})


async def _run(config: CodeModeConfig, args: argparse.Namespace) -> int:
    code = sys.stdin.read() if str(args.script) == "-" else args.script.read_text(encoding="utf-8")
    language = args.language or EXTENSIONS.get(args.script.suffix.lower(), "python")
    printed: list[str] = []

    async def stream(text: str) -> None:
        printed.append(text)
        sys.stdout.write(text)
        sys.stdout.flush()

    from .engine import CodeMode

    async with CodeMode(_one_shot(config)) as cm:
        result = await cm.execute(
            code,
            language,
            packages=split_packages(args.packages) or None,
            timeout_ms=args.timeout,
            runner=args.runner,
            on_output=None if args.json else stream,
            cache=args.cache,
        )
    if printed and not printed[-1].endswith("\n"):
        sys.stdout.write("\n")
    if result.cached:
        print(
            f"[replayed from the cache (--cache {args.cache}): the script did not run; "
            f"stored result {result.hash[:12]}; --cache refresh runs it again]",
            file=sys.stderr,
        )
    _print_result(result, as_json=args.json)
    return 0 if result.success else 1


def split_packages(values: list[str]) -> list[str]:
    """``--packages`` values, each one requirement or a comma list of them. A comma followed by a version
    operator continues the requirement before it (``numpy>=1.26,<2`` is one requirement)."""
    out: list[str] = []
    for value in values:
        requirements: list[str] = []
        for part in (p.strip() for p in value.split(",")):
            if part and requirements and part[0] in "<>=!~":
                requirements[-1] = f"{requirements[-1]},{part}"
            elif part:
                requirements.append(part)
        out.extend(requirements)
    return out


def _print_result(result: RunResult, *, as_json: bool) -> None:
    """The result after the streamed output: JSON alone, or the return value, the error and a summary."""
    if as_json:
        print(result.model_dump_json(by_alias=True, indent=2))
        return
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


async def _stubs(config: CodeModeConfig, server: str | None, language: str) -> int:
    from .engine import CodeMode

    async with CodeMode(_one_shot(config)) as cm:
        await cm.settled()  # the servers connect in the background: their tools are listed once each is up
        for status in cm.pool.servers.values():
            if status.state not in ("ready", "disabled"):
                print(f"# {status.name}: {status.state}: {status.error}", file=sys.stderr)
        print(cm.stubs(language.lower(), [server] if server else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
