"""``mcp-code-mode audit``: read (or prune) the audit log in the cache database without starting any server.

The default output is a table, newest first. ``--json`` prints JSON lines instead: one object per entry, newest
first, the keys of ``AuditLog.query`` (camelCase, ``at`` in ISO 8601 UTC); nothing at all when no entry matches.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any, TextIO

from .cache import DB_NAME, AuditLog, parse_since
from .cache.audit import cut
from .config import Settings
from .database import open_database
from .tenants import DEFAULT_TENANT, Tenant

DEFAULT_LIMIT = 200
_PREVIEW_WIDTH = 60


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_audit_parser(sub: Any) -> None:
    """Register ``audit`` on the main parser's subparsers."""
    audit = sub.add_parser(
        "audit",
        help="show the audit log: every tool call of every run, and what was decided about it",
        description="The audit log: every tool call a script asked for (time, client, run, server.tool, the "
        "decision: allowed, approved, denied, planned, over_cap or refused; duration, success, a redacted "
        "preview of the arguments), newest first. Kept in scripts.db under $CODE_MODE_CACHE_DIR for "
        "$CODE_MODE_AUDIT_DAYS days (or in PostgreSQL when CODE_MODE_DATABASE_URL is set). Times are UTC.",
    )
    audit.add_argument(
        "--config",
        type=Path,
        help="servers file whose folder's .env is read for CODE_MODE_* settings such as CODE_MODE_CACHE_DIR "
        "(the file itself is not read and need not exist; default: $CODE_MODE_CONFIG, else ./mcp_servers.json)",
    )
    audit.add_argument(
        "--run", metavar="HASH", help="only this run: its run id, code hash or run hash, or a prefix of 8+ hex digits"
    )
    audit.add_argument("--tool", metavar="T", help="only these tools: a glob over server.tool or the tool's name")
    audit.add_argument(
        "--since",
        metavar="WHEN",
        help="only calls at or after WHEN: an ISO 8601 time (2026-12-01T10:00, UTC unless it has an offset) "
        "or an age (15m, 2h, 3d)",
    )
    audit.add_argument("--client", metavar="C", help="only calls of this client (session or token)")
    audit.add_argument(
        "--tenant", default=DEFAULT_TENANT.name, help="the tenant whose calls to show or prune (default: default)"
    )
    audit.add_argument(
        "--limit",
        type=_positive,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"at most N entries (default: {DEFAULT_LIMIT})",
    )
    audit.add_argument("--json", action="store_true", help="print JSON lines, one object per entry, newest first")
    audit.add_argument(
        "--prune",
        action="store_true",
        help="delete entries older than $CODE_MODE_AUDIT_DAYS days and expired plans, and print how many went",
    )


def run_audit_command(settings: Settings, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``audit``; returns the exit status (2 for a bad argument, 1 when the database cannot be used)."""
    stream: TextIO = out if out is not None else sys.stdout
    filters = [
        f"--{name} {value}" for name in ("run", "tool", "since", "client") if (value := getattr(args, name)) is not None
    ]
    if args.prune and (filters or args.json):
        given = [f.split()[0] for f in filters] + (["--json"] if args.json else [])
        print(f"mcp-code-mode: --prune takes none of {', '.join(given)}", file=sys.stderr)
        return 2
    since: float | None = None
    if args.since is not None:
        try:
            since = parse_since(args.since)
        except ValueError as exc:
            print(f"mcp-code-mode: --since: {exc}", file=sys.stderr)
            return 2
    try:
        tenant = Tenant(args.tenant).name
    except ValueError as exc:
        print(f"mcp-code-mode: --tenant: {exc}", file=sys.stderr)
        return 2
    path = settings.cache_root() / DB_NAME
    url = settings.database_url
    if url is None and not args.prune and not path.exists():
        _nothing(args, f"the audit log is empty (no cache database at {path})", stream)
        return 0
    where = path if url is None else "PostgreSQL"
    try:
        log = AuditLog(path if url is None else open_database(url.get_secret_value()))
    except (OSError, sqlite3.Error) as exc:
        print(f"mcp-code-mode: the audit log in {where} cannot be used: {exc}", file=sys.stderr)
        return 1
    try:
        for problem in log.problems:
            print(f"mcp-code-mode: {problem}", file=sys.stderr)
        if args.prune:
            removed = log.prune(settings.audit_days, tenant=tenant)
            days = settings.audit_days
            entries = "entry" if removed == 1 else "entries"
            print(f"pruned {removed} audit {entries} older than {days:g} days, and the expired plans", file=stream)
            return 0
        rows = log.query(run=args.run, tool=args.tool, since=since, client=args.client, limit=args.limit, tenant=tenant)
    finally:
        log.close()
        log.database_close()
    if not rows:
        what = f"no audit entries match {' '.join(filters)}" if filters else "the audit log is empty"
        _nothing(args, what, stream)
        return 0
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False), file=stream)
    else:
        _table(rows, stream)
    return 0


def _nothing(args: argparse.Namespace, message: str, out: TextIO) -> None:
    """Say that nothing matched: on stdout for the table, on stderr with --json (whose stdout stays JSON lines)."""
    print(message, file=sys.stderr if args.json else out)


def _table(rows: list[dict[str, Any]], out: TextIO) -> None:
    """One line per entry. RUN is the run's hash, or its code hash until the run's hash is known; OK is ok or
    fail for a call that was made, - for one that was not; a failed call's error follows its preview."""
    header = ("TIME", "CLIENT", "RUN", "TOOL", "DECISION", "MS", "OK", "PREVIEW")
    lines: list[tuple[str, ...]] = [header]
    for row in rows:
        run = (row["runHash"] or row["codeHash"] or row["runId"])[:12]
        ok = "ok" if row["ok"] else "fail" if row["decision"] in ("allowed", "approved") else "-"
        preview = cut(row["preview"], _PREVIEW_WIDTH)
        error = (row["error"] or "").strip()
        if error and not row["ok"]:
            preview += f"  ! {cut(error.splitlines()[0], _PREVIEW_WIDTH)}"
        pii = row.get("pii") or {}
        if pii.get("withheld"):
            preview += f"  [withheld: {', '.join(pii['withheld'])}]"
        lines.append(
            (
                row["at"],
                cut(row["client"], 16),
                run,
                f"{row['server']}.{row['tool']}",
                row["decision"],
                f"{row['ms']:.1f}",
                ok,
                preview,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True)]
        print("  ".join([*cells, line[-1]]).rstrip(), file=out)
