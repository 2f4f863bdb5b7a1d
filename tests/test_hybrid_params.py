"""What a recall and an item search bind, built by one pure function (no database).

``storage/hybrid_params.py`` builds the hybrid search's parameters for records'
recall (``recall_params``, fed to ``recall_sql.search_sql``) and for items' search
(``hybrid_params``, fed to ``items_search_sql.hybrid_search_sql``); these tests check,
without connecting, that every parameter the statements bind is given and what each
is worth.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from hindsight_core import Settings
from hindsight_core.items import ItemIndex
from hindsight_core.storage import items_search_sql, recall_sql
from hindsight_core.storage.hybrid_params import hybrid_params, recall_params
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


@pytest.mark.parametrize(
    ("scene", "keyword", "candidates", "relevance", "exact"),
    list(itertools.product([False, True], repeat=5)),
)
def test_every_recall_statement_gets_all_its_parameters(
    scene: bool, keyword: bool, candidates: bool, relevance: bool, exact: bool
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
    )
    assert _binds(statement) - set(_recall()) == set()


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


def test_items_search_binds_the_same_fusion_parameters() -> None:
    """Items' hybrid statement binds every parameter ``hybrid_params`` builds, with the
    same values recall gets from the same settings."""
    spec = ItemIndex(dims=3).spec
    statement = items_search_sql.hybrid_search_sql(spec, 2, (), False, True, True)
    terms = tsquery_terms("answer style")
    fusion = hybrid_params(
        SETTINGS,
        terms=terms,
        common={},
        candidates=terms,
        whole_query=False,
        keyword_weight=0.09,
        now=NOW,
    )
    assert set(fusion) <= _binds(statement)
    recall = _recall(terms=terms, common={}, rare=terms, whole_query=False)
    assert {k: recall[k] for k in fusion} == fusion
