"""``mcp-code-mode cache migrate --to postgresql://…``: copy a SQLite cache database into PostgreSQL.

Every table, every tenant, in one transaction: all of it or nothing. A row is found in the target by its key
(a script by tenant and hash, a skill by tenant, name and version, …; an audit entry, which has no key but its
id, by all its columns): missing, it is inserted (with a new id where ids are generated); the same, it is
skipped, so a second run copies nothing; different, it is a conflict. Any conflict refuses the whole copy
(nothing is written) unless ``replace``: then the target's row takes the source's values. A script's vector
goes with its script; an artifact's file (``<cache root>/artifacts/<file>``) goes into its row's ``data``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from . import Tx, is_url, redact_url
from ._sqlite import SQLiteDatabase


@dataclass(frozen=True)
class _Table:
    name: str
    key: tuple[str, ...]
    """Columns that find the row in the target; empty: all of ``columns``."""
    columns: tuple[str, ...]


_SCRIPT_COLUMNS = (
    "tenant, hash, code_key, language, runner, code, packages, description, description_given, output, return_value,"
    " truncated, files, tools, tool_names, tool_calls, network, execution_ms, run_count, hit_count, created_at,"
    " last_run_at, last_used_at, key_version, network_use, pii_tokens"
)

TABLES: tuple[_Table, ...] = (
    _Table("scripts", ("tenant", "hash"), tuple(c.strip() for c in _SCRIPT_COLUMNS.split(","))),
    _Table("counters", ("tenant", "name"), ("tenant", "name", "value")),
    _Table(
        "audit",
        (),
        (
            "tenant",
            "at",
            "client",
            "run_id",
            "code_hash",
            "run_hash",
            "server",
            "tool",
            "arguments_digest",
            "preview",
            "decision",
            "ms",
            "ok",
            "error",
            "pii",
        ),
    ),
    _Table("plans", ("id",), ("id", "tenant", "code_hash", "client", "created_at", "expires_at", "calls", "used_at")),
    _Table(
        "skills",
        ("tenant", "name", "version"),
        (
            "tenant",
            "name",
            "version",
            "language",
            "description",
            "code",
            "parameters",
            "tools",
            "author",
            "source_hash",
            "created_at",
        ),
    ),
    _Table(
        "artifacts",
        ("tenant", "client", "run_hash", "path"),
        ("tenant", "run_hash", "client", "path", "file", "size", "mime", "created_at", "expires_at", "data"),
    ),
    _Table(
        "pii_vault",
        ("tenant", "client", "token"),
        ("tenant", "client", "token", "kind", "number", "value_mac", "sealed", "origins", "expires_at"),
    ),
    _Table("pii_counters", ("tenant", "client", "kind"), ("tenant", "client", "kind", "last")),
    _Table("sessions", ("tenant", "id"), ("tenant", "id", "client", "replica", "opened_at", "last_used_at")),
)


@dataclass
class Report:
    copied: dict[str, int] = field(default_factory=dict)
    same: dict[str, int] = field(default_factory=dict)
    replaced: dict[str, int] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)


class Refused(Exception):
    """The target holds other data under the same keys (the transaction is rolled back)."""


def _norm(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _copy_table(
    tx: Tx,
    table: _Table,
    rows: Sequence[Sequence[Any]],
    replace: bool,
    report: Report,
    after: Callable[[Sequence[Any], int], None] | None = None,
) -> None:
    key = table.key or table.columns
    where = " AND ".join(f"{c} IS NOT DISTINCT FROM ?" if not table.key else f"{c} = ?" for c in key)
    position = {c: i for i, c in enumerate(table.columns)}
    has_id = table.name in ("scripts",)
    select = f"SELECT {'id, ' if has_id else ''}{', '.join(table.columns)} FROM {table.name} WHERE {where}"
    marks = ", ".join("?" for _ in table.columns)
    insert = f"INSERT INTO {table.name}({', '.join(table.columns)}) VALUES ({marks})" + (
        " RETURNING id" if has_id else ""
    )
    for row in rows:
        values = [_norm(v) for v in row]
        found = tx.execute(select, [values[position[c]] for c in key]).fetchall()
        if not found:
            result = tx.execute(insert, values)
            target_id = int(result.fetchall()[0][0]) if has_id else 0
            report.copied[table.name] = report.copied.get(table.name, 0) + 1
        else:
            existing = found[0]
            offset = 1 if has_id else 0
            target_id = int(existing[0]) if has_id else 0
            theirs = [_norm(existing[offset + i]) for i in range(len(table.columns))]
            if theirs == values:
                report.same[table.name] = report.same.get(table.name, 0) + 1
            else:
                shown = ", ".join(f"{c}={values[position[c]]!r}"[:80] for c in key)
                report.conflicts.append(f"{table.name}: {shown}")
                if replace:
                    assignments = ", ".join(f"{c} = ?" for c in table.columns)
                    tx.execute(
                        f"UPDATE {table.name} SET {assignments} WHERE {where}",
                        [*values, *[values[position[c]] for c in key]],
                    )
                    report.replaced[table.name] = report.replaced.get(table.name, 0) + 1
        if after is not None:
            after(row, target_id)


def copy_database(source: SQLiteDatabase, target: Any, artifacts: Path, *, replace: bool = False) -> Report:
    """Copy every table of ``source`` into ``target`` (an open ``PostgresDatabase``) in one transaction."""
    report = Report()
    tables: dict[str, list[Any]] = {}
    for table in TABLES:
        columns = [c if c != "data" else "NULL AS data" for c in table.columns]
        if table.name == "scripts":
            columns = ["id", *columns]
        tables[table.name] = source.read(f"SELECT {', '.join(columns)} FROM {table.name} ORDER BY rowid")
    vectors = {int(r[0]): (r[1], bytes(r[2])) for r in source.read("SELECT script_id, model, vector FROM vectors")}

    def body(tx: Tx) -> None:
        for table in TABLES:
            rows: list[Sequence[Any]] = list(tables[table.name])
            hook: Callable[[Sequence[Any], int], None] | None = None
            if table.name == "scripts":
                source_ids = [int(r[0]) for r in rows]
                rows = [list(r)[1:] for r in rows]
                by_row = dict(zip(map(id, rows), source_ids, strict=True))

                def after(row: Sequence[Any], target_id: int, by_row: dict[int, int] = by_row) -> None:
                    vector = vectors.get(by_row[id(row)])
                    if vector is None:
                        return
                    have = tx.execute("SELECT model, vector FROM vectors WHERE script_id = ?", (target_id,)).fetchall()
                    if have and (have[0][0], bytes(have[0][1])) == vector:
                        return
                    tx.execute("DELETE FROM vectors WHERE script_id = ?", (target_id,))
                    tx.execute("INSERT INTO vectors(script_id, model, vector) VALUES (?, ?, ?)", (target_id, *vector))

                hook = after

            elif table.name == "artifacts":
                rows = [_with_data(list(r), artifacts) for r in rows]
            _copy_table(tx, table, rows, replace, report, hook)
        if report.conflicts and not replace:
            raise Refused
        target.note_change(tx, "scripts")
        target.note_change(tx, "skills")

    try:
        target.write(body, scope="migrate")
    except Refused:
        report.copied.clear()
    return report


def _with_data(row: list[Any], artifacts: Path) -> list[Any]:
    file = artifacts / str(row[4])
    try:
        row[9] = file.read_bytes()
    except OSError:
        row[9] = None
    return row


def migrate_command(db: Path, artifacts: Path, args: argparse.Namespace, out: TextIO) -> int:
    """``cache migrate --to URL [--replace]``; the exit status (1: refused or unusable, 2: not a URL)."""
    from ._postgres import PostgresDatabase

    url: str = args.to
    if not is_url(url):
        print(f"mcp-code-mode: --to must be a postgresql:// URL, got {redact_url(url)!r}", file=sys.stderr)
        return 2
    if not db.exists():
        print(f"mcp-code-mode: no cache database at {db}: nothing to copy", file=sys.stderr)
        return 1
    import sqlite3

    try:
        source = SQLiteDatabase(db).open()
    except sqlite3.Error as exc:
        print(f"mcp-code-mode: {db} cannot be used: {exc}", file=sys.stderr)
        return 1
    try:
        target = PostgresDatabase(url).open()
    except sqlite3.Error as exc:
        source.close()
        print(f"mcp-code-mode: {exc}", file=sys.stderr)
        return 1
    try:
        report = copy_database(source, target, artifacts, replace=args.replace)
    finally:
        source.close()
        target.close()
    if report.conflicts and not args.replace:
        print(
            f"mcp-code-mode: refused: {target.where} already holds other data under the same keys in "
            f"{len(report.conflicts)} row(s) (nothing was copied; --replace overwrites them):",
            file=sys.stderr,
        )
        for line in report.conflicts[:20]:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"copied {db} to {target.where}:", file=out)
    for table in TABLES:
        copied = report.copied.get(table.name, 0)
        same = report.same.get(table.name, 0)
        replaced = report.replaced.get(table.name, 0)
        extra = f", {replaced} replaced" if replaced else ""
        print(f"  {table.name}: {copied} copied, {same} already there{extra}", file=out)
    return 0
