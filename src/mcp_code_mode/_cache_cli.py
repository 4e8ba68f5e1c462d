"""``mcp-code-mode cache …``: look into and tidy the script cache without starting any server."""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any, TextIO

from .cache import DB_NAME, ONE_DAY, ScriptCache
from .cache.embed import make_embedder
from .config import Settings
from .database import open_database
from .packages import PythonEnvironments
from .tenants import DEFAULT_TENANT, Tenant

DEFAULT_PRUNE_DAYS = 30.0


def add_cache_parser(sub: Any) -> None:
    """Register ``cache`` and its subcommands on the main parser's subparsers."""
    cache = sub.add_parser(
        "cache",
        help="search, list, show, export or prune the script cache",
        description="The script cache: every successful execute_code run, kept in scripts.db under "
        "$CODE_MODE_CACHE_DIR (default: ~/.cache/mcp-code-mode), or in PostgreSQL when CODE_MODE_DATABASE_URL "
        "is set.",
    )
    commands = cache.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", required=True)
    # Every subcommand takes --config: no servers file is read, but .env beside it is (CODE_MODE_CACHE_DIR).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        type=Path,
        help="servers file whose folder's .env is read for CODE_MODE_* settings such as CODE_MODE_CACHE_DIR "
        "(the file itself is not read and need not exist; default: $CODE_MODE_CONFIG, else ./mcp_servers.json)",
    )
    common.add_argument(
        "--tenant", default=DEFAULT_TENANT.name, help="the tenant whose scripts to read or prune (default: default)"
    )

    search = commands.add_parser("search", parents=[common], help="find cached scripts by describing the task")
    search.add_argument("query", help="the task in words, e.g. 'parse CSV and sum a column'")
    search.add_argument("--language", help="only scripts in this language")
    search.add_argument("--limit", type=int, default=5, help="how many results (default: 5)")
    search.add_argument("--json", action="store_true", help="print JSON")

    listing = commands.add_parser("list", parents=[common], help="list cached scripts, most recently used first")
    listing.add_argument("--language", help="only scripts in this language")
    listing.add_argument("--limit", type=int, default=20, help="how many scripts (default: 20)")
    listing.add_argument("--json", action="store_true", help="print JSON")

    show = commands.add_parser("show", parents=[common], help="print one script: code, output, tools and stats")
    show.add_argument("hash", help="the script's hash, or a unique prefix of at least 6 characters")
    show.add_argument("--json", action="store_true", help="print JSON")

    commands.add_parser(
        "stats", parents=[common], help="print totals, size, per-language counts and the hit rate (JSON)"
    )

    prune = commands.add_parser(
        "prune",
        parents=[common],
        help="delete scripts, package environments and Pyodide snapshots not used for a while",
        description="Delete scripts not used (run or replayed), package environments not used, and Pyodide "
        "memory snapshots of other versions not used, for --older-than days (the newest snapshot stays).",
    )
    prune.add_argument(
        "--older-than",
        type=float,
        default=DEFAULT_PRUNE_DAYS,
        metavar="DAYS",
        help=f"age in days since last use (default: {DEFAULT_PRUNE_DAYS:g})",
    )

    export = commands.add_parser(
        "export", parents=[common], help="write every script as JSON lines (one object per script)"
    )
    export.add_argument("--output", "-o", type=Path, help="file to write (default: standard output)")

    migrate = commands.add_parser(
        "migrate",
        parents=[common],
        help="copy the SQLite cache (every table, every tenant) into PostgreSQL",
        description="Copy every table of the SQLite cache database (scripts.db under $CODE_MODE_CACHE_DIR, all "
        "tenants; artifacts' files into their rows) into the PostgreSQL database --to names, creating its schema. "
        "One transaction per table; run twice, it copies nothing twice. A target that holds other data under the "
        "same keys is refused (nothing is written) unless --replace is given. Prints the rows copied per table.",
    )
    migrate.add_argument("--to", required=True, metavar="URL", help="postgresql://user:password@host:port/database")
    migrate.add_argument(
        "--replace", action="store_true", help="overwrite the target's rows that differ under the same keys"
    )


