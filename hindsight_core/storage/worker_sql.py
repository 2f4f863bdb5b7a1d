"""SQL for the maintenance worker: ended task logs still waiting to be reflected on."""

from __future__ import annotations

import sqlalchemy as sa

from .tasks_sql import TASK_COLUMNS

PENDING_TASKS = sa.text(
    f"""
    SELECT {TASK_COLUMNS} FROM hindsight_tasks
    WHERE status = 'ended' AND updated_at <= :before
      AND NOT (id = ANY(CAST(:skip AS uuid[])))
    ORDER BY updated_at
    LIMIT :limit
    """
)
