"""SQL for recall: hybrid search over experience records in one statement.

Semantic candidates come from the HNSW index (or an exact scan of a small namespace,
see ``scan_sql``), keyword candidates from a bounded full-text scan; both are scored,
fused and bent by the decayed score here. The record statements and the pieces this
builds on (columns, decay, vector expressions) are in ``experiences_sql``.
"""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa

from .experiences_sql import COLUMNS, DECAYED, FILTERABLE, T, ann, scene_condition, vec
from .fulltext_sql import KEYWORD, bm25_ctes, bm25_sql
from .sharing_sql import NS_SET


@lru_cache(maxsize=64)
def search_sql(
    dim: int,
    *,
    scene: bool,
    keyword: bool,
    filters: tuple[str, ...],
    candidates: int,
    scan_limit: int = 1000,
    keyword_candidates: bool | None = None,
    min_relevance: bool = False,
    exact: bool = False,
    many: bool = False,
) -> sa.TextClause:
    """Hybrid recall in one round trip.

    ``exact``: semantic candidates by an exact scan of the namespace, ordered by the
    full-precision distance, which no index serves (see ``scan_sql``);
    else ordered by the half-precision distance the HNSW index serves. Either way the
    scores are computed only for the rows the ``LIMIT`` keeps, and the query vector is
    converted from its ``real[]`` parameter once per statement, in an InitPlan: in
    PostgreSQL's generic plan the cast of a parameter is not folded and ran per row (an
    exact scan of 1,000 rows took 7.8 ms, now 1.3). The keyword
    candidates' tsquery is a sub-select, whose selectivity the planner does not
    estimate from the value: a custom plan for rare terms looked cheaper than the
    generic one, so PostgreSQL planned every call (~0.3 ms of a 1.3 ms recall at 100k
    records); now it can keep one generic plan when the namespace's estimate does
    not change the plan either (one namespace, or namespaces of similar sizes).

    Candidates are the ``candidates`` nearest by vector plus the best
    ``candidates`` by BM25 among at most ``scan_limit`` records matching
    ``:tsq_cand`` (the query's terms minus those common in the table, see
    :func:`fulltext_sql.common_terms_sql`); each candidate then gets both scores: ``semantic``
    (cosine similarity, clamped to 0..1) and ``keyword`` (BM25 against all of the
    query's terms with the namespace's document frequencies and lengths, as the share
    of the query's summed IDF it reaches: ``fulltext_sql.KEYWORD``). They are fused
    with the configured weights and bent by the decayed score.

    ``min_relevance``: hits whose fused relevance is below ``:min_relevance`` are
    left out (``Settings.min_relevance``).

    ``many``: the records of a read set's namespaces (``:ns_exact``, ``:ns_lo``,
    ``:ns_hi``: ``sharing_sql.NS_SET``) instead of ``:ns``'s, ranked as one
    collection: BM25's document counts, lengths and frequencies are the union's, so a
    word rare in one namespace and common in the others scores as common (its IDF in
    the set read), whichever namespace a hit comes from.

    The scan bound keeps recall in milliseconds when a query term occurs in tens of
    thousands of records: ranking every match of "how" or "file" cost 35 ms at 10k
    records and grew linearly.
    """
    # Namespace and scene reach the planner as InitPlan parameters, not as values: with
    # namespaces of different sizes in the table, their estimated selectivity made every
    # custom plan look cheaper than the generic one, so PostgreSQL planned each call
    # (~0.4 ms; at 100k records with two small tenants beside: 1.07 -> 0.53 ms per
    # statement). The keyword scan tests the namespace in a form no index serves
    # (``COALESCE``): the generic plan would otherwise AND the full-text bitmap with the
    # namespace's whole index range (5 ms in a 100k-record namespace).
    ns = "(SELECT CAST(:ns AS text))"
    where = [f"e.ns = {ns}", "e.archived_at IS NULL"]
    # A read set (``many``): its namespaces' keys, resolved once (the CTE ``kw_nss``).
    nss = "CAST((SELECT n.nss FROM kw_nss n) AS text[])"
    if many:
        where[0] = f"e.ns = ANY({nss})"
    # current versions only, unless ``:include_superseded`` (docs/versions.md)
    where.append("(e.superseded_by IS NULL OR CAST(:include_superseded AS boolean))")
    if scene:
        where.append(scene_condition("(SELECT CAST(:scene AS text))"))
    for i, name in enumerate(filters):
        column, kind = FILTERABLE[name]
        where.append(f"{column} = CAST(:f{i} AS {'boolean' if kind == 'bool' else 'text'})")
    cond = " AND ".join(where)
    own_ns = f"= ANY({nss})" if many else "= :ns"
    kw_cond = " AND ".join([f"COALESCE(e.ns, '') {own_ns}", *where[1:]])
    qv = vec(dim, f"SELECT CAST(:qvec AS vector({int(dim)}))")
    nearest = f"{vec(dim)} <=> {qv}" if exact else f"{ann(dim)} <=> {ann(dim, qv)}"
    if keyword_candidates is None:
        keyword_candidates = keyword
    # Both scores are computed where a candidate's row is read: semantic candidates
    # straight from the HNSW scan, keyword candidates from the full-text scan that
    # found them (re-joining every candidate to the table cost ~0.1-0.2 ms per recall),
    # by the same expressions: a record found by both comes out of both arms with
    # the same scores, and ``DISTINCT ON`` keeps one (an anti-join against the
    # semantic arm needed it as a CTE, materialized, and a hashed sub-plan).
    scored = (
        f"{', '.join('e.' + c.strip() for c in COLUMNS.split(','))}, "
        f"{DECAYED} AS decayed_score, GREATEST(0, 1 - ({vec(dim)} <=> {qv})) AS semantic"
    )
    rank = bm25_sql("e.search_tsv") if keyword else "0::float8"
    rows = f"SELECT * FROM {T} e WHERE {cond}"
    if many and exact:
        # Each namespace's rows through its own index range: with the set's keys an
        # array (an InitPlan), the planner estimates ``e.ns = ANY(...)`` to hold most
        # of the table and scanned all of it (22k rows for a set of 1k among them);
        # ``OFFSET 0`` keeps the lateral sub-select from being pulled up into a join,
        # which had the same scan.
        rows = (
            f"SELECT e.* FROM unnest({nss}) AS s(ns) CROSS JOIN LATERAL ("
            f"SELECT * FROM {T} e WHERE e.ns = s.ns AND {' AND '.join(where[1:])} OFFSET 0) e"
        )
    ranked = f"""SELECT {scored}, {rank} AS kw_rank FROM (
                {rows} ORDER BY {nearest} LIMIT {int(candidates)}
            ) e"""
    both = keyword and keyword_candidates
    if both:
        # A keyword candidate keeps the score it was ranked by (``kw_rank``).
        ranked += f"""
            UNION ALL
            SELECT {scored}, e.kw_rank FROM (
                SELECT m.*, {bm25_sql("m.search_tsv")} AS kw_rank FROM (
                    SELECT * FROM {T} e
                    WHERE {kw_cond} AND e.search_tsv @@ (SELECT CAST(:tsq_cand AS tsquery))
                    LIMIT {int(scan_limit)}) m
                ORDER BY kw_rank DESC NULLS LAST
                LIMIT {int(candidates)}) e"""
    ctes = [f"kw_nss AS MATERIALIZED (SELECT {NS_SET} AS nss)"] if many else []
    if keyword:
        ctes.append(
            bm25_ctes(
                T,
                docs=f"COALESCE(d.ns, '') {own_ns} AND d.archived_at IS NULL",
                stats=f"s.ns = ANY({nss})" if many else f"s.ns = {ns}",
                tbl="e",
                own=f"d.ns {own_ns if many else '= ' + ns} AND d.archived_at IS NULL",
                key="d.ns, d.id",
            )
        )
    stats = "WITH " + ", ".join(ctes) if ctes else ""
    keyword_score = KEYWORD.format(bm25="kw_rank") if keyword else "0::float8"
    return sa.text(
        f"""
        {stats}
        SELECT {"DISTINCT ON (final, id)" if both else ""} {COLUMNS}, decayed_score, semantic,
            keyword, :w_sem * semantic + :w_kw * keyword AS relevance,
            (:w_sem * semantic + :w_kw * keyword)
                * power(GREATEST(decayed_score, 1e-6), :score_weight) AS final
        FROM (SELECT *, {keyword_score} AS keyword FROM ({ranked}) ranked OFFSET 0) fused
        {"WHERE :w_sem * semantic + :w_kw * keyword >= :min_relevance" if min_relevance else ""}
        ORDER BY final DESC, id LIMIT :top_k
        """
    )
