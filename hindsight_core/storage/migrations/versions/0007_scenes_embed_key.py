"""A record belongs to every scene it was written under; what its vector was made from.

- ``also_scenes``: the scenes, besides ``scene``, of the writes that dedup merged into
  the record (issue 16). Dedup looks in the whole namespace, so "Check the extension
  before deleting files" written under ``other-scene`` merges into the same lesson of
  ``file-cleanup``; a scene filter is membership (``scene`` or one of ``also_scenes``,
  ``experiences_sql.scene_condition``), so the lesson stays reachable where it was
  written. Mostly empty: a constant default, so adding it rewrites no row; a GIN index
  serves the membership test beside the ``(ns, scene)`` b-tree.
- ``embed_key``: a digest of the model, dimension and text the stored vector was
  computed from (``memory.inputs.embed_key``); ``reindex`` skips the records whose key
  is unchanged. NULL for records written before: re-embedded by the next ``reindex``.

Revision ID: 0007
Revises: 0006
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE hindsight_experiences "
        "ADD COLUMN IF NOT EXISTS also_scenes text[] NOT NULL DEFAULT '{}'"
    )
    op.execute("ALTER TABLE hindsight_experiences ADD COLUMN IF NOT EXISTS embed_key text")
    op.execute(
        "CREATE INDEX IF NOT EXISTS hindsight_experiences_also_scenes "
        "ON hindsight_experiences USING gin (also_scenes) WITH (fastupdate = off) "
        "WHERE archived_at IS NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS hindsight_experiences_also_scenes")
    op.execute("ALTER TABLE hindsight_experiences DROP COLUMN IF EXISTS embed_key")
    op.execute("ALTER TABLE hindsight_experiences DROP COLUMN IF EXISTS also_scenes")
