"""A record's events by record: usage feedback with who gave it, and its history.

Usage feedback (``mark_used``, helpful or not) was already an event of the record
(``hindsight_events``, kind ``used`` / ``unhelpful``); with sharing (docs/sharing.md)
an agent may give feedback on a lesson of a namespace it only reads, so the event now
says who gave it (``detail.by``: the caller's ``by``, an MCP token's name, or the
namespace it was called with), and ``feedback(id)`` reads a record's feedback back.
Those reads, and the inspector's history of a record (``inspect_sql.HISTORY``), look
events up by ``(ns, record_id)``: this index serves them (the ``(ns, at)`` one read a
namespace's every event for one record's). It leads with the namespace, as every
index does (tests/test_schema_scaling.py).

Revision ID: 0012
Revises: 0011
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX IF NOT EXISTS hindsight_events_record"
        " ON hindsight_events (ns, record_id, at) WHERE record_id IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS hindsight_events_record")
