"""The script store on SQLite and on PostgreSQL (pgserver, a local server over its Unix socket): storing 1,000
scripts, hybrid search over them (the quality set's 60 queries, limit 5) and an exact-key lookup.

    .venv/bin/python bench/store_backends.py [--scripts N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cache.helpers import new_script
from tests.cache.quality_set import QUERIES, SCRIPTS

from mcp_code_mode.cache.embed import StaticEmbedder
from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.database import open_database


def measure(name: str, target: Path | str, count: int) -> str:
    db = open_database(target)
    store = ScriptStore(db, StaticEmbedder()).open()
    try:
        batch = [
            new_script(s.code + f"\n# variant {i}", tools=s.tools, description=f"{s.description or ''} v{i}")
            for i, s in ((i, SCRIPTS[i % len(SCRIPTS)]) for i in range(count))
        ]
        started = time.perf_counter()
        for k in range(0, count, 100):
            store.put_many(batch[k : k + 100], tenant="default")
        stored_s = time.perf_counter() - started
        store.search("warm up", tenant="default")
        times: list[float] = []
        for query in QUERIES:
            started = time.perf_counter()
            store.search(query.text, limit=5, tenant="default")
            times.append((time.perf_counter() - started) * 1000)
        key = batch[0].code_key
        started = time.perf_counter()
        for _ in range(50):
            store.candidates(key, tenant="default")
        lookup_ms = (time.perf_counter() - started) * 1000 / 50
        p90 = sorted(times)[int(len(times) * 0.9)]
        return f"| {name} | {stored_s:.1f} s | {statistics.median(times):.1f} ms | {p90:.1f} ms | {lookup_ms:.2f} ms |"
    finally:
        store.close()
        db.close()


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--scripts", type=int, default=1000)
    count = args.parse_args().scripts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
        import psycopg

        data = Path(tempfile.mkdtemp(prefix="mcp-code-mode-pg-"))
        data.chmod(0o755)
        server = pgserver.get_server(data / "data", cleanup_mode="stop")  # pyright: ignore[reportPrivateImportUsage]
    try:
        url = str(server.get_uri())
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        print(
            f"| backend ({count} scripts) | store all (batches of 100) | search p50 | search p90 | exact-key lookup |"
        )
        print("|---|---|---|---|---|")
        print(measure("SQLite", data / "scripts.db", count))
        print(measure("PostgreSQL 16 (Unix socket)", url.replace("/postgres?", "/bench?"), count))
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
