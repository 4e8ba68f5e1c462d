"""``mcp-code-mode skills …``: export and import skills as Agent Skills folders, without starting any server."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .cache import DB_NAME
from .config import Settings
from .database import open_database
from .tenants import DEFAULT_TENANT, Tenant

if TYPE_CHECKING:
    from .skills import SkillVersion


def add_skills_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    skills = sub.add_parser(
        "skills",
        help="export or import skills as Agent Skills folders (SKILL.md and the code beside it)",
        description="Skills are kept in the cache database (scripts.db under $CODE_MODE_CACHE_DIR), or in "
        "PostgreSQL when CODE_MODE_DATABASE_URL is set.",
    )
    commands = skills.add_subparsers(dest="skills_command", metavar="SUBCOMMAND", required=True)
    tenant = argparse.ArgumentParser(add_help=False)
    tenant.add_argument(
        "--tenant", default=DEFAULT_TENANT.name, help="the tenant whose skills these are (default: default)"
    )
    common = argparse.ArgumentParser(add_help=False, parents=[common, tenant])
    export = commands.add_parser("export", parents=[common], help="write a folder per skill under DIR")
    export.add_argument("dir", type=Path)
    export.add_argument("--name", action="append", help="only this skill (repeatable)")
    imported = commands.add_parser(
        "import", parents=[common], help="add each skill folder under DIR (or DIR itself) as a new version"
    )
    imported.add_argument("dir", type=Path)
    commands.add_parser("list", parents=[common], help="list the skills: name, language, version, description")


def run_skills_command(settings: Settings, args: argparse.Namespace, out: TextIO | None = None) -> int:
    from .skills import SkillStore  # the skills import the runners and the MCP SDK: not at the CLI's start
    from .skills.folders import export_skill, read_all

    stream: TextIO = out if out is not None else sys.stdout
    try:
        tenant = Tenant(args.tenant).name
    except ValueError as exc:
        print(f"mcp-code-mode: --tenant: {exc}", file=sys.stderr)
        return 2
    url = settings.database_url
    database = open_database(url.get_secret_value()) if url is not None else None
    store = SkillStore(settings.cache_root() / DB_NAME if database is None else database)
    try:
        if args.skills_command == "export":
            wanted = set(args.name or [])
            chosen = [s for s in store.latest(tenant=tenant) if not wanted or s.name in wanted]
            missing = sorted(wanted - {s.name for s in chosen})
            for skill in chosen:
                print(
                    f"exported {skill.name} (version {skill.version}) to {export_skill(skill, args.dir)}", file=stream
                )
            for name in missing:
                print(f"mcp-code-mode: no skill {name!r}", file=sys.stderr)
            return 1 if missing else 0
        if args.skills_command == "import":
            if not args.dir.is_dir():
                print(f"mcp-code-mode: {args.dir} is not a folder", file=sys.stderr)
                return 1
            refused = 0
            for entry in read_all(args.dir):
                if entry.skill is None:
                    refused += 1
                    print(f"refused {entry.folder}: {entry.refused}", file=stream)
                    continue
                saved = store.save(entry.skill if entry.skill.author else _by_import(entry.skill), tenant=tenant)
                print(f"imported {saved.name} (version {saved.version}, {saved.language})", file=stream)
            return 1 if refused else 0
        for skill in store.latest(tenant=tenant):
            print(f"{skill.name}\t{skill.language}\tv{skill.version}\t{skill.description}", file=stream)
        return 0
    finally:
        store.close()
        if database is not None:
            database.close()


def _by_import(skill: SkillVersion) -> SkillVersion:
    return replace(skill, author="import")
