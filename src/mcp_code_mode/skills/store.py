"""``SkillStore``: the skills' versions in the stores' database (SQLite migrations 6 and 8; PostgreSQL's 1).

Every version belongs to a tenant; a skill's name and version are unique per tenant, and every method reads or
changes one tenant's skills only."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..database import Database, Row, Tx, open_database
from .model import SkillVersion, ToolRef, to_json

_COLUMNS = "name, version, language, description, code, parameters, tools, author, source_hash, created_at"


class SkillStore:
    """Thread-safe. ``target``: a SQLite file (opened and migrated here, closed by ``close``) or an open
    ``Database`` (shared, left open)."""

    def __init__(self, target: Path | Database) -> None:
        self._owned = isinstance(target, Path)
        self._db: Database = open_database(target) if isinstance(target, Path) else target
        self.path = self._db.where
        self.generation = 0
        """Counts this process's changes (a listing cached by it knows when to read again)."""

    def close(self) -> None:
        if self._owned:
            self._db.close()

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Row]:
        return self._db.read(sql, args)

    def save(self, skill: SkillVersion, *, tenant: str) -> SkillVersion:
        """Add ``skill`` as the next version of its name (of this tenant); the version as stored."""
        saved: list[SkillVersion] = []

        def write(tx: Tx) -> None:
            row = tx.execute(
                "SELECT MAX(version) FROM skills WHERE tenant = ? AND name = ?", (tenant, skill.name)
            ).fetchone()
            version = (row[0] or 0) + 1
            stored = SkillVersion(
                name=skill.name,
                version=version,
                language=skill.language,
                description=skill.description,
                code=skill.code,
                parameters=skill.parameters,
                tools=skill.tools,
                author=skill.author,
                created_at=time.time(),
                source_hash=skill.source_hash,
            )
            tx.execute(
                f"INSERT INTO skills(tenant, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tenant,
                    stored.name,
                    stored.version,
                    stored.language,
                    stored.description,
                    stored.code,
                    to_json(stored.parameters),
                    json.dumps([t.to_json() for t in stored.tools]),
                    stored.author,
                    stored.source_hash,
                    stored.created_at,
                ),
            )
            self._db.note_change(tx, "skills")
            saved.append(stored)

        self._db.write(write, scope="skills")
        self.generation += 1
        return saved[0]

    def latest(self, *, tenant: str) -> list[SkillVersion]:
        """The latest version of every skill of the tenant, by name."""
        rows = self._read(
            f"SELECT {_COLUMNS} FROM skills s WHERE tenant = ? AND version = (SELECT MAX(version) FROM skills"
            " WHERE tenant = s.tenant AND name = s.name) ORDER BY name",
            (tenant,),
        )
        return [_skill(r) for r in rows]

    def versions(self, name: str, *, tenant: str) -> list[SkillVersion]:
        """Every version of ``name``, newest first."""
        rows = self._read(
            f"SELECT {_COLUMNS} FROM skills WHERE tenant = ? AND name = ? ORDER BY version DESC", (tenant, name)
        )
        return [_skill(r) for r in rows]

    def delete(self, name: str, *, tenant: str) -> int:
        """Remove every version of ``name`` (of this tenant); how many there were."""

        def write(tx: Tx) -> int:
            count = tx.execute("DELETE FROM skills WHERE tenant = ? AND name = ?", (tenant, name)).rowcount
            self._db.note_change(tx, "skills")
            return count

        removed = self._db.write(write, scope="skills")
        self.generation += 1
        return removed

    def data_version(self) -> int:
        """Changes by other connections show here (another server process on the same file, another replica)."""
        return self._db.changes("skills")


def _skill(row: Row) -> SkillVersion:
    tools = json.loads(row["tools"] or "[]")
    return SkillVersion(
        name=row["name"],
        version=int(row["version"]),
        language=row["language"],
        description=row["description"],
        code=row["code"],
        parameters=json.loads(row["parameters"] or "{}"),
        tools=tuple(ToolRef(str(t["server"]), str(t["tool"]), str(t.get("schemaHash") or "")) for t in tools),
        author=row["author"],
        created_at=float(row["created_at"]),
        source_hash=row["source_hash"],
    )
