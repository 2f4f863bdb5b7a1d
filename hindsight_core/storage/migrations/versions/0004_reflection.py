"""Reflection: task logs and LLM usage changes (owned by the reflection work).

- ``hindsight_llm_usage`` gains ``ns`` (which namespace a call was made for) so
  usage can be reported per tenant; old rows keep ``NULL``.
- ``hindsight_tasks`` gets an index on ``(ns, status)`` for listing running tasks.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE hindsight_llm_usage ADD COLUMN IF NOT EXISTS ns text COLLATE "C";
        CREATE INDEX IF NOT EXISTS hindsight_llm_usage_ns_at ON hindsight_llm_usage (ns, at);
        CREATE INDEX IF NOT EXISTS hindsight_tasks_status ON hindsight_tasks (ns, status);
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX IF EXISTS hindsight_tasks_status;
        DROP INDEX IF EXISTS hindsight_llm_usage_ns_at;
        ALTER TABLE hindsight_llm_usage DROP COLUMN IF EXISTS ns;
        """
    )
