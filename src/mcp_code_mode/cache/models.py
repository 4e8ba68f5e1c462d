"""The records of the script cache: a run to store, a stored script, a search result."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ..database import Row
from .describe import ToolUse
from .keys import KEY_VERSION
from .search import Hit


@dataclass
class NewScript:
    """A successful run, as the engine hands it to the store."""

    hash: str
    code_key: str
    language: str
    runner: str
    code: str
    packages: list[str]
    description: str
    description_given: bool
    output: str
    return_value: Any
    truncated: bool
    files: list[dict[str, Any]]
    tools: list[ToolUse]
    tool_calls: int
    network: bool
    """The run used the network: a connection through the egress proxy, allowed or refused (or it was granted
    the network where the proxy is not its only way out)."""
    execution_ms: float
    key_version: int = KEY_VERSION
    network_use: dict[str, Any] | None = None
    """The run's figures from the proxy (``bridge.NetworkUse``), when it had the network."""
    pii_tokens: bytes | None = None
    """The tokens its output holds and what they stand for, sealed (``privacy``); None when none."""


@dataclass
class StoredScript:
    """A row of the cache."""

    id: int
    hash: str
    code_key: str
    language: str
    runner: str
    code: str
    packages: list[str]
    description: str
    description_given: bool
    output: str
    return_value: Any
    truncated: bool
    files: list[dict[str, Any]]
    tools: list[ToolUse]
    tool_calls: int
    network: bool
    execution_ms: float
    run_count: int
    hit_count: int
    created_at: float
    last_run_at: float
    last_used_at: float
    key_version: int = KEY_VERSION
    """The ``keys.KEY_VERSION`` it was keyed with; lookups only match the current one."""
    network_use: dict[str, Any] | None = None
    """What the run did through the egress proxy (hosts, bytes, refusals), when it had the network."""
    pii_tokens: bytes | None = None
    """The tokens its output holds and what they stand for, sealed (``privacy``): a replay re-tokenizes them
    for its client. Never shown."""

    @property
    def side_effect_free(self) -> bool:
        """What the host saw: no tool call, no file left, no network used (never the runner's name)."""
        return self.tool_calls == 0 and not self.files and not self.network

    def summary(self) -> dict[str, Any]:
        """What listings and search results show (no output, no code)."""
        return {
            "hash": self.hash,
            "language": self.language,
            "runner": self.runner,
            "description": self.description,
            "tools": [t.name for t in self.tools],
            "packages": self.packages,
            "runCount": self.run_count,
            "hitCount": self.hit_count,
            "lastUsed": _iso(self.last_used_at),
        }

    def to_json(self) -> dict[str, Any]:
        """Everything about the script, for ``get_cached_script`` and ``cache show``/``export``."""
        return {
            **self.summary(),
            "code": self.code,
            "descriptionGiven": self.description_given,
            "output": self.output,
            "returnValue": self.return_value,
            "truncated": self.truncated,
            "files": self.files,
            "toolsUsed": [{"server": t.server, "tool": t.tool, "schemaHash": t.schema_hash} for t in self.tools],
            "toolCalls": self.tool_calls,
            "network": self.network,
            "networkUse": self.network_use,
            "sideEffectFree": self.side_effect_free,
            "keyVersion": self.key_version,
            "executionTime": round(self.execution_ms),
            "created": _iso(self.created_at),
            "lastRun": _iso(self.last_run_at),
        }


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def row_to_script(row: Row) -> StoredScript:
    tools = [ToolUse(t["server"], t["tool"], t["schema_hash"]) for t in json.loads(row["tools"])]
    return StoredScript(
        id=row["id"],
        hash=row["hash"],
        code_key=row["code_key"],
        language=row["language"],
        runner=row["runner"],
        code=row["code"],
        packages=json.loads(row["packages"]),
        description=row["description"],
        description_given=bool(row["description_given"]),
        output=row["output"],
        return_value=json.loads(row["return_value"]),
        truncated=bool(row["truncated"]),
        files=json.loads(row["files"]),
        tools=tools,
        tool_calls=row["tool_calls"],
        network=bool(row["network"]),
        execution_ms=row["execution_ms"],
        run_count=row["run_count"],
        hit_count=row["hit_count"],
        created_at=row["created_at"],
        last_run_at=row["last_run_at"],
        last_used_at=row["last_used_at"],
        key_version=row["key_version"],
        network_use=json.loads(row["network_use"]) if row["network_use"] else None,
        pii_tokens=row["pii_tokens"],
    )


@dataclass(frozen=True)
class SearchResult:
    script: StoredScript
    hit: Hit[int]
    stale: bool | None
    """A tool it used is gone or has another schema now: it would not be an exact hit (None: unknown)."""

    def to_json(self) -> dict[str, Any]:
        return {
            **self.script.summary(),
            "score": round(self.hit.score, 5),
            "textRank": self.hit.text_rank,
            "semanticRank": self.hit.semantic_rank,
            "similarity": None if self.hit.similarity is None else round(self.hit.similarity, 4),
            "stale": self.stale,
        }
