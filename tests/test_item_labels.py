"""Item search counts a query term found in an item's label (a short leaf of its value:
who said it, a role, a tag) as more specific than its document frequency says.

Internals: ``storage.fulltext_sql``'s BM25 constants, so that the expected scores are
computed by the test's own BM25 with the statement's numbers, on purpose.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from hindsight_core import CallableEmbedder, Memory, Settings
from hindsight_core.items import ItemIndex, Items, PutItem
from hindsight_core.items.paths import LABEL_MAX_TOKENS, field_texts, indexed_fields, labels
from hindsight_core.storage.fulltext_sql import (
    K1,
    LABEL_IDF_SHARE,
    MIN_MASS_SHARE,
    B,
    term_query,
    tsvector_literal,
)
from hindsight_core.text import tokens

DIM = 4
# Keyword-only searches: every text gets the same vector.
EMB = CallableEmbedder(lambda texts: np.ones((len(texts), DIM)), dim=DIM, model_name="ones-4")
TAG = uuid.uuid4().hex[:6]
ANN, BOB, POTTERY = f"ann{TAG}", f"bob{TAG}", f"pottery{TAG}"


def test_labels_are_the_short_leaves_of_a_structured_value() -> None:
    value = {
        "speaker": "Ann Lee",
        "text": "I went to the pottery class again and it went well",
        "tags": ["pottery", "weekend plans"],
        "meta": {"id": 42, "draft": False, "note": None},
        "date": "1:56 pm on 8 May, 2023",  # six tokens: text, not a label
    }
    assert labels(value) == {"ann", "lee", "pottery", "weekend", "plans", "42", "false"}
    assert LABEL_MAX_TOKENS == 3
    fields = {name: found for name, _, found in indexed_fields(value, ["$", "speaker", "tags"])}
    assert fields["$"] == labels(value)
    assert fields["speaker"] == frozenset(), "a field that is one string is the text itself"
    assert fields["tags"] == {"pottery", "weekend", "plans"}
    assert [(n, t) for n, t, _ in indexed_fields(value, ["$", "tags[*]"])] == field_texts(
        value, ["$", "tags[*]"]
    ), "the same fields and texts as field_texts"


def test_label_positions_carry_weight_a_and_label_queries_ask_for_it() -> None:
    assert tsvector_literal(["ann", "saw", "ann"], {"ann"}) == "'ann':1A,3A 'saw':2"
    assert tsvector_literal(["ann", "saw", "ann"]) == "'ann':1,3 'saw':2", "records: as before"
    forms = term_query("tags").split(" | ")
    assert "'tag'" in forms and "'tagging'" in forms
    assert term_query("tags", label=True).split(" | ") == [f + ":A" for f in forms]


@pytest.fixture
def keyword_only(fresh_db: str) -> Iterator[Settings]:
    yield Settings(database_url=fresh_db, semantic_weight=0.0, keyword_weight=1.0)


VALUES = {
    # Ann's own turn: long, so without labels its length costs it the first place.
    "k0": {
        "speaker": ANN,
        "text": f"I finally tried the {POTTERY} wheel again last week, went fine",
    },
    "k1": {"speaker": BOB, "text": f"you know {ANN} really loves her {POTTERY} class"},
    "k2": {"speaker": BOB, "text": "the weather is fine today, we could walk"},
    "k3": {"speaker": ANN, "text": "nothing much to tell about the garden this week"},
}
QUERY = f"{ANN} {POTTERY}"


def _expected(with_labels: bool) -> dict[str, float]:
    """BM25 with Lucene's IDF as ``fulltext_sql`` computes it (a term counts once, length
    in distinct terms), a label match counting its label IDF, as a share of the query's
    summed IDF (at least ``MIN_MASS_SHARE``'s, capped at 1)."""
    docs = {k: tokens(json.dumps(v, sort_keys=True)) for k, v in VALUES.items()}
    n = len(docs)
    avgdl = sum(len(set(d)) for d in docs.values()) / n
    terms = tokens(QUERY)
    idf = {}
    for t in terms:
        df = sum(t in d for d in docs.values())
        idf[t] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    top = math.log(1 + (n - 0.5) / 1.5)
    floor = max(1.0, MIN_MASS_SHARE * n)  # the summed IDF is at least this df's
    mass = max(sum(idf.values()), math.log(1 + (n - floor + 0.5) / (floor + 0.5)))
    out = {}
    for k, d in docs.items():
        found = labels(VALUES[k]) if with_labels else frozenset()
        w = sum(
            idf[t] + (LABEL_IDF_SHARE * (top - idf[t]) if t in found else 0)
            for t in terms
            if t in d
        )
        norm = (K1 + 1) / (1 + K1 * ((1 - B) + B * len(set(d)) / avgdl))
        out[k] = min(1.0, w * norm / mass)
    return out


def _search(settings: Settings, fields: tuple[str, ...], ns: tuple[str, ...]) -> dict[str, float]:
    mem = Memory(("labels",), settings=settings, embedder=EMB)
    items = Items(mem, index=ItemIndex(dims=DIM, fields=fields))
    items.batch([PutItem(ns, k, v) for k, v in VALUES.items()])
    hits = items.search(ns, query=QUERY, limit=10)
    mem.close()
    return {h.item.key: h.breakdown.keyword for h in hits if h.breakdown.keyword > 0}


def test_a_query_term_in_an_items_label_counts_more(keyword_only: Settings) -> None:
    """Ann's own turn ranks first for a query naming her, though Bob's shorter turn
    names her too; the scores are BM25's with her name's label IDF."""
    found = _search(keyword_only, ("$",), ("labels", "whole"))
    expected = _expected(with_labels=True)
    assert list(found) == ["k0", "k1", "k3"]
    for key, score in found.items():
        assert score == pytest.approx(expected[key], rel=1e-9), key
    plain = _expected(with_labels=False)
    assert plain["k1"] > plain["k0"], "without labels Bob's shorter turn would rank first"


def test_a_field_that_is_one_string_has_no_labels(keyword_only: Settings) -> None:
    """Indexing the text alone, the speaker is not in the field: plain BM25, and the
    shorter turn naming Ann ranks first."""
    found = _search(keyword_only, ("text",), ("labels", "text"))
    assert list(found)[:2] == ["k1", "k0"]
