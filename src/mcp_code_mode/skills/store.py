"""``SkillStore``: the skills' versions in the cache database (migration 6 of ``cache/schema.py``)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from ..cache.store import ScriptStore
from .model import SkillVersion, ToolRef, to_json

_COLUMNS = "name, version, language, description, code, parameters, tools, author, source_hash, created_at"


class SkillStore:
    """Thread-safe; opened (and migrated) on construction with the cache's own code, ``close`` after."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._store = ScriptStore(path).open()
        self.generation = 0
        """Counts this process's changes (a listing cached by it knows when to read again)."""

    def close(self) -> None:
        self._store.close()

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._store._lock:  # pyright: ignore[reportPrivateUsage]
            return self._store.conn.execute(sql, args).fetchall()

    def save(self, skill: SkillVersion) -> SkillVersion:
        """Add ``skill`` as the next version of its name; the version as stored."""
        saved: list[SkillVersion] = []

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT MAX(version) FROM skills WHERE name = ?", (skill.name,)).fetchone()
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
            conn.execute(
                f"INSERT INTO skills({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
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
            saved.append(stored)

        self._store._write(write)  # pyright: ignore[reportPrivateUsage]
        self.generation += 1
        return saved[0]

    def latest(self) -> list[SkillVersion]:
        """The latest version of every skill, by name."""
        rows = self._read(
            f"SELECT {_COLUMNS} FROM skills s WHERE version = (SELECT MAX(version) FROM skills WHERE name = s.name) "
            "ORDER BY name"
        )
        return [_skill(r) for r in rows]

    def versions(self, name: str) -> list[SkillVersion]:
        """Every version of ``name``, newest first."""
        rows = self._read(f"SELECT {_COLUMNS} FROM skills WHERE name = ? ORDER BY version DESC", (name,))
        return [_skill(r) for r in rows]

    def delete(self, name: str) -> int:
        """Remove every version of ``name``; how many there were."""
        counts: list[int] = []

        def write(conn: sqlite3.Connection) -> None:
            counts.append(conn.execute("DELETE FROM skills WHERE name = ?", (name,)).rowcount)

        self._store._write(write)  # pyright: ignore[reportPrivateUsage]
        self.generation += 1
        return counts[0]

    def data_version(self) -> int:
        """Changes by other connections show here (another server process on the same file)."""
        return int(self._read("PRAGMA data_version")[0][0])


def _skill(row: sqlite3.Row) -> SkillVersion:
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
