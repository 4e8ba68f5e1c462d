"""``search_tools``' ranking on the labelled set (``labelled.py``): the npm servers' tools and a 200-tool business
catalogue, no server process. ``bench/tool_search.py`` compares the candidates and measures the cost."""

from __future__ import annotations

import pytest

from mcp_code_mode.cache.embed import HashingEmbedder, StaticEmbedder
from mcp_code_mode.discovery import ToolRanker, ToolSearch, expand, stem
from mcp_code_mode.errors import UnsupportedError
from mcp_code_mode.stubs import StubIndex

from .labelled import catalogue, queries, score, stub_index

TOP3 = 0.9


@pytest.fixture(scope="module")
def index() -> StubIndex:
    return stub_index()


@pytest.fixture(scope="module")
def search(index: StubIndex) -> ToolSearch:
    return ToolSearch(StaticEmbedder())


def names(found: dict[str, object]) -> list[str]:
    tools = found["tools"]
    assert isinstance(tools, list)
    return [f"{t['server']}.{t.get('originalName', t['tool'].split('.', 1)[1])}" for t in tools]  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


def test_the_labelled_set_is_large_enough_and_names_real_tools() -> None:
    every = queries()
    known = {f"{t.server}.{t.name}" for t in catalogue()}
    assert len(every) >= 60 and len(queries("heldout")) >= 20
    assert len([t for t in catalogue() if t.server not in {"filesystem", "memory", "everything"}]) == 200
    assert all(set(q.expected) <= known for q in every)
    assert len({q.text for q in every}) == len(every)


def test_top3_hit_rate_on_the_whole_labelled_set(index: StubIndex, search: ToolSearch) -> None:
    found = score(lambda q: names(search.search(index, 1, q, detail="name", limit=20)), queries())
    assert found.top3 >= TOP3, found.misses


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("save a string to disk", "filesystem.write_file"),
        ("sign off on a bill before payment", "billing.approve_invoice"),
        ("how many customers are there", "crm.count_customer"),
    ],
)
def test_the_issues_examples_are_in_the_top_3(index: StubIndex, search: ToolSearch, query: str, expected: str) -> None:
    assert expected in names(search.search(index, 1, query, detail="name", limit=3))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("approve_invoice", "billing.approve_invoice"),
        ("get-tiny-image", "everything.get-tiny-image"),
        ("get_tiny_image", "everything.get-tiny-image"),
        ("filesystem.read_text_file", "filesystem.read_text_file"),
        ("list_directory", "filesystem.list_directory"),
    ],
)
def test_a_tool_is_found_first_by_its_exact_name(
    index: StubIndex, search: ToolSearch, query: str, expected: str
) -> None:
    assert names(search.search(index, 1, query, detail="name", limit=5))[0] == expected


def test_the_output_keeps_its_shape_server_filter_and_limit(index: StubIndex, search: ToolSearch) -> None:
    found = search.search(index, 1, "delete", server="memory", detail="name", limit=2)
    assert found["query"] == "delete" and found["detail"] == "name"
    assert len(found["tools"]) == 2
    assert all(t["server"] == "memory" and set(t) == {"tool", "server", "score"} for t in found["tools"])
    summary = search.search(index, 1, "read a text file", detail="summary", limit=1)["tools"][0]
    assert summary["tool"] == "filesystem.read_text_file" and {"summary", "signature", "score"} <= set(summary)
    renamed = search.search(index, 1, "get-sum", detail="name", limit=1)["tools"][0]
    assert renamed["originalName"] == "get-sum"
    with pytest.raises(UnsupportedError, match="unknown server"):
        search.search(index, 1, "x", server="nope")
    with pytest.raises(UnsupportedError, match="detail must be"):
        search.search(index, 1, "x", detail="everything")


def test_a_new_version_of_the_tools_rebuilds_the_index(index: StubIndex) -> None:
    search = ToolSearch(HashingEmbedder())
    tools = catalogue()
    fewer = StubIndex.build(
        [(s.name, s.description) for s in index.servers], [t for t in tools if t.name != "write_file"]
    )
    assert "filesystem.write_file" in names(search.search(index, 1, "write_file", detail="name", limit=3))
    assert "filesystem.write_file" not in names(search.search(fewer, 2, "write_file", detail="name", limit=3))


def test_expansion_stemming_and_phrases() -> None:
    assert stem("invoices") == stem("invoiced") == stem("invoice")
    assert stem("directories") == stem("directory")
    weights = expand("sign off on a bill")
    assert weights["sign"] == 1.0 and 0 < weights["approv"] < 1 and "invoic" in weights
    assert "subscrib" in expand("sign someone up for the newsletter")
    assert "count" in expand("how many customers are there")
    assert "fil" in expand("show me what's inside config.yaml")


def test_lexical_ranking_works_without_an_embedder() -> None:
    index = stub_index()
    ranker = ToolRanker([(t, s.description) for s in index.servers for t in s.tools], None)
    assert ("billing", "approve_invoice") in [h.key for h in ranker.search("sign off on a bill before payment", 3)]
    assert ranker.search("", 3) == []
    assert {h.key[0] for h in ranker.search("invoice", 50, server="crm")} == {"crm"}
