"""SQL for working memory (task logs) and generic items that the core sweeps."""

from __future__ import annotations

import sqlalchemy as sa

SWEEP_ITEMS = sa.text(
    "DELETE FROM hindsight_items WHERE expires_at IS NOT NULL AND expires_at <= :now "
    "RETURNING ns, key"
)
SWEEP_TASKS = sa.text(
    "DELETE FROM hindsight_tasks WHERE expires_at IS NOT NULL AND expires_at <= :now "
    "RETURNING ns, id"
)
