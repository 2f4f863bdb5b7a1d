"""The BM25 counters' key leads with the namespace, like every other table's.

``hindsight_keyword_stats`` (0009) was keyed ``(tbl, ns)``; a table distributed by
namespace (Citus, docs/scaling.md) needs the namespace in every key, and first keeps
it one rule for all tables (tests/test_schema_scaling.py). ``(ns, tbl)`` serves the
same lookups (a namespace's counters of one table; a namespace prefix's, as a range
on ``ns``), and the triggers' ``ON CONFLICT (tbl, ns)`` still finds it: conflict
targets name a set of columns, not an order.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE hindsight_keyword_stats DROP CONSTRAINT hindsight_keyword_stats_pkey,"
        " ADD CONSTRAINT hindsight_keyword_stats_pkey PRIMARY KEY (ns, tbl)"
    )


def downgrade() -> None:
    op.execute(
        "ALTER TABLE hindsight_keyword_stats DROP CONSTRAINT hindsight_keyword_stats_pkey,"
        " ADD CONSTRAINT hindsight_keyword_stats_pkey PRIMARY KEY (tbl, ns)"
    )
