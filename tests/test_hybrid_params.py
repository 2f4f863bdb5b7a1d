"""What a recall and an item search bind, built by one pure function (no database).

``storage/hybrid_params.py`` builds the hybrid search's parameters for records'
recall (``recall_params``, fed to ``recall_sql.search_sql``) and for items' search
(``hybrid_params``, fed to ``items_search_sql.hybrid_search_sql``); these tests check,
without connecting, that every parameter the statements bind is given and what each
is worth.

Internals: the pure parameter builders (``storage.hybrid_params``,
``items_filters_sql``) and the statements they feed, on purpose.
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime

import pytest

from hindsight_core import Settings
from hindsight_core.items import ItemIndex
from hindsight_core.items.batch_plan import parse_filter
from hindsight_core.memory.scope import read_set
from hindsight_core.storage import items_search_sql, recall_sql
from hindsight_core.storage.hybrid_params import hybrid_params, recall_params
from hindsight_core.storage.items_filters_sql import filter_params
from hindsight_core.storage.vectors import Float4Array
from hindsight_core.text import tsquery_terms

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = Settings(
    database_url="postgresql://unused@localhost/none",
    semantic_weight=0.6,
    score_weight=0.5,
    min_relevance=0.2,
)


def _binds(statement: object) -> set[str]:
    return set(statement.compile().params)  # type: ignore[attr-defined]


def _recall(**overrides: object) -> dict[str, object]:
    terms = tsquery_terms("retry the payment when rate limits hit")
    options: dict[str, object] = {
        "ns": "acme\x1fagent",
        "scene": "billing",
        "vector": [0.5, -0.25, 1.0],
        "terms": terms,
        "common": {"retry": 0.3},
        "rare": [t for t in terms if t != "retry"],
        "whole_query": True,
        "keyword_weight": 0.09,
        "top_k": 7,
        "now": NOW,
        "filters": [True, "failure"],
        "include_superseded": 1,
    }
    options.update(overrides)
    return recall_params(SETTINGS, **options)  # type: ignore[arg-type]


# A read set of an exact namespace and a prefix, as ``memory/read_flows.py``'s
# ``_search_flow`` passes it: ``ns`` None, the set's parameters as ``read_set``.
READ_SET = read_set(["acme/agent", "acme/team/*"]).params()


@pytest.mark.parametrize(
    ("scene", "keyword", "candidates", "relevance", "exact", "many"),
    list(itertools.product([False, True], repeat=6)),
)
def test_every_recall_statement_gets_all_its_parameters(
    scene: bool, keyword: bool, candidates: bool, relevance: bool, exact: bool, many: bool
) -> None:
    statement = recall_sql.search_sql(
        3,
        scene=scene,
        keyword=keyword,
        filters=("critical", "outcome"),
        candidates=20,
        keyword_candidates=candidates,
        min_relevance=relevance,
        exact=exact,
        many=many,
    )
    params = _recall(ns=None, read_set=READ_SET) if many else _recall()
    assert _binds(statement) - set(params) == set()


def test_a_read_sets_recall_binds_the_set_instead_of_the_namespace() -> None:
    """Across namespaces the statement reads the set's three arrays, never ``:ns``
    (which ``recall_params`` then leaves out)."""
    for keyword, exact in itertools.product([False, True], repeat=2):
        statement = recall_sql.search_sql(
            3, scene=True, keyword=keyword, filters=(), candidates=20, exact=exact, many=True
        )
        assert {"ns_exact", "ns_lo", "ns_hi"} <= _binds(statement)
        assert "ns" not in _binds(statement)
    params = _recall(ns=None, read_set=READ_SET)
    assert "ns" not in params
    assert {k: params[k] for k in READ_SET} == READ_SET


def test_recall_parameters_carry_the_settings_and_the_query() -> None:
    params = _recall()
    assert (params["ns"], params["scene"], params["top_k"]) == ("acme\x1fagent", "billing", 7)
    assert (params["w_sem"], params["w_kw"], params["score_weight"]) == (0.6, 0.09, 0.5)
    assert params["min_relevance"] == 0.2 and params["kw_whole"] is True
    assert (params["f0"], params["f1"]) == (True, "failure") and "f2" not in params
    assert params["include_superseded"] is True  # a bool, whatever was passed
    assert params["now"] == NOW and params["decay_factor"] == SETTINGS.decay_factor
    assert params["decay_period_s"] == SETTINGS.decay_period_days * 86400.0
    assert params["qvec"].payload == Float4Array([0.5, -0.25, 1.0]).payload  # type: ignore[attr-defined]
    # keyword candidates from the rare terms only; every term scored
    assert "retry" not in str(params["tsq_cand"]) and "payment" in str(params["tsq_cand"])
    assert "retry" in str(params["kw_tsq"])
    assert _recall(rare=[])["tsq_cand"] is None


def _item_fusion(terms: list[str]) -> dict[str, object]:
    """An item search's fusion parameters: every term a keyword candidate, no common ones,
    and the terms' label queries (``items/flows.py``)."""
    return hybrid_params(
        SETTINGS,
        terms=terms,
        common={},
        candidates=terms,
        whole_query=False,
        keyword_weight=0.09,
        now=NOW,
        labels=True,
    )


