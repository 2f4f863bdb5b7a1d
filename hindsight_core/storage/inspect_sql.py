"""SQL for looking at the store (the inspector): counts, activity, decay projections.

Read-only statements; ``memory.inspection`` yields them. The decay projection reuses
``experiences_sql.DECAYED`` with the clock replaced by each projected instant, so
the curve is computed by the very formula recall uses.
"""

from __future__ import annotations

import sqlalchemy as sa

from .experiences_sql import DECAYED, T, list_conditions

NAMESPACES = sa.text(
    f"""
    SELECT ns,
        count(*) FILTER (WHERE archived_at IS NULL) AS records,
        count(*) FILTER (WHERE archived_at IS NOT NULL) AS archived,
        count(DISTINCT scene) AS scenes,
        max(updated_at) AS last_updated
    FROM {T}
    WHERE CAST(:prefix AS text) IS NULL OR ns = :prefix
        OR starts_with(ns, CAST(:prefix AS text) || E'\\x1f')
    GROUP BY ns ORDER BY ns LIMIT :limit
    """
)

# A record counts in each of its scenes (``experiences_sql.scene_condition``), as the
# scene filter finds it there.
SCENES = sa.text(
    f"""
    SELECT s.scene,
        count(*) FILTER (WHERE archived_at IS NULL) AS records,
        count(*) FILTER (WHERE archived_at IS NOT NULL) AS archived
    FROM {T} e CROSS JOIN LATERAL unnest(ARRAY[e.scene] || e.also_scenes) AS s(scene)
    WHERE e.ns = :ns
    GROUP BY s.scene ORDER BY count(*) FILTER (WHERE archived_at IS NULL) DESC, scene
    """
)


def count_sql(*, scene: bool, archived: bool | None) -> sa.TextClause:
    """How many records ``list_records`` would page through (same filters)."""
    return sa.text(
        f"SELECT count(*) AS n FROM {T} e WHERE {list_conditions(scene=scene, archived=archived)}"
    )


ACTIVITY = sa.text(
    """
    SELECT CAST(date_trunc('day', at AT TIME ZONE 'UTC') AS date) AS day, kind,
        count(*) AS n
    FROM hindsight_events
    WHERE (CAST(:ns AS text) IS NULL OR ns = :ns) AND at >= :since AND at <= :now
        AND (CAST(:record_id AS uuid) IS NULL OR record_id = CAST(:record_id AS uuid))
    GROUP BY 1, 2 ORDER BY 1, 2
    """
)

HISTORY = sa.text(
    """
    SELECT at, kind, detail FROM hindsight_events
    WHERE ns = :ns AND record_id = :record_id
    ORDER BY at DESC, id DESC LIMIT :limit
    """
)

# DECAYED evaluated at each projected instant ``t.at`` instead of ``:now``.
_DECAYED_AT = DECAYED.replace("CAST(:now AS timestamptz)", "t.at")
assert _DECAYED_AT != DECAYED, "experiences_sql.DECAYED no longer uses :now"

DECAY_CURVE = sa.text(
    f"""
    WITH r AS (
        SELECT e.*, LEAST(COALESCE(e.last_used_at, e.created_at), CAST(:now AS timestamptz))
            AS start_at
        FROM {T} e WHERE e.ns = :ns AND e.id = :id
    )
    SELECT t.at, {_DECAYED_AT} AS score, e.critical
    FROM r AS e,
        LATERAL (
            SELECT e.start_at + (CAST(:now AS timestamptz) + make_interval(days => :days)
                - e.start_at) * (i / CAST(:points - 1 AS float8)) AS at
            FROM generate_series(0, :points - 1) AS i
        ) AS t
    ORDER BY t.at
    """
)
