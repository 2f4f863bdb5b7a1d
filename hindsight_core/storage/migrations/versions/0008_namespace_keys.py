"""Every key leads with the namespace, so that the schema can be sharded by tenant.

Citus (distributed PostgreSQL) requires a distributed table's primary and unique
keys to include its distribution column (``ns``); ``hindsight_events`` and
``hindsight_llm_usage`` had a bare ``bigserial`` primary key. Their keys become
``(ns, id)``; ``hindsight_llm_usage.ns`` (added nullable by 0004, always written
since) becomes ``NOT NULL DEFAULT ''``. No statement reads these tables by id alone.
See docs/scaling.md and tests/test_schema_scaling.py.

Revision ID: 0008
Revises: 0007
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE hindsight_events DROP CONSTRAINT hindsight_events_pkey,
            ADD CONSTRAINT hindsight_events_pkey PRIMARY KEY (ns, id);
        UPDATE hindsight_llm_usage SET ns = '' WHERE ns IS NULL;
        ALTER TABLE hindsight_llm_usage ALTER COLUMN ns SET DEFAULT '',
            ALTER COLUMN ns SET NOT NULL,
            DROP CONSTRAINT hindsight_llm_usage_pkey,
            ADD CONSTRAINT hindsight_llm_usage_pkey PRIMARY KEY (ns, id);
        """
    )


def downgrade() -> None:
    op.execute(
        """
        ALTER TABLE hindsight_llm_usage DROP CONSTRAINT hindsight_llm_usage_pkey,
            ADD CONSTRAINT hindsight_llm_usage_pkey PRIMARY KEY (id),
            ALTER COLUMN ns DROP NOT NULL, ALTER COLUMN ns DROP DEFAULT;
        ALTER TABLE hindsight_events DROP CONSTRAINT hindsight_events_pkey,
            ADD CONSTRAINT hindsight_events_pkey PRIMARY KEY (id);
        """
    )
