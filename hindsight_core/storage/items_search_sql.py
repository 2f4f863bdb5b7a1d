"""SQL that reads generic items: listing, vector and hybrid search, namespace listing.

Pure builders over the tables of ``items_sql`` (schema, index, gets, writes); the
statements use its :class:`~.items_sql.VectorSpec` so that every vector expression
matches the ANN index ``items_sql.ensure_index_sql`` builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from ..models import NS_SEPARATOR
from .experiences_sql import decay_multiplier
from .fulltext_sql import KEYWORD, bm25_ctes, bm25_exact_sql, bm25_sql
from .items_filters_sql import FilterSpec, filter_conditions
from .items_sql import ITEM_COLS, T, V, VectorSpec

# ---------------------------------------------------------------------- conditions


def prefix_condition(n_labels: int, column: str = "i.ns") -> str:
    """Whole-label namespace prefix: ``:pfx`` itself or anything under ``:pfx + NS_SEPARATOR``."""
    if n_labels == 0:
        return "TRUE"
    return f"({column} = :pfx OR ({column} >= :pfx_lo AND {column} < :pfx_hi))"


def prefix_params(ns_key: str | None) -> dict[str, Any]:
    if not ns_key:
        return {}
    return {
        "pfx": ns_key,
        "pfx_lo": ns_key + NS_SEPARATOR,
        "pfx_hi": ns_key + chr(ord(NS_SEPARATOR) + 1),
    }


def _where(n_labels: int, filters: FilterSpec, omit_expired: bool, ns: str = "i.ns") -> str:
    conds = [prefix_condition(n_labels, ns), *filter_conditions(filters)]
    if omit_expired:
        conds.append("(i.expires_at IS NULL OR i.expires_at > CAST(:now AS timestamptz))")
    return " AND ".join(conds)


def _vectors_from(n_labels: int, filters: FilterSpec, omit_expired: bool, ns: str = "v.ns") -> str:
    """``FROM`` + ``WHERE`` over item vectors; items are joined only when a condition
    needs their columns (value filters, expiry). ``ns``: the expression the prefix
    condition tests (see :data:`UNINDEXED_NS`)."""
    if not filters and not omit_expired:
        return f"FROM {V} v WHERE {prefix_condition(n_labels, ns)}"
    joined = "i.ns" if ns == "v.ns" else ns  # i.ns = v.ns
    return (
        f"FROM {V} v JOIN {T} i ON i.ns = v.ns AND i.key = v.key "
        f"WHERE {_where(n_labels, filters, omit_expired, joined)}"
    )


# The full-text scans (keyword candidates, document-frequency counts) test the prefix in
# a form no index serves: in the generic plan PostgreSQL otherwise ANDs each full-text
# bitmap with the bitmap of the prefix's whole primary-key range (one scan per query
# term, linear in the prefix's size), as recall's keyword
# scan does too (``recall_sql``). ``ns`` is never NULL.
UNINDEXED_NS = "COALESCE({}, '')"

# The hub correction's mean direction (see hybrid_search_sql) is that of the searched
# prefix's vectors: the direction the searched texts share, which a hub (a generic text,
# near every query) lies close to. Their sum per namespace and dimension is kept by
# triggers (migration 0013), so the direction of any prefix is a sum of a few rows. It
# was the mean of the query's 40 nearest fields, which is the query's topic rather than
# the corpus's hub direction: where many texts are about the query (a LongMemEval
# haystack's evidence session), it pushed exactly those down (bench/HISTORY.md, "The
# hub correction's mean").
SUMS = "hindsight_item_vector_sums"


# ---------------------------------------------------------------------- search


@lru_cache(maxsize=256)
def list_sql(n_labels: int, filters: FilterSpec, omit_expired: bool) -> sa.TextClause:
    """Search without a query: newest update first."""
    return sa.text(
        f"SELECT {ITEM_COLS} FROM {T} i WHERE {_where(n_labels, filters, omit_expired)} "
        "ORDER BY i.updated_at DESC, i.ns, i.key LIMIT :limit OFFSET :offset"
    )


@lru_cache(maxsize=256)
def vector_search_sql(
    spec: VectorSpec, n_labels: int, filters: FilterSpec, omit_expired: bool, exact: bool = False
) -> sa.TextClause:
    """PostgresStore's ranking: best field similarity per item in the configured distance.

    The nearest ``:cand`` vectors are found through the ANN index (by an exact scan of
    the prefix when ``exact``, as in :func:`hybrid_search_sql`), then reduced to one row
    per item (its best field) and paged. An ivfflat index built on an empty table (at
    setup) has random list centers, and its iterative scan returns the rows of the
    nearest lists first: on a few dozen rows, ``:cand`` of them missed nearer ones.
    """
    return sa.text(
        f"""
        WITH scored AS (
            SELECT v.ns, v.key, {spec.distance_sql()} AS d
            {_vectors_from(n_labels, filters, omit_expired)} AND {spec.dims_predicate()}
            ORDER BY {spec.distance_sql()}{" + 0" if exact else ""} LIMIT :cand
        ), best AS (
            SELECT ns, key, min(d) AS d FROM scored GROUP BY ns, key
        )
        SELECT {ITEM_COLS}, {"1 - b.d" if spec.distance == "cosine" else "-b.d"} AS score
        FROM best b JOIN {T} i ON i.ns = b.ns AND i.key = b.key
        ORDER BY b.d, i.ns, i.key LIMIT :limit OFFSET :offset
        """
    )


@lru_cache(maxsize=256)
def hybrid_search_sql(
    spec: VectorSpec,
    n_labels: int,
    filters: FilterSpec,
    omit_expired: bool,
    keyword: bool,
    keyword_candidates: bool | None = None,
    scan_limit: int = 1000,
    exact: bool = False,
    hub: bool = False,
) -> sa.TextClause:
    """The core's fusion for items: semantic + keyword, bent by recency decay.

    Candidates: the ``:cand`` nearest vectors (ANN index) plus the ``:cand`` best
    full-text matches among at most ``scan_limit`` vectors matching ``:tsq_cand``
    (the query's terms minus those common in the table, see
    ``fulltext_sql.common_terms_sql``; none when ``keyword_candidates`` is false).
    Every candidate then gets both scores, from all of its fields in one join: per
    item, ``semantic`` = best cosine similarity of its fields (clamped to 0..1) and
    ``keyword`` = best BM25 of its fields against all of the query's terms, with the
    prefix's document frequencies and lengths (each field's vector row one document),
    as the share of the query's summed IDF it reaches (``fulltext_sql.KEYWORD``), a
    term found in one of the field's labels (``items.paths.labels``) counting with
    more than its own IDF (``fulltext_sql.LABEL_IDF_SHARE``);
    ``relevance`` = ``w_sem * semantic + w_kw * keyword`` divided by the same for an
    item whose field is the query's text (semantic 1, keyword
    ``fulltext_sql.bm25_exact_sql``), and ``final = relevance * decay ** score_weight``
    with ``decay`` the record decay applied to the time since the item's last update.
    Items whose fused ``w_sem * semantic + w_kw * keyword`` is below ``:min_relevance``
    are left out.

    ``hub``: each field's cosine is first corrected by ``:w_hub`` times its closeness to
    the mean direction ``mu`` of the prefix's fields (from their sums, :data:`SUMS`: a
    text's mean similarity to them, how much of a hub it is there) less the query's,
    ``cos(q, v) - w_hub * (cos(v, mu) - cos(q, mu))``
    (``embeddings.profiles.ModelProfile.hub_correction``): candidates are found by the
    plain cosine, the correction reorders them, and a field equal to the query keeps
    a semantic score of 1.

    The division is by one number per query, so it changes no order: it makes an exact
    match score 1 (as PostgresStore's cosine does) for every query. Undivided, the
    keyword score's floor (``fulltext_sql.MIN_MASS_SHARE``) held an exact match of a
    query whose only term is in two of five fields to 0.89 and one of a term in one
    field at 1.0 (LangGraph's ``test_embed_with_path``).

    The scan bound keeps search fast when a query word occurs in most items: ranking
    every full-text match made hybrid search several times slower than a vector
    search, and grew linearly with the table. ``exact`` (decided by
    ``scan_sql.items_exact_scan_sql``, cached by ``memory.scan.ScanChoice``): the semantic
    candidates come from an exact scan of the prefix, without the ANN index (``+ 0``
    keeps the planner off it), as a filtered HNSW scan (iterative, ``strict_order``)
    would walk most of the index to find ``:cand`` rows of a small prefix, and stop
    short at ``hnsw.max_scan_tuples`` (LongMemEval: a ~500-turn namespace of a 29k-row
    table).
    """
    source = _vectors_from(n_labels, filters, omit_expired)
    kw_source = _vectors_from(n_labels, filters, omit_expired, UNINDEXED_NS.format("v.ns"))
    if keyword_candidates is None:
        keyword_candidates = keyword
    # An exact search compares every row of the prefix (at most scan_sql.EXACT_SCAN_MAX unless
    # pinned): its keyword candidates are all of those rows that match any query term,
    # not at most ``scan_limit`` matches (in plan order) of the terms ANALYZE's
    # statistics do not call common, so that they are the same whether or when
    # (auto)analyze ran. The prefix is tested in its indexed form: the planner may read
    # the prefix's rows rather than each term's matches in the whole table.
    matches = (
        f"""SELECT v.ns, v.key, v.search_tsv
                {source} AND v.search_tsv @@ CAST(:tsq_cand AS tsquery)"""
        if exact
        else f"""SELECT v.ns, v.key, v.search_tsv
                {kw_source} AND v.search_tsv @@ CAST(:tsq_cand AS tsquery)
                LIMIT {int(scan_limit)}"""
    )
    kw = (
        f"""kw AS (
            SELECT m.ns, m.key FROM ({matches}) m
            GROUP BY m.ns, m.key
            ORDER BY max({bm25_sql("m.search_tsv", labels=True)}) DESC NULLS LAST, m.ns, m.key
            LIMIT :cand)"""
        if keyword and keyword_candidates
        else "kw AS (SELECT NULL::text AS ns, NULL::text AS key WHERE FALSE)"
    )
    rank = bm25_sql("v.search_tsv", labels=True) if keyword else "0::float8"
    stats = ""
    if keyword:
        stats = (
            bm25_ctes(
                V,
                docs=prefix_condition(n_labels, UNINDEXED_NS.format("d.ns")),
                stats=prefix_condition(n_labels, "s.ns"),
                tbl="i",
                own=prefix_condition(n_labels, "d.ns"),
                key="d.ns, d.key, d.field",
                labels=True,
            )
            + ","
        )
    cosine = VectorSpec(spec.dims, "cosine", "vector")
    similarity = cosine.similarity_sql()
    hub_cte = ""
    if hub:
        # cos(v, mu) - cos(q, mu) = d(q, mu) - d(v, mu) in cosine distances (a sum has
        # the mean's direction); an empty prefix (mu NULL): no correction.
        hub_cte = f"""hub AS MATERIALIZED (
            SELECT h.mu, {cosine.query()} <=> h.mu AS dq FROM (
                SELECT sum(s.total) AS mu FROM {SUMS} s
                WHERE {prefix_condition(n_labels, "s.ns")} AND s.dims = {int(spec.dims)}
                    AND s.n > 0) h
        ),"""
        similarity = (
            f"({similarity} - :w_hub * COALESCE((SELECT dq FROM hub)"
            f" - ({cosine.expr()} <=> (SELECT mu FROM hub)), 0))"
        )
    return sa.text(
        f"""
        WITH {stats} sem AS (
            SELECT v.ns, v.key {source} AND {spec.dims_predicate()}
            ORDER BY {spec.distance_sql()}{" + 0, v.ns, v.key, v.field" if exact else ""}
            LIMIT :cand
        ), {hub_cte} {kw},
        cand AS (SELECT ns, key FROM sem UNION SELECT ns, key FROM kw),
        ranked AS (
            SELECT c.ns, c.key,
                max({similarity}) FILTER (WHERE {spec.dims_predicate()}) AS sim,
                max({rank}) AS kw_rank
            FROM cand c JOIN {V} v ON v.ns = c.ns AND v.key = c.key
            GROUP BY c.ns, c.key
        ), scored AS (
            SELECT ns, key, GREATEST(0, COALESCE(sim, 0)) AS semantic,
                {KEYWORD.format(bm25="kw_rank") if keyword else "0::float8"} AS keyword
            FROM ranked
        ), exact AS (
            SELECT COALESCE(NULLIF(:w_sem + :w_kw * {bm25_exact_sql() if keyword else "0"}, 0), 1)
                AS fusion
        ), fused AS (
            SELECT s.semantic, s.keyword, :w_sem * s.semantic + :w_kw * s.keyword AS fusion,
                {decay_multiplier("i.updated_at")} AS decay,
                {", ".join(c.strip() for c in ITEM_COLS.split(","))}
            FROM scored s JOIN {T} i ON i.ns = s.ns AND i.key = s.key
        )
        SELECT f.*, f.fusion / x.fusion AS relevance,
            f.fusion / x.fusion * power(GREATEST(f.decay, 1e-6), :score_weight) AS final
        FROM fused f CROSS JOIN exact x WHERE f.fusion >= :min_relevance
        ORDER BY final DESC, f.ns, f.key LIMIT :limit OFFSET :offset
        """
    )


# ---------------------------------------------------------------------- namespaces


@lru_cache(maxsize=256)
def list_namespaces_sql(
    n_conditions: int, max_depth: int | None, omit_expired: bool
) -> sa.TextClause:
    """Distinct namespaces matching regex conditions ``:re0..``, truncated to ``max_depth``.

    The namespaces are found by a loose index scan over the primary key (one probe per
    namespace, within ``[:lo, :hi)``), not by reading every item.
    """
    conds = [f"t.ns ~ :re{i}" for i in range(n_conditions)]
    if omit_expired:
        conds.append(
            f"EXISTS (SELECT 1 FROM {T} x WHERE x.ns = t.ns AND (x.expires_at IS NULL "
            "OR x.expires_at > CAST(:now AS timestamptz)))"
        )
    ns = "t.ns"
    if max_depth is not None:
        ns = (
            f"array_to_string((string_to_array(t.ns, CAST(:sep AS text)))[1:{int(max_depth)}],"
            " CAST(:sep AS text))"
        )
    return sa.text(
        f"""
        WITH RECURSIVE t(ns) AS (
            (SELECT ns FROM {T} WHERE ns >= :lo AND ns < :hi ORDER BY ns LIMIT 1)
            UNION ALL
            SELECT (SELECT i.ns FROM {T} i WHERE i.ns > t.ns AND i.ns < :hi
                    ORDER BY i.ns LIMIT 1)
            FROM t WHERE t.ns IS NOT NULL
        )
        SELECT DISTINCT {ns} COLLATE "C" AS ns FROM t
        WHERE t.ns IS NOT NULL {"".join(" AND " + c for c in conds)}
        ORDER BY 1 LIMIT :limit OFFSET :offset
        """
    )


def namespace_range(conditions: Sequence[tuple[str, tuple[str, ...]]]) -> dict[str, str]:
    """The key range that can hold matches: the literal leading labels of a prefix."""
    for kind, labels in conditions:
        if kind != "prefix":
            continue
        lead: list[str] = []
        for label in labels:
            if label == "*":
                break
            lead.append(label)
        if lead:
            p = NS_SEPARATOR.join(lead)
            return {"lo": p, "hi": p + chr(ord(NS_SEPARATOR) + 1)}
    return {"lo": "", "hi": "\U0010ffff"}
