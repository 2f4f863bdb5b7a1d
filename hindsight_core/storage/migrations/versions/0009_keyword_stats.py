"""Per-namespace document counts and lengths for BM25 keyword scoring (issue 15).

``hindsight_keyword_stats`` holds, per table (``e``: live experience records, ``i``:
item vectors) and namespace, the number of documents and the sum of their lengths
(distinct terms: ``length(search_tsv)``, see ``fulltext_sql.bm25_sql``). Statement-level
triggers with transition tables keep it in step with every insert, update (merge,
archive, restore, curation), delete and truncate, in the writer's own transaction:
a reader sees the counts of exactly the rows its snapshot sees. One aggregate per
statement and namespace, applied in namespace order (two writers cannot deadlock on
it inside one statement); updates that change neither the text nor whether a record
is live (recall feedback, decay) touch no counter row. Document frequencies are not
kept: they are counted at query time from the GIN index (``fulltext_sql``).

Revision ID: 0009
Revises: 0008
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# (ns, docs delta, length delta) rows -> counters; {rows} is a query over the
# transition tables. Zero deltas are dropped so that no counter row is locked.
_APPLY = """
INSERT INTO hindsight_keyword_stats AS s (tbl, ns, docs, total_len)
SELECT '{tbl}', d.ns, sum(d.docs), sum(d.len) FROM ({rows}) d
GROUP BY d.ns HAVING sum(d.docs) <> 0 OR sum(d.len) <> 0 ORDER BY d.ns
ON CONFLICT (tbl, ns) DO UPDATE
SET docs = s.docs + EXCLUDED.docs, total_len = s.total_len + EXCLUDED.total_len
"""


def _function(name: str, tbl: str, live: str, key: str) -> str:
    """The trigger function of one table; ``live`` says whether a row counts."""
    ins = f"SELECT ns, 1 AS docs, length(search_tsv) AS len FROM nt WHERE {live}"
    dele = f"SELECT ns, -1 AS docs, -length(search_tsv) AS len FROM ot WHERE {live}"
    o_live, n_live = (
        live.replace("archived_at", "o.archived_at"),
        live.replace("archived_at", "n.archived_at"),
    )
    upd = (
        f"SELECT n.ns, (CASE WHEN {n_live} THEN 1 ELSE 0 END)"
        f" - (CASE WHEN {o_live} THEN 1 ELSE 0 END) AS docs,"
        f" (CASE WHEN {n_live} THEN length(n.search_tsv) ELSE 0 END)"
        f" - (CASE WHEN {o_live} THEN length(o.search_tsv) ELSE 0 END) AS len"
        f" FROM ot o JOIN nt n USING ({key})"
        f" WHERE o.search_tsv IS DISTINCT FROM n.search_tsv OR ({o_live}) <> ({n_live})"
    )
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {_APPLY.format(tbl=tbl, rows=ins)};
    ELSIF TG_OP = 'DELETE' THEN
        {_APPLY.format(tbl=tbl, rows=dele)};
    ELSIF TG_OP = 'UPDATE' THEN
        {_APPLY.format(tbl=tbl, rows=upd)};
    ELSE
        DELETE FROM hindsight_keyword_stats WHERE tbl = '{tbl}';
    END IF;
    RETURN NULL;
END $$
"""


_TABLES = (
    (
        "hindsight_experiences",
        "hindsight_experiences_kw_stats",
        "e",
        "archived_at IS NULL",
        "ns, id",
    ),
    ("hindsight_item_vectors", "hindsight_item_vectors_kw_stats", "i", "TRUE", "ns, key, field"),
)


def upgrade() -> None:
    op.execute("""
        CREATE TABLE hindsight_keyword_stats (
            tbl "char" NOT NULL,
            ns text COLLATE "C" NOT NULL,
            docs bigint NOT NULL,
            total_len bigint NOT NULL,
            PRIMARY KEY (tbl, ns)
        )""")
    for table, fn, tbl, live, key in _TABLES:
        op.execute(_function(fn, tbl, live, key))
        for event, ref in (
            ("INSERT", "NEW TABLE AS nt"),
            ("DELETE", "OLD TABLE AS ot"),
            ("UPDATE", "OLD TABLE AS ot NEW TABLE AS nt"),
        ):
            op.execute(
                f"CREATE TRIGGER {fn}_{event.lower()} AFTER {event} ON {table} "
                f"REFERENCING {ref} FOR EACH STATEMENT EXECUTE FUNCTION {fn}()"
            )
        op.execute(
            f"CREATE TRIGGER {fn}_truncate AFTER TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {fn}()"
        )
        op.execute(f"""
            INSERT INTO hindsight_keyword_stats (tbl, ns, docs, total_len)
            SELECT '{tbl}', ns, count(*), COALESCE(sum(length(search_tsv)), 0)
            FROM {table} WHERE {live} GROUP BY ns""")


def downgrade() -> None:
    for table, fn, _, _, _ in _TABLES:
        for event in ("insert", "delete", "update", "truncate"):
            op.execute(f"DROP TRIGGER IF EXISTS {fn}_{event} ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS {fn}()")
    op.execute("DROP TABLE IF EXISTS hindsight_keyword_stats")
