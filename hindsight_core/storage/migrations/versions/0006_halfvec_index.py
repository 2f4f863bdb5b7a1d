"""The experiences' HNSW index in half precision (issue 7).

``hindsight_experiences_hnsw_<dim>`` on ``embedding::vector(<dim>)`` is replaced by
``hindsight_experiences_halfvec_<dim>`` on ``embedding::halfvec(<dim>)``
(``experiences_sql.ann``): at 100k records of 384 dimensions the index is half the
size, an insert is ~27 % cheaper and its recall against exact search is no lower.
Scores are still computed from the full-precision vectors. The new index is built
here from the stored rows (about 20 s per 100,000 records on two cores).

Revision ID: 0006
Revises: 0005
"""

import re

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_INDEXES = sa.text(
    "SELECT relname FROM pg_class WHERE relname LIKE :pattern AND relkind = 'i' "
    "AND pg_table_is_visible(oid)"
)


# Room for the HNSW graph while it is built (pgvector builds far slower once the graph
# outgrows maintenance_work_mem; 100k records of 384 dims need ~100 MB).
_BUILD_MEMORY = sa.text(
    "SELECT set_config('maintenance_work_mem', '256MB', true) "
    "WHERE pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes('256MB')"
)


def _convert(old_prefix: str, new_prefix: str, vector_type: str) -> None:
    conn = op.get_bind()
    names = conn.execute(_INDEXES, {"pattern": old_prefix + "%"}).scalars().all()
    if names:
        conn.execute(_BUILD_MEMORY)
    for name in names:
        match = re.fullmatch(re.escape(old_prefix) + r"(\d+)", name)
        if not match:
            continue
        dim = int(match.group(1))
        op.execute(
            f"CREATE INDEX IF NOT EXISTS {new_prefix}{dim} ON hindsight_experiences "
            f"USING hnsw ((embedding::{vector_type}({dim})) {vector_type}_cosine_ops) "
            "WHERE archived_at IS NULL"
        )
        op.execute(f"DROP INDEX {name}")


def upgrade() -> None:
    _convert("hindsight_experiences_hnsw_", "hindsight_experiences_halfvec_", "halfvec")


def downgrade() -> None:
    _convert("hindsight_experiences_halfvec_", "hindsight_experiences_hnsw_", "vector")
