"""Hybrid item search: an exact match scores 1 for every query, orders unchanged.

LangGraph's own store suite (``test_embed_with_path``) asks that two items holding the
query's text score equal whichever query found them; with BM25's keyword floor
(``fulltext_sql.MIN_MASS_SHARE``) a query term in two of five fields held its exact
matches to 0.89 while a term in one field scored 1.0.
"""

from __future__ import annotations

import pytest

from hindsight_adapters.langgraph import HindsightStore
from tests._lg_store_util import DIMS, char_embed

DOCS = {
    # three indexed fields of b, two of a (f0 missing): five field rows
    "a": {"f1": "xxx", "f2": "yyy", "f3": "zzz"},
    "b": {"f0": "uuu", "f1": "vvv", "f2": "www", "f3": "xxx"},
}


@pytest.fixture
def store(fresh_db: str) -> HindsightStore:
    index = {"dims": DIMS, "embed": char_embed, "fields": ["f0", "f1", "f3"]}
    with HindsightStore.from_conn_string(fresh_db, index=index) as store:
        for key, value in DOCS.items():
            store.put(("t",), key, value)
        yield store


async def test_exact_matches_score_one_whatever_the_terms_idf(store: HindsightStore) -> None:
    shared = store.search(("t",), query="xxx")  # a.f1 and b.f3: df 2 of 5
    assert {h.key for h in shared} == {"a", "b"}
    assert [h.score for h in shared] == pytest.approx([1.0, 1.0], abs=1e-3)
    for query, key in (("uuu", "b"), ("zzz", "a")):  # df 1 of 5
        for hits in (store.search(("t",), query=query), await store.asearch(("t",), query=query)):
            assert hits[0].key == key and hits[0].score == pytest.approx(1.0, abs=1e-3)
            assert hits[1].score < hits[0].score
    unindexed = store.search(("t",), query="www")  # b.f2 is not indexed
    assert all(h.score < 0.99 for h in unindexed)


def test_one_divisor_per_query_keeps_order_and_breakdown(store: HindsightStore) -> None:
    store.put(("t",), "c", {"f1": "xxx yyy qqq rrr"})
    hits = store.search(("t",), query="xxx yyy")
    ratios = set()
    for h in hits:
        b = h.breakdown
        assert b.final == pytest.approx(b.relevance * b.decay**store.settings.score_weight)
        fusion = 0.7 * b.semantic + 0.3 * b.keyword
        ratios.add(round(fusion / b.relevance, 9))
    assert len(ratios) == 1  # one divisor: the order is the undivided fusion's
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