def test_items_search_binds_the_same_fusion_parameters() -> None:
    """Items' hybrid statement binds every parameter ``hybrid_params`` builds, with the
    same values recall gets from the same settings; only items bind the terms' label
    queries (records have no labels)."""
    spec = ItemIndex(dims=3).spec
    statement = items_search_sql.hybrid_search_sql(spec, 2, (), False, True, True)
    terms = tsquery_terms("answer style")
    fusion = _item_fusion(terms)
    assert set(fusion) <= _binds(statement)
    recall = _recall(terms=terms, common={}, rare=terms, whole_query=False)
    assert set(fusion) - set(recall) == {"kw_ltsq"}
    assert {k: recall[k] for k in fusion if k != "kw_ltsq"} == {
        k: v for k, v in fusion.items() if k != "kw_ltsq"
    }
    ltsq = str(fusion["kw_ltsq"])
    assert "'answer':A" in ltsq and "'styles':A" in ltsq, ltsq
    assert re.fullmatch(r"[^']*('[a-z]+':A[^']*)+", ltsq), "every form restricted to labels"


def _item_search(*, prefix: str, flt: object, hub: float) -> dict[str, object]:
    """What ``items/flows.py``'s ``_search`` binds for a hybrid search (its names and
    sources: page, prefix, filters, query vector, candidates, fusion, hub weight)."""
    spec_f, values = parse_filter(flt)
    return {
        "limit": 5,
        "offset": 0,
        "now": NOW,
        **items_search_sql.prefix_params(prefix),
        **filter_params(spec_f, values),
        "qvec": [0.5, -0.25, 1.0],
        "cand": 40,
        "kw_qlen": 2,
        **_item_fusion(tsquery_terms("answer style")),
        "w_hub": hub,
    }


@pytest.mark.parametrize(
    ("labels", "omit_expired", "keyword", "candidates", "exact", "hub"),
    [(n, *flags) for n in (0, 2) for flags in itertools.product([False, True], repeat=5)],
)
def test_every_items_hybrid_statement_gets_all_its_parameters(
    labels: int, omit_expired: bool, keyword: bool, candidates: bool, exact: bool, hub: bool
) -> None:
    flt = {"lang": "en", "stars": {"$gte": 3}}
    spec_f, _ = parse_filter(flt)
    statement = items_search_sql.hybrid_search_sql(
        ItemIndex(dims=3).spec,
        labels,
        spec_f,
        omit_expired,
        keyword,
        candidates,
        1000,
        exact,
        hub,
    )
    prefix = "\x1f".join(["acme", "docs"][:labels])
    params = _item_search(prefix=prefix, flt=flt, hub=0.3 if hub else 0.0)
    assert _binds(statement) - set(params) == set()
    # the hub weight is bound only where the correction is (``w_hub > 0``)
    assert ("w_hub" in _binds(statement)) is hub
