"""SQL that decides how a search finds semantic candidates: exact scan or ANN index.

A namespace (and scene, or item prefix) with at most ``EXACT_SCAN_MAX`` rows is ranked
by an exact scan: a filtered HNSW scan would walk much of the index to find its rows
(and stop short at ``hnsw.max_scan_tuples``), and in a small table, where such a
namespace is a large share of the rows, the exact scan costs little either way. The
answer is a bounded count of the namespace's rows, nothing else: it used to ask also
for under ``EXACT_SCAN_SHARE`` of the table by ``pg_class.reltuples``, which is -1 until
the table's first (auto)analyze and moves with each one, so the same data in the same
order was ranked exactly or through the index (whose graph differs from build to
build: pgvector draws each node's level at random) depending on when autovacuum had
run (bench/HISTORY.md, "LoCoMo with the default model": reproducibility).
``memory.scan.ScanChoice`` caches the answer.

The write path's dedup lookup makes the same choice per batch
(:data:`DEDUP_VECTORS`), with bounds that grow with the batch.
"""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa

from .experiences_sql import DEDUP_EF_SEARCH, T, head_of, scene_condition
from .items_search_sql import prefix_condition
from .items_sql import V

EXACT_SCAN_MAX = 2000
EXACT_SCAN_SHARE = 0.2  # the write path's dedup lookup (DEDUP_VECTORS)


def _few_enough(always: str, at_most: str, table: str) -> str:
    """SQL true when ``n`` rows are few enough to scan exactly: at most ``always``, or
    at most ``at_most`` and under ``EXACT_SCAN_SHARE`` of ``table``."""
    return (
        f"(n <= {always} OR (n <= {at_most} AND n < {EXACT_SCAN_SHARE} * (SELECT "
        f"c.reltuples FROM pg_class c WHERE c.oid = CAST('{table}' AS regclass))))"
    )


def _gate(rows_sql: str) -> sa.TextClause:
    """One row, ``exact``: whether the rows ``rows_sql`` selects are few enough to scan
    exactly."""
    return sa.text(
        f"""
        SELECT n <= {EXACT_SCAN_MAX} AS exact
        FROM (SELECT count(*) AS n FROM ({rows_sql} LIMIT {EXACT_SCAN_MAX + 1}) x) n
        """
    )


@lru_cache(maxsize=4)
def recall_exact_scan_sql(scene: bool) -> sa.TextClause:
    """Whether recall in ``:ns`` (and ``:scene``) should scan exactly."""
    cond = "e.ns = :ns AND e.archived_at IS NULL" + (f" AND {scene_condition()}" if scene else "")
    return _gate(f"SELECT 1 FROM {T} e WHERE {cond}")


@lru_cache(maxsize=32)
def items_exact_scan_sql(n_labels: int) -> sa.TextClause:
    """Whether hybrid item search under the prefix ``:pfx`` should scan exactly."""
    return _gate(f"SELECT 1 FROM {V} v WHERE {prefix_condition(n_labels, 'v.ns')}")


# The dedup lookup of a batch: the namespace's live records with their vectors
# (pgvector's binary form: a 4-byte header, then big-endian float4s, concatenated), to
# compare in numpy, when ``exact``: at most ``:cap`` records, or at most ``:cap_small``
# records under ``EXACT_SCAN_SHARE`` of the table (there, each HNSW lookup is a filtered
# scan that skips other namespaces' rows, several times a lookup elsewhere). Otherwise only
# ``n`` and ``exact`` (false) come back, and the batch is looked up in the HNSW index,
# with the search effort this statement sets for the rest of the transaction.
# ``unanalyzed``: the table has no statistics yet (never analyzed: :data:`ANALYZE`).
# ``triggers`` only with ``:triggers`` (``write_cosines.exact_neighbours``: repeats).
# A superseded record's id is its chain's head (``experiences_sql.head_of``).
DEDUP_VECTORS = sa.text(
    f"""
    WITH c AS (SELECT count(*) AS n FROM (
            SELECT 1 FROM {T} x WHERE x.ns = :ns AND x.archived_at IS NULL
            LIMIT GREATEST(:cap, :cap_small) + 1) l),
        d AS (SELECT n, {_few_enough(":cap", ":cap_small", T)} AS exact FROM c)
    SELECT d.n, d.exact, a.ids, a.lessons, a.triggers, a.vectors,
        set_config('hnsw.ef_search', '{DEDUP_EF_SEARCH}', true) AS ef_search,
        (SELECT c.reltuples < 0 FROM pg_class c
         WHERE c.oid = CAST('{T}' AS regclass)) AS unanalyzed
    FROM d LEFT JOIN LATERAL (
        SELECT array_agg(e.target) AS ids,
               array_agg(e.lesson) AS lessons,
               array_agg(e.trigger) FILTER (WHERE CAST(:triggers AS boolean)) AS triggers,
               string_agg(vector_send(e.embedding), ''::bytea) AS vectors
        FROM (SELECT e.lesson, e.trigger, e.embedding, {head_of()} AS target
              FROM {T} e WHERE d.exact AND e.ns = :ns AND e.archived_at IS NULL) e
        WHERE e.target IS NOT NULL) a ON true
    """
)

# Statistics for a table that has none yet. Before its first (auto)analyze, the
# planner puts a namespace at 0.5 % of the table and answers each dedup lookup by
# sorting the namespace's rows (its b-tree, then a top-N sort), so a 1,000-record
# batch of a bulk load into a new database ran into the statement timeout. With statistics, the
# lookups take the HNSW index.
ANALYZE = sa.text(f"ANALYZE {T}")