def run_cache_command(settings: Settings, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one ``cache`` subcommand; returns the exit status."""
    stream: TextIO = out if out is not None else sys.stdout
    try:
        Tenant(args.tenant)
    except ValueError as exc:
        print(f"mcp-code-mode: {exc}", file=sys.stderr)
        return 2
    if args.cache_command == "migrate":
        from .database._copy import migrate_command

        return migrate_command(settings.cache_root() / DB_NAME, settings.cache_root() / "artifacts", args, stream)
    # search needs the embedder; the other commands never load it
    embedder = make_embedder(settings.cache_embedder) if args.cache_command == "search" else None
    database = None
    if settings.database_url is not None:
        try:
            database = open_database(settings.database_url.get_secret_value())
        except sqlite3.Error as exc:
            print(f"mcp-code-mode: {exc}", file=sys.stderr)
            return 1
    cache = ScriptCache(
        settings.cache_root(), ttl=settings.cache_ttl, embedder=embedder, current_schema=None, database=database
    )
    cache.open()
    try:
        for problem in cache.problems:
            print(f"mcp-code-mode: {problem}", file=sys.stderr)
        if cache.store is None:
            return 1
        return _dispatch(cache, environments(settings), settings, args, stream)
    finally:
        cache.close()
        if database is not None:
            database.close()


def environments(settings: Settings) -> PythonEnvironments:
    return PythonEnvironments(settings.cache_root() / "envs", install_timeout=settings.install_timeout)


def _dispatch(
    cache: ScriptCache, envs: PythonEnvironments, settings: Settings, args: argparse.Namespace, out: TextIO
) -> int:
    command = args.cache_command
    tenant: str = args.tenant
    if command == "search":
        results = cache.search(args.query, args.language, args.limit, tenant=tenant)
        if args.json:
            _dump([r.to_json() for r in results], out)
        for r in [] if args.json else results:
            print(f"{r.script.hash[:12]}  {r.hit.score:.4f}  {r.script.language:<10} {r.script.description}", file=out)
        return 0
    if command == "list":
        scripts = cache.list(args.language, args.limit, tenant=tenant)
        if args.json:
            _dump([s.summary() for s in scripts], out)
        for s in [] if args.json else scripts:
            last = s.summary()["lastUsed"]
            runs = f"{s.run_count} runs, {s.hit_count} hits"
            print(f"{s.hash[:12]}  {last}  {s.language:<10} {runs:<18} {s.description}", file=out)
        return 0
    if command == "show":
        script = cache.get(args.hash, tenant=tenant)
        if script is None:
            print(
                f"mcp-code-mode: no cached script with hash {args.hash!r} (or the prefix is ambiguous)", file=sys.stderr
            )
            return 1
        data = script.to_json()
        if args.json:
            _dump(data, out)
            return 0
        for key in (
            "hash",
            "language",
            "runner",
            "description",
            "tools",
            "runCount",
            "hitCount",
            "created",
            "lastUsed",
        ):
            print(f"{key}: {data[key]}", file=out)
        print("--- code ---", file=out)
        print(script.code, file=out)
        print("--- output ---", file=out)
        print(script.output.rstrip("\n"), file=out)
        if script.return_value is not None:
            print("--- return value ---", file=out)
            _dump(script.return_value, out)
        return 0
    if command == "stats":
        _dump({**cache.stats(tenant=tenant), "environments": envs.stats()}, out)
        return 0
    if command == "prune":
        removed = cache.prune(args.older_than * ONE_DAY, tenant=tenant)
        print(f"pruned {removed} script(s) not used for {args.older_than:g} days", file=out)
        gone = envs.prune(args.older_than * ONE_DAY)
        print(f"pruned {len(gone)} package environment(s) not used for {args.older_than:g} days", file=out)
        for line in gone:
            print(f"  {line}", file=out)
        from .runners.registry import plugins  # the runners import the MCP SDK: not at the CLI's start

        for plugin in plugins():  # what each runner keeps in the cache of its own (Pyodide's snapshots)
            if plugin.prune is None:
                continue
            what, removed_files = plugin.prune(settings, args.older_than * ONE_DAY)
            print(f"pruned {len(removed_files)} {what} not used for {args.older_than:g} days", file=out)
            for name in removed_files:
                print(f"  {name}", file=out)
        return 0
    assert command == "export"
    target = args.output.open("w", encoding="utf-8") if args.output else out
    try:
        count = 0
        for script in cache.iter_all(tenant=tenant):
            target.write(json.dumps(script.to_json(), ensure_ascii=False, default=repr) + "\n")
            count += 1
    finally:
        if args.output:
            target.close()
    if args.output:
        print(f"exported {count} script(s) to {args.output}", file=sys.stderr)
    return 0


def _dump(value: Any, out: TextIO) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=repr), file=out)
