"""Versions of a lesson: a correction is a new record that supersedes the old one.

A record gets its place in a chain of versions: ``lineage`` (the first version's id,
shared by every version; NULL for a record never superseded nor superseding),
``version`` (1, 2, ... along the chain), ``supersedes`` (the version before) and, on
a superseded record, ``superseded_by`` (the version after), ``superseded_at``,
``superseded_reason`` and ``superseded_actor`` (the namespace or MCP token that did
it). No foreign keys: forgetting a version keeps the others' links as history.

The unique index on ``(ns, supersedes)`` makes a fork impossible at the database: a
version has at most one successor, whatever a writer does (``memory/versions.py``
also serializes superseding on the namespace lock and appends to the chain's head).
The ``(ns, lineage)`` index serves ``history`` and the dedup lookups' jump to a
chain's head. See docs/versions.md.

Revision ID: 0011
Revises: 0010
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE hindsight_experiences
            ADD COLUMN version integer NOT NULL DEFAULT 1,
            ADD COLUMN lineage uuid,
            ADD COLUMN supersedes uuid,
            ADD COLUMN superseded_by uuid,
            ADD COLUMN superseded_at timestamptz,
            ADD COLUMN superseded_reason text,
            ADD COLUMN superseded_actor text;
        CREATE UNIQUE INDEX hindsight_experiences_supersedes
            ON hindsight_experiences (ns, supersedes) WHERE supersedes IS NOT NULL;
        CREATE INDEX hindsight_experiences_lineage
            ON hindsight_experiences (ns, lineage, version) WHERE lineage IS NOT NULL;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX IF EXISTS hindsight_experiences_lineage;
        DROP INDEX IF EXISTS hindsight_experiences_supersedes;
        ALTER TABLE hindsight_experiences
            DROP COLUMN superseded_actor, DROP COLUMN superseded_reason,
            DROP COLUMN superseded_at, DROP COLUMN superseded_by,
            DROP COLUMN supersedes, DROP COLUMN lineage, DROP COLUMN version;
        """
    )
