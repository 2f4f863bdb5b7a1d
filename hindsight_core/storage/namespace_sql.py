"""SQL over a whole namespace: drop everything stored under it."""

from __future__ import annotations

import sqlalchemy as sa

DROP_NAMESPACE = sa.text(
    """
    WITH r AS (DELETE FROM hindsight_experiences WHERE ns = :ns RETURNING 1),
         e AS (DELETE FROM hindsight_events WHERE ns = :ns RETURNING 1),
         i AS (DELETE FROM hindsight_items WHERE ns = :ns RETURNING 1),
         t AS (DELETE FROM hindsight_tasks WHERE ns = :ns RETURNING 1)
    SELECT (SELECT count(*) FROM r) AS records, (SELECT count(*) FROM e) AS events,
        (SELECT count(*) FROM i) AS items, (SELECT count(*) FROM t) AS tasks
    """
)
"""Records, their history events, items (their vectors cascade) and task logs of one
namespace (exactly that one, not those under it). LLM usage rows stay: they are the
account of what was spent."""

__all__ = ["DROP_NAMESPACE"]
