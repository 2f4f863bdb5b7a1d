"""SQL for review: near-duplicate pairs of live records inside one scene.

Each live record of the scene looks up its few nearest live neighbours in the same
scene through the HNSW index (same ``embedding::vector(<dim>)`` expression as
recall); pairs at or above the similarity threshold come back once each
(``a.id < b.id``). Review turns the pairs into clusters in Python.
"""

from __future__ import annotations

from functools import lru_cache

import sqlalchemy as sa

from .experiences_sql import T, ann, vec


@lru_cache(maxsize=8)
def near_pairs_sql(dim: int, neighbours: int = 5) -> sa.TextClause:
    """Pairs ``(a, b, similarity)`` of live records in ``:scene`` with similarity >=
    ``:threshold``, scanning at most ``:max_records`` records of the scene. Current
    versions only: an old version is history, not a look-alike to merge."""
    return sa.text(
        f"""
        WITH base AS (
            SELECT e.id, e.embedding FROM {T} e
            WHERE e.ns = :ns AND e.scene = :scene AND e.archived_at IS NULL
                AND e.superseded_by IS NULL
            ORDER BY e.created_at DESC LIMIT :max_records
        )
        SELECT a.id AS a, n.id AS b, n.similarity
        FROM base a CROSS JOIN LATERAL (
            SELECT e.id, 1 - ({vec(dim)} <=> {vec(dim, "a.embedding")}) AS similarity
            FROM {T} e
            WHERE e.ns = :ns AND e.scene = :scene AND e.archived_at IS NULL AND e.id <> a.id
                AND e.superseded_by IS NULL
            ORDER BY {ann(dim)} <=> {ann(dim, "a.embedding")}
            LIMIT {int(neighbours)}
        ) n
        WHERE n.similarity >= :threshold AND a.id < n.id
        ORDER BY n.similarity DESC
        """
    )
