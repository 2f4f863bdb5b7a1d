"""The statement parameters of a hybrid search, built once for both searches.

Records' recall (``recall_sql.search_sql``) and items' hybrid search
(``items_search_sql.hybrid_search_sql``) fuse a semantic and a BM25 keyword score
(``fulltext_sql``) and bend the fusion by the decayed score, with the same weights
and the same keyword parameters: :func:`hybrid_params` builds those, and
:func:`recall_params` a recall's whole parameter set. Both are pure (no I/O): what a
search will bind can be checked without a database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import fulltext_sql as fts
from .experiences_sql import params_for_decay
from .vectors import vector_param

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["hybrid_params", "recall_params"]


def hybrid_params(
    settings: Settings,
    *,
    terms: Sequence[str],
    common: Mapping[str, float],
    candidates: Sequence[str],
    whole_query: bool,
    keyword_weight: float,
    now: datetime,
    labels: bool = False,
) -> dict[str, Any]:
    """The fusion's parameters: keyword candidates and BM25 terms, the weights, the
    relevance floor and the decay at ``now``.

    Args:
        terms: the query's terms (``text.tsquery_terms``).
        common: the terms too common to generate candidates, with their share.
        candidates: the terms whose matches are keyword candidates (``tsq_cand``).
        whole_query: the keyword score is a share of the whole query's IDF
            (``fulltext_sql.bm25_params``).
        keyword_weight: the keyword side's weight (``embeddings.profiles.keyword_weight``).
        labels: the terms' queries restricted to labels too (item search:
            ``fulltext_sql.bm25_params``).
    """
    return {
        "tsq_cand": fts.tsquery_literal(candidates),
        **fts.bm25_params(terms, common, whole_query=whole_query, labels=labels),
        "w_sem": settings.semantic_weight,
        "w_kw": keyword_weight,
        "score_weight": settings.score_weight,
        "min_relevance": settings.min_relevance,
        **params_for_decay(settings, now),
    }


def recall_params(
    settings: Settings,
    *,
    ns: str | None,
    scene: str | None,
    vector: Sequence[float],
    terms: Sequence[str],
    common: Mapping[str, float],
    rare: Sequence[str],
    whole_query: bool,
    keyword_weight: float,
    top_k: int,
    now: datetime,
    filters: Sequence[object] = (),
    include_superseded: bool = False,
    read_set: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What ``recall_sql.search_sql`` binds: :func:`hybrid_params` (the ``rare`` terms
    generate keyword candidates), the namespace (``ns``, or for a search across
    namespaces the ``read_set``'s keys, ``sharing_sql.NS_SET``'s parameters), scene,
    query vector, ``top_k``, the filters' values as ``f0``, ``f1``, ... (in the
    statement's filter order) and whether old versions of lessons are searched too
    (docs/versions.md)."""
    params: dict[str, Any] = {
        **({"ns": ns} if read_set is None else read_set),
        "scene": scene,
        "qvec": vector_param(vector),
        "top_k": top_k,
        "include_superseded": bool(include_superseded),
        **hybrid_params(
            settings,
            terms=terms,
            common=common,
            candidates=rare,
            whole_query=whole_query,
            keyword_weight=keyword_weight,
            now=now,
        ),
    }
    for i, value in enumerate(filters):
        params[f"f{i}"] = value
    return params
