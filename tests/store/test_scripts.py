"""The script store and its search, the same behaviour on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import time

import pytest

from mcp_code_mode.cache.embed import HashingEmbedder
from mcp_code_mode.cache.store import ScriptStore
from mcp_code_mode.database import Database

from ..cache.helpers import new_script

T = "default"


def store_on(db: Database) -> ScriptStore:
    return ScriptStore(db, HashingEmbedder()).open()


def test_a_stored_script_comes_back_whole_and_a_second_run_updates_it(database: Database) -> None:
    store = store_on(database)
    first = store.put(new_script("print(1)", description="print one", output="1\n", tools=["fs.read"]), tenant=T)
    assert store.get(first.hash, tenant=T) == first and store.get(first.hash[:8], tenant=T) == first
    assert first.run_count == 1 and first.description_given and [t.name for t in first.tools] == ["fs.read"]
    again = store.put(new_script("print(1)", output="changed\n", tools=["fs.read"]), tenant=T)
    assert again.id == first.id and again.run_count == 2 and again.output == "changed\n"
    assert again.description == "print one", "a given description is not replaced by a derived one"
    assert store.candidates(first.code_key, tenant=T) == [again]
    store.record_lookup(again.id, tenant=T)
    stats = store.stats(tenant=T)
    assert stats["scripts"] == 1 and stats["hits"] == 1 and stats["stored"] == 2 and stats["lookups"] == 1
    assert stats["backend"] == database.dialect and stats["vectors"] == 1


def test_listing_export_and_prune(database: Database) -> None:
    store = store_on(database)
    old = store.put(new_script("print('old')"), tenant=T)
    new = store.put(new_script("console.log(1)", language="javascript"), tenant=T)
    database.write(
        lambda tx: tx.execute("UPDATE scripts SET last_used_at = ? WHERE id = ?", (time.time() - 99, old.id))
    )
    assert [s.id for s in store.list(tenant=T)] == [new.id, old.id]
    assert [s.id for s in store.list("javascript", tenant=T)] == [new.id]
    assert [s.id for s in store.iter_all(tenant=T)] == [old.id, new.id]
    assert store.prune(50, tenant=T) == 1
    assert [s.id for s in store.list(tenant=T)] == [new.id]
    assert store.stats(tenant=T)["vectors"] == 1, "a pruned script's vector goes with it"


def test_hybrid_search_ranks_by_words_and_meaning_and_filters_by_language(database: Database) -> None:
    store = store_on(database)
    store.put(
        new_script("rows = csv.reader(f)\nprint(sum(float(r[2]) for r in rows))", description="sum a csv column"),
        tenant=T,
    )
    store.put(
        new_script("fs.write_file(path='x', content='y')", description="write a file", tools=["fs.write_file"]),
        tenant=T,
    )
    store.put(new_script("console.log(JSON.parse(s))", description="parse json text", language="javascript"), tenant=T)
    found = store.search("sum the csv column", tenant=T)
    assert found[0].script.description == "sum a csv column" and found[0].hit.text_rank == 1
    by_tool = store.search("write_file", tenant=T)
    assert by_tool[0].script.description == "write a file", "tool names are searched (split at _ as SQLite does)"
    assert [r.script.language for r in store.search("parse json", language="javascript", tenant=T)] == ["javascript"]
    assert store.search("parse json", language="python", tenant=T)[0].script.language == "python"
    assert store.search("", tenant=T) == [] or all(r.hit.text_rank is None for r in store.search("", tenant=T))


def test_a_second_process_s_writes_show_in_the_first_one_s_search(database: Database, tmp_path: object) -> None:
    reader = store_on(database)
    assert reader.search("gamma ray burst", tenant=T) == []  # the vectors are loaded (none)
    if database.dialect == "sqlite":
        from mcp_code_mode.database import open_database
        from mcp_code_mode.database._sqlite import SQLiteDatabase

        assert isinstance(database, SQLiteDatabase)
        other = open_database(database.path)
    else:
        from mcp_code_mode.database._postgres import PostgresDatabase

        assert isinstance(database, PostgresDatabase)
        other = PostgresDatabase(database._url).open()  # pyright: ignore[reportPrivateUsage]
    try:
        writer = store_on(other)
        writer.put(new_script("print('burst')", description="gamma ray burst counter"), tenant=T)
        hits = reader.search("gamma ray burst", tenant=T)
        assert hits and hits[0].hit.semantic_rank == 1, "the other connection's vector was loaded"
    finally:
        other.close()


@pytest.mark.parametrize("language", [None, "python"])
def test_search_sees_only_the_tenant_s_scripts(database: Database, language: str | None) -> None:
    store = store_on(database)
    store.put(new_script("print('a')", description="tally the invoices"), tenant="alpha")
    store.put(new_script("print('b')", description="tally the invoices of beta"), tenant="beta")
    found = store.search("tally invoices", language=language, tenant="alpha")
    assert [r.script.description for r in found] == ["tally the invoices"]
    assert store.search("tally invoices", language=language, tenant="gamma") == []


def test_postgresql_finds_the_nearest_vectors_in_sql_or_without_pgvector_in_memory(pg_database: Database) -> None:
    from mcp_code_mode.database._postgres import PostgresDatabase

    assert isinstance(pg_database, PostgresDatabase) and pg_database.vectors_in_sql, "pgserver ships pgvector"
    pg_database.write(lambda tx: tx.execute("TRUNCATE scripts, vectors, counters RESTART IDENTITY CASCADE"))
    store = store_on(pg_database)
    store.put(new_script("print('n')", description="gamma ray burst counter"), tenant=T)
    in_sql = store.search("gamma ray burst", tenant=T)
    assert in_sql[0].hit.semantic_rank == 1 and store._vectors is None  # pyright: ignore[reportPrivateUsage]
    pg_database.vectors_in_sql = False  # a server without the extension: the bytes, scanned in memory
    try:
        scanned = store_on(pg_database).search("gamma ray burst", tenant=T)
    finally:
        pg_database.vectors_in_sql = True
    assert [(r.script.id, r.hit.semantic_rank) for r in scanned] == [(r.script.id, r.hit.semantic_rank) for r in in_sql]
    assert abs((scanned[0].hit.similarity or 0) - (in_sql[0].hit.similarity or 0)) < 1e-5
