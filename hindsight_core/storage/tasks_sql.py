"""SQL for working memory (task logs) and LLM usage (the items' sweep: ``items_sql.SWEEP``).

A task log is one row of ``hindsight_tasks``: the goal, the steps so far (a jsonb
array appended to in place), the ids of records recalled for it, and ``meta``
(scene, used ids, final state, source). ``expires_at`` is pushed forward on every
write, so only abandoned tasks reach it; ``maintain`` sweeps them.
"""

from __future__ import annotations

import sqlalchemy as sa

SWEEP_TASKS = sa.text(
    "DELETE FROM hindsight_tasks WHERE expires_at IS NOT NULL AND expires_at <= :now "
    "RETURNING ns, id"
)

TASK_COLUMNS = (
    "ns, id, goal, status, outcome, steps, recalled, meta, created_at, updated_at, expires_at"
)

START_TASK = sa.text(
    """
    INSERT INTO hindsight_tasks (ns, id, goal, status, steps, recalled, meta, created_at,
        updated_at, expires_at)
    VALUES (:ns, :id, :goal, 'running', '[]', '{}', CAST(:meta AS jsonb), :now, :now, :expires)
    """
)

APPEND_STEPS = sa.text(
    """
    UPDATE hindsight_tasks SET steps = steps || CAST(:steps AS jsonb), updated_at = :now,
        expires_at = :expires
    WHERE ns = :ns AND id = :id AND status = 'running'
    RETURNING id
    """
)

NOTE_RECALL = sa.text(
    """
    UPDATE hindsight_tasks SET
        recalled = ARRAY(SELECT DISTINCT unnest(recalled || CAST(:recalled AS uuid[]))),
        meta = jsonb_set(meta, '{used}', to_jsonb(ARRAY(
            SELECT DISTINCT u FROM unnest(
                ARRAY(SELECT jsonb_array_elements_text(COALESCE(meta->'used', '[]')))
                || CAST(:used AS text[])) AS u))),
        updated_at = :now, expires_at = :expires
    WHERE ns = :ns AND id = :id AND status = 'running'
    RETURNING id
    """
)

END_TASK = sa.text(
    """
    UPDATE hindsight_tasks SET status = 'ended', outcome = :outcome,
        meta = meta || CAST(:meta AS jsonb), updated_at = :now, expires_at = :expires
    WHERE ns = :ns AND id = :id AND status = 'running'
    RETURNING id
    """
)

GET_TASK = sa.text(f"SELECT {TASK_COLUMNS} FROM hindsight_tasks WHERE ns = :ns AND id = :id")

DROP_TASK = sa.text("DELETE FROM hindsight_tasks WHERE ns = :ns AND id = :id RETURNING id")

RECORD_LLM_USAGE = sa.text(
    """
    INSERT INTO hindsight_llm_usage (at, model, purpose, prompt_tokens, completion_tokens, ns)
    VALUES (:now, :model, :purpose, :prompt_tokens, :completion_tokens, :ns)
    """
)
