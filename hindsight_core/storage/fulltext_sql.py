"""Full-text search pieces shared by experience recall and item search.

Text is tokenized in Python (``hindsight_core.text``) and reaches PostgreSQL as
tsvector / tsquery literals, so no parser configuration or extension is needed and
Chinese (CJK bigrams) is searchable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from ..text import word_forms

# BM25 (Robertson / Sparck Jones) with Lucene's IDF, ln(1 + (N - df + 0.5) / (df + 0.5))
# (Lucene's and Elasticsearch's BM25Similarity): term-frequency saturation k1 (Lucene's
# 1.2) and length normalisation b. On LoCoMo dev (bench_locomo.py, store keyword-only /
# hybrid R@10) b = 0.9 / 0.75 / 0.6 / 0.5 gave .592 / .595 / .605 / .607 and .654 / .655
# / .661 / .662; k1 1.5 instead of 1.2 .592 / .653 (at b 0.75, with rank_bm25's IDF).
# Lucene's IDF is positive for every term: rank_bm25's BM25Okapi, ln((N - df + 0.5) /
# (df + 0.5)), turns negative for a term in over half of the documents and lifts it to a
# quarter of the corpus's mean IDF, a mean over a namespace's whole vocabulary not at hand
# here, for which a fixed floor (0.05) stood in; with Lucene's no stand-in is needed
# (LongMemEval hybrid turn recall_all@5 .633 -> .667, LoCoMo and Chinese: bench/HISTORY.md).
K1 = 1.2
B = 0.5
# The keyword score's denominator is at least the IDF of a term in a tenth of the
# records (or in one, in a collection of fewer than ten): when the only query word
# found in the collection is a common one ("old", 一个), matching it scores its
# small share of that (ln 10 ≈ 2.3 in a large collection), not a full 1.
MIN_MASS_SHARE = 0.1


# A query term found in a label of an item (a name, a role, a tag: ``items.paths.labels``,
# stored with this tsvector weight) counts with an IDF this share of the way from its own
# to that of a term found in a single item (bm25_sql). How many items share a label says
# how much a match narrows the search, not how surely the item is about it: a question
# naming one of a conversation's two speakers asks about that speaker's turns, yet the
# name, in half of them, weighed least of its terms (bench/HISTORY.md, "Labels"). Items
# only: records have no labels.
LABEL_WEIGHT = "A"
LABEL_IDF_SHARE = 0.5


# A term found in more than this share of a table's rows does not generate keyword
# candidates either (Elasticsearch's common-terms ``cutoff_frequency`` rule): it says
# little about which row is meant, and ranking its matches was most of a small store's
# recall. Below ~10,000 rows this cut, not
# ``keyword_scan_limit``, decides. LongMemEval with each question's ~500 turns alone in
# the table: hybrid and vector-only metrics identical, keyword-only identical but one
# (session recall_all@10 0.883 -> 0.900), and hybrid search faster
# (bench/HISTORY.md, "Retrieval quality on LongMemEval").
COMMON_TERM_SHARE = 0.02

# Document frequencies of the query's uncommon terms are counted up to this many rows
# (a term that ANALYZE missed as common stops counting there: its IDF is then a bound).
# A namespace of at most this many live records has its common terms counted too, in
# one pass over its rows (see bm25_ctes).
DF_CAP = 2000
# A common term's share of the table stands for its share of a namespace only where the
# other namespaces hold at most this share of the term's rows (a namespace that is
# (nearly) the whole table): its document frequency is then off by at most that much.
FOREIGN_SHARE = 0.1


@lru_cache(maxsize=8)
def common_terms_sql(table: str) -> sa.TextClause:
    """Terms of ``table.search_tsv`` so frequent (from ANALYZE's statistics: in more
    than ``:limit`` rows, or in more than ``COMMON_TERM_SHARE`` of them) that ranking
    their matches would cost more than it tells, with the share of rows holding them;
    recall and item search leave them out of keyword candidate generation (they still
    count in the score, with a document frequency :func:`bm25_ctes` counts in small
    namespaces and takes from that share in a namespace that is nearly the whole
    table). Shared through ``memory.terms.CommonTerms``."""
    return sa.text(
        f"""
        SELECT m.term, m.freq FROM pg_stats s,
            unnest(CAST(CAST(s.most_common_elems AS text) AS text[]), s.most_common_elem_freqs)
                AS m(term, freq)
        WHERE s.schemaname = current_schema() AND s.tablename = '{table}'
          AND s.attname = 'search_tsv' AND m.term IS NOT NULL
          AND (m.freq > {COMMON_TERM_SHARE}
               OR m.freq * (SELECT GREATEST(c.reltuples, 0) FROM pg_class c
                            WHERE c.oid = CAST('{table}' AS regclass)) > :limit)
        """
    )


def tsvector_literal(tokens: list[str], labels: AbstractSet[str] = frozenset()) -> str:
    """A tsvector literal with positions, bypassing PostgreSQL's parser; the positions of
    a token in ``labels`` carry weight ``A`` (an item's labels, ``items.paths.labels``:
    :func:`bm25_sql` counts a query term found there as more specific), every other
    position PostgreSQL's default, ``D``. Weights change no match, length or count.

    Tokens come from ``text.tokens`` and hold only letters and digits, so they need
    no escaping; they are quoted anyway so that no token is read as an operator.
    """
    positions: dict[str, list[int]] = {}
    for pos, tok in enumerate(tokens[:16000], start=1):
        positions.setdefault(tok, []).append(min(pos, 16383))
    label = LABEL_WEIGHT + ","
    return " ".join(
        f"'{t}':{label.join(map(str, p[:256]))}{LABEL_WEIGHT}"
        if t in labels
        else f"'{t}':{','.join(map(str, p[:256]))}"
        for t, p in positions.items()
    )


def term_query(term: str, label: bool = False) -> str:
    """A query term as a tsquery literal matching any of its forms (``text.word_forms``:
    "painted" matches "paint", "painting", ...). BM25 counts the group as one term:
    one document frequency, one IDF, a match when a record holds any of the forms.
    ``label``: only where a form is a label (weight ``A``, :func:`tsvector_literal`)."""
    restrict = f":{LABEL_WEIGHT}" if label else ""
    return " | ".join(f"'{f}'{restrict}" for f in word_forms(term))


def tsquery_literal(terms: Sequence[str]) -> str | None:
    """An OR query over the terms (each by any of its forms), or ``None`` when none."""
    return " | ".join(term_query(t) for t in terms) or None


def common_share(term: str, common: Mapping[str, float]) -> float | None:
    """The share of the table's rows holding ``term`` by any of its forms, for the
    forms that are common (:func:`common_terms_sql`; their sum, at most 1), or ``None``
    when none is: an uncommon term, counted exactly."""
    shares = [common[f] for f in word_forms(term) if f in common]
    return min(1.0, sum(shares)) if shares else None


def rare_terms(terms: Sequence[str], common: Mapping[str, float]) -> list[str]:
    """The terms that generate keyword candidates: no form of them is common."""
    return [t for t in terms if common_share(t, common) is None]


def bm25_ctes(
    table: str, *, docs: str, stats: str, tbl: str, own: str, key: str, labels: bool = False
) -> str:
    """The CTE ``kw_idf``: one row per query term with its tsquery ``q``, document
    frequency ``df`` and IDF ``w``, and on every row the collection's average length
    ``avgdl`` and ``mass``, the summed IDF of the query's terms (of those that occur in
    the collection unless ``:kw_whole``, at least ``MIN_MASS_SHARE``'s IDF), for BM25
    over ``table`` (:func:`bm25_sql`).

    Args:
        table: the table holding ``search_tsv``, aliased ``d``.
        docs: the condition on ``d`` that says which rows are the collection (the
            namespace, live rows).
        stats: the condition on ``s`` (``hindsight_keyword_stats``) selecting the
            collection's counters, kept by triggers in the writers' transactions
            (migration 0009): exact for the statement's snapshot.
        tbl: the counters' table tag (``e``, ``i``).
        own: ``docs`` in a form an index on ``key`` serves (the namespace's own rows).
        key: the columns of that index, in its order.
        labels: each term also has ``lq``, its query restricted to labels
            (``:kw_ltsq``), and ``wl``, the IDF a label match counts with
            (:data:`LABEL_IDF_SHARE`; :func:`bm25_sql` with ``labels``).

    A term's document frequency is counted in the collection at query time through
    the GIN index, so it is exact for the statement's snapshot under any concurrent
    writes, deletes, merges or archiving. Counting a term common in the whole table
    (``:kw_freq`` not NULL: its share of the table's rows, from ANALYZE's statistics,
    see :func:`common_terms_sql`) that way would read thousands of rows, most of them
    other namespaces', so its document frequency is, in this order:

    - counted exactly when the collection has at most ``DF_CAP`` rows, so that a small
      collection's scores do not move with ANALYZE's statistics (they did when the
      estimate below came first: tests/test_reproducible_ranking.py): through the GIN
      index where the collection is (nearly) the whole table (see the next case: few
      rows of other namespaces hold the term), else in one pass over the collection's
      own rows through ``key``'s index for all such terms (``kw_own``, read only when a
      term needs it: materializing a lone tenant's rows on every recall was the cost
      of 1k-record recall in bench/README.md, "Recall latency");
    - its share of the table times the collection's size, where the collection is
      (nearly) the whole table: the rows of other namespaces (``reltuples`` minus the
      collection's) are at most ``FOREIGN_SHARE`` of the term's (one tenant per
      table, as bench_recall's: no cost added);
    - counted through the GIN index like an uncommon term when the table holds at
      most ``DF_CAP`` rows with it;
    - else that share of the collection's size: an estimate (a term in thousands of
      rows, in a namespace of thousands of records beside others).

    The share scaled to a small namespace was wrong both ways: a term in every record
    of a big tenant and in 3 of a small one's 10 got a near-zero IDF there, a term in 4
    of the 10 and few other rows a high IDF (tests/test_core_keyword.py). The ``ORDER
    BY`` of ``kw_own`` keeps a sequential scan out of its plan: the namespace's
    estimated share (a generic one: the namespace is an InitPlan parameter) is large
    when the table holds a few namespaces, and a scan of the whole table, cut by
    ``LIMIT`` only after the namespace's rows, then looked cheaper than the index.
    Parameters: :func:`bm25_params`.

    The term arrays reach the planner as InitPlan parameters: as values, ``unnest``'s
    row estimate was the query's number of terms (5 or so) in a custom plan but 10 in
    the generic one, whose counting sub-plans then looked twice as costly, so
    PostgreSQL planned every recall anew (more backend CPU than the statement's own
    run). ``OFFSET 0`` keeps the per-term
    counts in their sub-select: pulled up, the count was copied into each of the
    expressions that use ``df`` and ran once per copy.

    One CTE, the collection's constants on every row: each scalar sub-select
    (``(SELECT avgdl FROM ...)``) is a plan node of its own, set up on every execution,
    and one copied into several expressions runs once per copy. With a CTE each for
    the counters, the IDF and their sum, the recall statement had ~56 plan nodes
    (bench/HISTORY.md, "The recall statement's shape").
    """
    floor_d = f"GREATEST(1, {MIN_MASS_SHARE} * t.n)"
    rows = "(SELECT rows FROM kw_tab)"
    # The collection is (nearly) the whole table: other namespaces hold at most
    # FOREIGN_SHARE of the term's rows, so the GIN index finds few rows not its own.
    mostly_own = f"{rows} - st.n <= {FOREIGN_SHARE} * t.freq * {rows}"
    gin_count = (
        f"(SELECT count(*) FROM (SELECT 1 FROM {table} d"
        f" WHERE {docs} AND d.search_tsv @@ t.q LIMIT {DF_CAP}) x)"
    )
    # A label match's IDF: LABEL_IDF_SHARE of the way to a term in one row's (df 1).
    label_cols = label_pass = ""
    freq_arrays, columns = "(SELECT CAST(:kw_freq AS float8[]))", "q, freq"
    if labels:
        label_cols = f" t.lq, t.w + {LABEL_IDF_SHARE} * (ln(1 + (t.n - 0.5) / 1.5) - t.w) AS wl,"
        label_pass = " t.lq,"
        freq_arrays += ", (SELECT CAST(:kw_ltsq AS tsquery[]))"
        columns += ", lq"
    return f"""kw_tab AS (
            SELECT GREATEST(c.reltuples, 0) AS rows FROM pg_class c
            WHERE c.oid = CAST('{table}' AS regclass)
        ), kw_own AS MATERIALIZED (
            SELECT d.search_tsv FROM {table} d WHERE {own} ORDER BY {key} LIMIT {DF_CAP}
        ), kw_idf AS MATERIALIZED (
            SELECT t.q, t.df, t.w, t.avgdl,{label_cols}
                GREATEST(COALESCE(sum(t.w) FILTER (WHERE t.df > 0 OR :kw_whole) OVER (), 0),
                    ln(1 + (t.n - {floor_d} + 0.5) / ({floor_d} + 0.5)))
                    AS mass
            FROM (
                SELECT t.q, t.df, st.n, st.avgdl,{label_pass}
                    ln(1 + (st.n - LEAST(t.df, st.n) + 0.5) / (t.df + 0.5)) AS w
                FROM (
                    SELECT GREATEST(COALESCE(sum(s.docs), 0), 1)::float8 AS n,
                        GREATEST(COALESCE(sum(s.total_len)::float8 / NULLIF(sum(s.docs), 0), 1),
                                 1) AS avgdl
                    FROM hindsight_keyword_stats s WHERE s.tbl = '{tbl}' AND {stats}
                ) st CROSS JOIN LATERAL (
                    SELECT t.q,{label_pass} CASE
                        WHEN t.freq IS NOT NULL AND st.n <= {DF_CAP} AND {mostly_own}
                        THEN {gin_count}
                        WHEN t.freq IS NOT NULL AND st.n <= {DF_CAP}
                        THEN (SELECT count(*) FROM kw_own o WHERE o.search_tsv @@ t.q)
                        WHEN t.freq IS NOT NULL AND {mostly_own}
                        THEN t.freq * st.n
                        WHEN t.freq IS NULL OR t.freq * {rows} <= {DF_CAP}
                        THEN {gin_count}
                        ELSE t.freq * st.n
                        END AS df
                    FROM unnest((SELECT CAST(:kw_tsq AS tsquery[])),
                                {freq_arrays}) AS t({columns})
                    OFFSET 0
                ) t
            ) t
        )"""


def bm25_sql(tsv: str, labels: bool = False) -> str:
    """The BM25 score of the row whose tsvector is ``tsv`` as a share of the query's
    summed IDF (``mass``, see :func:`bm25_ctes`), uncapped; NULL when the row holds
    none of the query's terms. :data:`KEYWORD` makes the keyword score of it.

    A query term counts once however often the record repeats it, and a record's
    length is its number of distinct terms (``length(tsvector)``): both come from C
    functions (``@@``, ``length``), where reading each candidate's term frequencies
    and token count from its positions (``unnest``) cost 3-8 times ``ts_rank``'s time
    per candidate, too much for recall's budget. For the short texts lessons and
    chat turns are, the two rarely differ; where no record repeats a term, the scores
    are rank_bm25's with Lucene's IDF (tests/test_core_keyword.py).

    The constants are read in the same sub-select (``min`` of columns equal on every
    row of ``kw_idf``): scalar sub-selects for them were plan nodes of their own in
    every place a score is computed. The arithmetic is the one of the separate
    sub-selects, in the same order: the same scores to the bit. One ``CASE`` per term
    slot instead of the sub-select (no sub-plan run per candidate) was no cheaper:
    each function call in a plan is looked up again on every execution.

    ``labels`` (item search, :func:`bm25_ctes` with ``labels``): a term found in one of
    the row's labels counts with its label IDF ``wl`` (:data:`LABEL_IDF_SHARE`), more
    than its own; the summed IDF it is a share of stays the query's, so a label match
    raises the row's score and no other row's (the share is capped at 1 by
    :data:`KEYWORD`).
    """
    weight = f"CASE WHEN {tsv} @@ i.lq THEN i.wl ELSE i.w END" if labels else "i.w"
    return (
        f"(SELECT sum({weight}) * {K1 + 1}"
        f" / (1 + {K1} * ({1 - B} + {B} * length({tsv}) / min(i.avgdl))) / min(i.mass)"
        f" FROM kw_idf i WHERE {tsv} @@ i.q)"
    )


def bm25_exact_sql() -> str:
    """The keyword score (:data:`KEYWORD` of :func:`bm25_sql`) of a row whose text is
    the query's own: it holds each of the query's terms found in the collection once,
    and its length is the query's number of distinct tokens (``:kw_qlen``). The best
    score a row can reach for the query (one shorter than the query aside); item search
    divides its fused relevance by the relevance of such a row, so that an exact match
    scores 1 whatever the query's terms' IDF (``items_search_sql.hybrid_search_sql``).
    """
    return (
        f"(SELECT LEAST(1, COALESCE(sum(i.w) FILTER (WHERE i.df > 0) * {K1 + 1}"
        f" / (1 + {K1} * ({1 - B} + {B} * :kw_qlen / min(i.avgdl))) / min(i.mass), 0))"
        " FROM kw_idf i)"
    )


# The keyword score of a BM25 score: the share it reaches of the summed IDF of the
# query's terms (those found in the collection, or all of them: see bm25_params),
# capped at 1. A record holding each such term
# once at the collection's average length scores exactly the IDF share of the terms
# it holds, whatever the other candidates: the best match no longer scores 1 by
# construction, and a match on one common word scores its small IDF share (see
# MIN_MASS_SHARE). Terms absent from the collection are left out of the sum (they cannot
# tell records apart). Measured on LoCoMo dev (bench_locomo.py, store hybrid R@5 / R@10):
# against every query term .567 / .656 (but a Chinese query sharing one bigram with
# its lesson among five records lost it: tests/test_core_recall.py), against the
# terms found .563 / .655, against a singleton term's IDF per term found .549 / .635,
# reciprocal rank fusion .473 / .578 (.500 / .613 at weights 0.5 / 0.5); all at b 0.75.
# ``{bm25}`` is :func:`bm25_sql`'s share.
KEYWORD = "LEAST(1, COALESCE({bm25}, 0))"


def array_literal(values: Sequence[object]) -> str:
    """A PostgreSQL array literal (``{"a","b",NULL}``) of strings, numbers or None."""

    def cell(v: object) -> str:
        if v is None:
            return "NULL"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "{" + ",".join(map(cell, values)) + "}"


def bm25_params(
    terms: Sequence[str],
    common: Mapping[str, float],
    *,
    whole_query: bool = False,
    labels: bool = False,
) -> dict[str, Any]:
    """``:kw_tsq`` / ``:kw_freq`` / ``:kw_whole`` for :func:`bm25_ctes`, and with
    ``labels`` ``:kw_ltsq``, each term's query restricted to labels.

    The two term arrays are array literals, one string each: psycopg dumped Python
    lists element by element, on every recall; a float's ``repr``
    reads back as the same double.

    ``whole_query``: the keyword score is the share of the whole query's IDF, terms
    absent from the collection included (their IDF is the largest: a document
    frequency of 0). Recall sets it when the embedding model covers the query's
    language (``embeddings.profiles.covers``): the semantic side then judges the
    query, and lexical evidence should count as far as it goes. For a Chinese
    paraphrase sharing no word with its lesson, the share of the terms found was the
    one incidental bigram it shares with another lesson (期的, 一个), so that lesson
    scored the full keyword weight: with multilingual-e5-small, hard paraphrases
    recall@3 .43 hybrid against .54 vector-only (bench_zh). When the model does not
    cover the language, the keyword side is the only judge and its best partial match
    counts fully: a Chinese query sharing one bigram with its lesson still finds it
    with an English-only model (tests/test_core_recall.py).
    """
    params = {
        "kw_tsq": array_literal([term_query(t) for t in terms]),
        "kw_freq": array_literal([common_share(t, common) for t in terms]),
        "kw_whole": whole_query,
    }
    if labels:
        params["kw_ltsq"] = array_literal([term_query(t, label=True) for t in terms])
    return params
