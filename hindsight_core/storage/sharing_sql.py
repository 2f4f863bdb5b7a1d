"""SQL for reads across several namespaces (sharing, docs/sharing.md), and feedback.

A read set (``memory.scope.ReadSet``) reaches a statement as three text arrays:
``:ns_exact`` (namespace keys) and ``:ns_lo`` / ``:ns_hi`` (per prefix, the key range
of the namespaces under it). :data:`NS_SET` turns them into the keys of the namespaces
that hold live records, from the BM25 counters (``hindsight_keyword_stats``, one row
per namespace with live records, kept in the writers' transactions: migration 0009),
through their primary key; recall (``recall_sql.search_sql(many=True)``) reads the
records of those namespaces, with their union's keyword statistics.
"""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa

from .experiences_sql import T, scene_condition
from .scan_sql import EXACT_SCAN_MAX

# The namespaces of a read set that hold live records, distinct, as one text[] (cast:
# ``= ANY((SELECT ...))`` would read as a sub-select of rows): an
# InitPlan of the statements below (counted once per statement). ``COLLATE "C"``:
# keys compare byte by byte, as the ranges of ``ReadSet.params`` assume. A prefix's
# range filters the namespace column (a prefix spans tenants by design): the join is
# with the ranges, never between two tables (tests/test_schema_scaling.py).
NS_SET = """CAST((SELECT COALESCE(array_agg(x.ns ORDER BY x.ns), '{}') FROM (
        SELECT s.ns FROM hindsight_keyword_stats s
        WHERE s.tbl = 'e' AND s.ns = ANY(CAST(:ns_exact AS text[]))
        UNION
        SELECT s.ns FROM hindsight_keyword_stats s
        JOIN unnest(CAST(:ns_lo AS text[]), CAST(:ns_hi AS text[])) AS r(lo, hi)
            ON s.ns >= r.lo COLLATE "C" AND s.ns < r.hi COLLATE "C"
        WHERE s.tbl = 'e'
    ) x) AS text[])"""


@lru_cache(maxsize=4)
def many_exact_scan_sql(scene: bool) -> sa.TextClause:
    """Whether recall over a read set (and ``:scene``) should scan exactly: the
    namespaces' live records together are at most ``scan_sql.EXACT_SCAN_MAX``."""
    cond = "e.archived_at IS NULL" + (f" AND {scene_condition()}" if scene else "")
    # Namespace by namespace, each through its index range (see recall_sql's exact arm:
    # ``e.ns = ANY(<InitPlan>)`` was planned as a scan of the whole table).
    return sa.text(
        f"""
        SELECT n <= {EXACT_SCAN_MAX} AS exact FROM (SELECT count(*) AS n FROM (
            SELECT 1 FROM unnest({NS_SET}) AS s(ns) CROSS JOIN LATERAL (
                SELECT 1 FROM {T} e WHERE e.ns = s.ns AND {cond} LIMIT {EXACT_SCAN_MAX + 1}
            ) e LIMIT {EXACT_SCAN_MAX + 1}) x) n
        """
    )


# Which namespace of a read set holds the record ``:id`` (archived ones too): one
# primary-key probe per exact namespace, one range of it per prefix. A namespace's rows
# of every kind count here, not only those with live records (NS_SET's).
LOCATE = sa.text(
    f"""
    SELECT x.ns FROM (
        SELECT e.ns FROM {T} e
        WHERE e.ns = ANY(CAST(:ns_exact AS text[])) AND e.id = :id
        UNION ALL
        SELECT e.ns FROM {T} e
        JOIN unnest(CAST(:ns_lo AS text[]), CAST(:ns_hi AS text[])) AS r(lo, hi)
            ON e.ns >= r.lo COLLATE "C" AND e.ns < r.hi COLLATE "C"
        WHERE e.id = :id
    ) x ORDER BY x.ns LIMIT 1
    """
)

# Usage feedback on a record (``mark_used``): its events, newest first; ``by`` is who
# gave it (``detail.by``; NULL for feedback recorded before it was kept).
FEEDBACK = sa.text(
    """
    SELECT at, kind, detail ->> 'by' AS by FROM hindsight_events
    WHERE ns = :ns AND record_id = :record_id AND kind IN ('used', 'unhelpful')
    ORDER BY at DESC, id DESC LIMIT :limit
    """
)

__all__ = ["FEEDBACK", "LOCATE", "NS_SET", "many_exact_scan_sql"]
