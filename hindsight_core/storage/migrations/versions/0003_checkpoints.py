"""LangGraph checkpoints: checkpoint rows, channel blobs, pending writes.

The layout follows ``langgraph-checkpoint-postgres`` so the semantics match
``PostgresSaver``: a checkpoint row keeps only small (primitive) channel values
inline; every other channel value is a versioned blob written once per version
and shared by the checkpoints that did not change it; pending writes are keyed by
(task, index) so that a re-sent write is a no-op. ``run_id`` is generated from the
metadata so ``delete_for_runs`` is an index lookup. Thread ids lead every key.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE hindsight_checkpoints (
            thread_id text COLLATE "C" NOT NULL,
            checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
            checkpoint_id text COLLATE "C" NOT NULL,
            parent_checkpoint_id text COLLATE "C",
            checkpoint jsonb NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{}',
            run_id text GENERATED ALWAYS AS (metadata ->> 'run_id') STORED,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
        );
        CREATE INDEX hindsight_checkpoints_run_id ON hindsight_checkpoints (run_id)
            WHERE run_id IS NOT NULL;

        CREATE TABLE hindsight_checkpoint_blobs (
            thread_id text COLLATE "C" NOT NULL,
            checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
            channel text COLLATE "C" NOT NULL,
            version text COLLATE "C" NOT NULL,
            type text NOT NULL,
            blob bytea,
            PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
        );

        CREATE TABLE hindsight_checkpoint_writes (
            thread_id text COLLATE "C" NOT NULL,
            checkpoint_ns text COLLATE "C" NOT NULL DEFAULT '',
            checkpoint_id text COLLATE "C" NOT NULL,
            task_id text COLLATE "C" NOT NULL,
            idx integer NOT NULL,
            channel text NOT NULL,
            type text,
            blob bytea NOT NULL,
            task_path text NOT NULL DEFAULT '',
            PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        );
        """
    )


def downgrade() -> None:
    op.execute(
        "DROP TABLE IF EXISTS hindsight_checkpoint_writes; "
        "DROP TABLE IF EXISTS hindsight_checkpoint_blobs; "
        "DROP TABLE IF EXISTS hindsight_checkpoints;"
    )
