"""Initial schema: experiences, items, tasks, events, LLM usage, meta.

Vectors are stored without a fixed dimension; the HNSW index is an expression
index on ``embedding::vector(<dim>)``, created by ``setup()`` for the configured
model (see ``storage.schema.experience_index_sql``). Namespaces are one text key
(labels joined by \\x1f) in the "C" collation, so prefix scans use the b-tree,
and they lead every key so that sharding by tenant needs no schema change.

Revision ID: 0001
Revises:
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.execute(
        """
        CREATE TABLE hindsight_meta (
            key text PRIMARY KEY,
            value jsonb NOT NULL
        );

        CREATE TABLE hindsight_experiences (
            ns text COLLATE "C" NOT NULL,
            id uuid NOT NULL,
            scene text NOT NULL,
            trigger text NOT NULL,
            action text NOT NULL DEFAULT '',
            outcome text NOT NULL DEFAULT '',
            lesson text NOT NULL,
            confidence real NOT NULL,
            importance real,
            critical boolean NOT NULL DEFAULT false,
            source jsonb NOT NULL DEFAULT '{}',
            score double precision NOT NULL DEFAULT 1.0,
            use_count integer NOT NULL DEFAULT 0,
            occurrences integer NOT NULL DEFAULT 1,
            last_used_at timestamptz,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            archived_at timestamptz,
            merged_into uuid,
            merged_from uuid[] NOT NULL DEFAULT '{}',
            embedding vector NOT NULL,
            search_tsv tsvector NOT NULL,
            PRIMARY KEY (ns, id)
        );
        CREATE INDEX hindsight_experiences_scene ON hindsight_experiences (ns, scene)
            WHERE archived_at IS NULL;
        CREATE INDEX hindsight_experiences_tsv ON hindsight_experiences USING gin (search_tsv);

        CREATE TABLE hindsight_items (
            ns text COLLATE "C" NOT NULL,
            key text NOT NULL,
            value jsonb NOT NULL,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            expires_at timestamptz,
            ttl_minutes double precision,
            PRIMARY KEY (ns, key)
        );
        CREATE INDEX hindsight_items_expires ON hindsight_items (expires_at)
            WHERE expires_at IS NOT NULL;

        CREATE TABLE hindsight_item_vectors (
            ns text COLLATE "C" NOT NULL,
            key text NOT NULL,
            field text NOT NULL,
            embedding vector NOT NULL,
            search_tsv tsvector NOT NULL,
            PRIMARY KEY (ns, key, field),
            FOREIGN KEY (ns, key) REFERENCES hindsight_items (ns, key) ON DELETE CASCADE
        );
        CREATE INDEX hindsight_item_vectors_tsv ON hindsight_item_vectors USING gin (search_tsv);

        CREATE TABLE hindsight_tasks (
            ns text COLLATE "C" NOT NULL,
            id uuid NOT NULL,
            goal text NOT NULL,
            status text NOT NULL DEFAULT 'running',
            outcome text,
            steps jsonb NOT NULL DEFAULT '[]',
            recalled uuid[] NOT NULL DEFAULT '{}',
            meta jsonb NOT NULL DEFAULT '{}',
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL,
            expires_at timestamptz,
            PRIMARY KEY (ns, id)
        );
        CREATE INDEX hindsight_tasks_expires ON hindsight_tasks (expires_at)
            WHERE expires_at IS NOT NULL;

        CREATE TABLE hindsight_events (
            id bigserial PRIMARY KEY,
            ns text COLLATE "C" NOT NULL,
            record_id uuid,
            kind text NOT NULL,
            at timestamptz NOT NULL,
            detail jsonb NOT NULL DEFAULT '{}'
        );
        CREATE INDEX hindsight_events_ns_at ON hindsight_events (ns, at);

        CREATE TABLE hindsight_llm_usage (
            id bigserial PRIMARY KEY,
            at timestamptz NOT NULL,
            model text NOT NULL,
            purpose text NOT NULL,
            prompt_tokens integer NOT NULL DEFAULT 0,
            completion_tokens integer NOT NULL DEFAULT 0
        );
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TABLE IF EXISTS hindsight_llm_usage, hindsight_events, hindsight_tasks,
            hindsight_item_vectors, hindsight_items, hindsight_experiences, hindsight_meta
        """
    )
