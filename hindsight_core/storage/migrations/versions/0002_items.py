"""Generic items: indexes for the LangGraph store's access paths.

Item vectors carry no fixed dimension; their ANN index (hnsw / ivfflat, vector or
halfvec, per distance) is a partial expression index created by the items set-up
for the configured dimension (``storage.items_sql.ensure_index_sql``).

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE INDEX IF NOT EXISTS hindsight_items_ns_updated
            ON hindsight_items (ns, updated_at DESC);
        CREATE INDEX IF NOT EXISTS hindsight_items_updated
            ON hindsight_items (updated_at DESC);
        """
    )


def downgrade() -> None:
    op.execute(
        "DROP INDEX IF EXISTS hindsight_items_ns_updated; "
        "DROP INDEX IF EXISTS hindsight_items_updated"
    )
