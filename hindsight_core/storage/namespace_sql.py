"""SQL over a whole namespace: drop everything stored under it."""

from __future__ import annotations

import sqlalchemy as sa

from .items_sql import namespace_lock

# After the namespace's lock (experiences_sql.LOCK_NAMESPACE, writes of records wait),
# in a statement of its own so that DROP_NAMESPACE's snapshot comes after the wait:
# item batches writing in the namespace finish first, and those that start wait.
LOCK_ITEMS = sa.text(f"SELECT pg_advisory_xact_lock({namespace_lock(':ns')})")

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

__all__ = ["DROP_NAMESPACE", "LOCK_ITEMS"]
