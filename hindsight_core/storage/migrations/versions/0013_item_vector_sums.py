"""Per-namespace sums of the item vectors: the hub correction's mean direction.

Item search with an e5 model takes a text's closeness to the searched texts' mean
direction off its cosine (``items_search_sql.hybrid_search_sql``, the hub correction).
That mean was the query's 40 nearest fields, which is the query's topic wherever many
texts are about it (bench/HISTORY.md, "The hub correction's mean"); the corpus's mean
is what a hub lies close to. ``hindsight_item_vector_sums`` holds, per namespace and
dimension, the number of vectors and their sum, so that the mean direction of any
prefix is one read of a few rows (a sum of sums: the direction, for a cosine, needs no
division), whatever the prefix's size.

Statement-level triggers with transition tables keep it in step with every insert,
update, delete and truncate of ``hindsight_item_vectors``, in the writer's own
transaction, as ``hindsight_keyword_stats`` is kept (0009): one aggregate per statement,
namespace and dimension, applied in key order (an update's as new minus old); an update
whose vector did not change touches no row, and a trigger on no row runs no statement.
The sums are float4, added and subtracted in the order the statements commit: the same
writes in the same order give the same sums to the bit.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

TABLE = "hindsight_item_vectors"
FUNCTION = "hindsight_item_vectors_sums"

# Rows (ns, dims, n, total) of {rows}, a query over a transition table, applied with
# {sign}: + for new vectors, - for removed ones (n counts down, the sum is subtracted).
_APPLY = """
INSERT INTO hindsight_item_vector_sums AS s (ns, dims, n, total)
SELECT d.ns, d.dims, {sign}count(*), sum(d.embedding) FROM ({rows}) d
GROUP BY d.ns, d.dims ORDER BY d.ns, d.dims
ON CONFLICT (ns, dims) DO UPDATE
SET n = s.n + EXCLUDED.n, total = s.total {sign} EXCLUDED.total
"""

_NEW = "SELECT ns, vector_dims(embedding) AS dims, embedding FROM nt"
_OLD = "SELECT ns, vector_dims(embedding) AS dims, embedding FROM ot"
# An update's changed vectors: the same rows, so n stays and the sum moves by new - old.
_UPDATE = """
INSERT INTO hindsight_item_vector_sums AS s (ns, dims, n, total)
SELECT o.ns, vector_dims(o.embedding), 0, sum(n.embedding) - sum(o.embedding)
FROM ot o JOIN nt n USING (ns, key, field)
WHERE o.embedding IS DISTINCT FROM n.embedding
GROUP BY 1, 2 ORDER BY 1, 2
ON CONFLICT (ns, dims) DO UPDATE SET total = s.total + EXCLUDED.total
"""


def upgrade() -> None:
    op.execute("""
        CREATE TABLE hindsight_item_vector_sums (
            ns text COLLATE "C" NOT NULL,
            dims integer NOT NULL,
            n bigint NOT NULL,
            total vector NOT NULL,
            PRIMARY KEY (ns, dims)
        )""")
    op.execute(f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- An upsert fires the INSERT and UPDATE triggers and its stale-vector delete the
    -- DELETE one, most of them on no row: those return before any statement.
    IF TG_OP = 'INSERT' THEN
        IF EXISTS (SELECT FROM nt) THEN {_APPLY.format(sign="+", rows=_NEW)}; END IF;
    ELSIF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT FROM ot) THEN {_APPLY.format(sign="-", rows=_OLD)}; END IF;
    ELSIF TG_OP = 'UPDATE' THEN
        IF EXISTS (SELECT FROM nt) THEN {_UPDATE}; END IF;
    ELSE
        DELETE FROM hindsight_item_vector_sums;
    END IF;
    RETURN NULL;
END $$
""")
    for event, ref in (
        ("INSERT", "NEW TABLE AS nt"),
        ("DELETE", "OLD TABLE AS ot"),
        ("UPDATE", "OLD TABLE AS ot NEW TABLE AS nt"),
    ):
        op.execute(
            f"CREATE TRIGGER {FUNCTION}_{event.lower()} AFTER {event} ON {TABLE} "
            f"REFERENCING {ref} FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
        )
    op.execute(
        f"CREATE TRIGGER {FUNCTION}_truncate AFTER TRUNCATE ON {TABLE} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
    )
    op.execute(f"""
        INSERT INTO hindsight_item_vector_sums (ns, dims, n, total)
        SELECT ns, vector_dims(embedding), count(*), sum(embedding)
        FROM {TABLE} GROUP BY ns, vector_dims(embedding)""")


def downgrade() -> None:
    for event in ("insert", "delete", "update", "truncate"):
        op.execute(f"DROP TRIGGER IF EXISTS {FUNCTION}_{event} ON {TABLE}")
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    op.execute("DROP TABLE IF EXISTS hindsight_item_vector_sums")
