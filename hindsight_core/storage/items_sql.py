"""SQL for generic items (LangGraph store items, LangMem memories).

Named statements and pure builders only; ``items.flows`` yields them and the sync
or async driver runs them. Item vectors live in ``hindsight_item_vectors`` without a
fixed dimension: every vector expression is ``embedding::<vector_type>(<dims>)`` and
the ANN index is a partial expression index on exactly that expression (rows of
another dimension are simply not in it), so the searches (``items_search_sql``) and
the index built by :func:`ensure_index_sql` must use the same :class:`VectorSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import sqlalchemy as sa

T = "hindsight_items"
V = "hindsight_item_vectors"
KEYWORD_STATS = "hindsight_keyword_stats"  # BM25 counters (migration 0009)

Distance = Literal["cosine", "inner_product", "l2"]
VectorType = Literal["vector", "halfvec"]
IndexKind = Literal["hnsw", "ivfflat", "flat"]

_OPERATOR = {"cosine": "<=>", "inner_product": "<#>", "l2": "<->"}
_OPCLASS = {"cosine": "cosine", "inner_product": "ip", "l2": "l2"}


@dataclass(frozen=True)
class VectorSpec:
    """How item vectors are compared and indexed."""

    dims: int
    distance: Distance = "cosine"
    vector_type: VectorType = "vector"
    kind: IndexKind = "hnsw"
    params: tuple[tuple[str, int], ...] = ()

    @property
    def index_name(self) -> str:
        return f"hindsight_item_vectors_{self.vector_type}_{self.kind}_{self.distance}_{self.dims}"

    def expr(self, column: str = "v.embedding") -> str:
        return f"(({column})::{self.vector_type}({int(self.dims)}))"

    def query(self) -> str:
        """The ``:qvec`` parameter (``real[]``) as this type, converted once per statement
        (an InitPlan): in a generic plan the cast of a parameter ran once per row."""
        return f"(SELECT CAST(CAST(:qvec AS vector) AS {self.vector_type}({int(self.dims)})))"

    def distance_sql(self, column: str = "v.embedding") -> str:
        """Smaller is nearer (the operator the index serves)."""
        return f"({self.expr(column)} {_OPERATOR[self.distance]} {self.query()})"

    def similarity_sql(self, column: str = "v.embedding") -> str:
        """The similarity PostgresStore reports: 1 - cosine distance, dot product, -L2."""
        d = self.distance_sql(column)
        return f"(1 - {d})" if self.distance == "cosine" else f"(-{d})"

    def dims_predicate(self, column: str = "v.embedding") -> str:
        return f"vector_dims({column}) = {int(self.dims)}"


def ensure_index_sql(spec: VectorSpec) -> sa.TextClause | None:
    """The ANN index for ``spec`` (``None`` for exact "flat" search)."""
    if spec.kind == "flat":
        return None
    opclass = f"{spec.vector_type}_{_OPCLASS[spec.distance]}_ops"
    with_ = ""
    if spec.params:
        with_ = " WITH (" + ", ".join(f"{k} = {int(v)}" for k, v in spec.params) + ")"
    return sa.text(
        f"CREATE INDEX IF NOT EXISTS {spec.index_name} ON {V} USING {spec.kind} "
        f"({spec.expr('embedding')} {opclass}){with_} WHERE {spec.dims_predicate('embedding')}"
    )


INDEX_EXISTS = sa.text("SELECT 1 FROM pg_class WHERE relname = :name AND relkind = 'i'")

# ---------------------------------------------------------------------- index health
# An ivfflat index trains its list centers on the rows there when it is built: built at
# setup, on an empty table, they are random until a REINDEX. How many vectors an index
# was built on is kept in ``hindsight_meta`` under this key + its name.
BUILT_KEY = "items_index_built:"

ANN_INDEXES = sa.text(
    f"""
    SELECT c.relname AS name, am.amname AS kind, c.reloptions AS options,
           (SELECT m.value FROM hindsight_meta m WHERE m.key = '{BUILT_KEY}' || c.relname)
           AS built
    FROM pg_index x
    JOIN pg_class c ON c.oid = x.indexrelid
    JOIN pg_am am ON am.oid = c.relam
    WHERE x.indrelid = '{V}'::regclass AND x.indisvalid AND am.amname IN ('hnsw', 'ivfflat')
    ORDER BY c.relname
    """
)
# Exact, one scan of the vectors (status, rebuild); at setup the planner's estimate.
ROWS_BY_DIMS = sa.text(f"SELECT vector_dims(embedding) AS dims, count(*) AS n FROM {V} GROUP BY 1")
ROWS_ESTIMATE = sa.text(f"SELECT reltuples AS n FROM pg_class WHERE oid = '{V}'::regclass")


def index_dims(name: str) -> int:
    """The dimension in an index name made by :attr:`VectorSpec.index_name`."""
    return int(name.rsplit("_", 1)[1])


def count_rows_sql(dims: int) -> sa.TextClause:
    """The vectors an index of dimension ``dims`` holds (its partial predicate)."""
    return sa.text(f"SELECT count(*) AS n FROM {V} WHERE vector_dims(embedding) = {int(dims)}")


def reindex_sql(name: str) -> sa.TextClause:
    """Rebuild one item ANN index (a name :data:`ANN_INDEXES` returned). In the
    transaction: writes of item vectors and searches through it wait until it is done."""
    if not name.startswith(V + "_") or not name.replace("_", "").isalnum():
        raise ValueError(f"not an item vector index: {name!r}")
    return sa.text(f"REINDEX INDEX {name}")


# ---------------------------------------------------------------------- reads

ITEM_COLS = "i.ns, i.key, i.value, i.created_at, i.updated_at, i.expires_at, i.ttl_minutes"

GET_MANY = sa.text(
    f"""
    SELECT p.i AS idx, {ITEM_COLS}
    FROM unnest(CAST(:ns AS text[]), CAST(:keys AS text[])) WITH ORDINALITY AS p(ns, key, i)
    JOIN {T} i ON i.ns = p.ns AND i.key = p.key
    """
)

# Best effort: rows another transaction holds are skipped (it is writing or refreshing
# them), so a refresh never waits and cannot deadlock. Expired rows are not revived.
REFRESH = sa.text(
    f"""
    UPDATE {T} i SET expires_at = CAST(:now AS timestamptz) + i.ttl_minutes * interval '1 minute'
    FROM (
        SELECT t.ns, t.key FROM {T} t
        JOIN unnest(CAST(:ns AS text[]), CAST(:keys AS text[])) AS p(ns, key)
          ON t.ns = p.ns AND t.key = p.key
        WHERE t.ttl_minutes IS NOT NULL
          AND (t.expires_at IS NULL OR t.expires_at > CAST(:now AS timestamptz))
        ORDER BY t.ns, t.key FOR UPDATE OF t SKIP LOCKED
    ) r
    WHERE i.ns = r.ns AND i.key = r.key
    """
)


def _key_lock(ns: str, key: str) -> str:
    """The advisory lock's key of one item (``ns``, ``key``: SQL expressions)."""
    return f"hashtextextended('hindsight:item:' || {ns} || chr(31) || {key}, 0)"


def namespace_lock(ns: str) -> str:
    """The advisory lock's key of one namespace's items (``ns``: an SQL expression).

    A batch takes it shared for each namespace it writes, before its keys' locks; dropping
    the namespace takes it exclusive (``namespace_sql.LOCK_ITEMS``), so a batch is wholly
    before or after the drop. A key apart from every other lock's: no label starts with
    chr(31)."""
    return f"hashtextextended('hindsight:' || chr(31) || 'items:' || {ns}, 0)"


SWEEP_CHUNK = 1000  # keys per sweep statement: each holds a slot of the server's lock table
# The sweep deletes the expired items :limit at a time, each under its key's lock as a
# batch takes them: a batch locks its keys, then their vectors' rows, then the items'
# rows, and a sweep that locked an expired item's row and then waited for its vector
# row (ON DELETE CASCADE) deadlocked with a batch putting that key
# (tests/test_lock_order.py). A key whose lock is held is skipped (its writer decides
# what it becomes, or another sweep deletes it): the sweep never waits for a key, and
# it touches only the rows of keys it holds (a row a refresh holds is skipped too; one
# refreshed meanwhile is re-checked by FOR UPDATE). The keyword counters are then
# locked by the vectors' delete trigger, which fires once for the statement's cascade,
# in namespace order, as a batch takes them. The keys a chunk looked at and did not
# delete come back (``skip_ns``, ``skip_keys``), and the next chunks leave them out:
# no order to keep, so each chunk reads only its own rows. The caller commits each
# statement (autocommit): the key locks last until then.
SWEEP = sa.text(
    f"""
    WITH s AS MATERIALIZED (
        SELECT * FROM unnest(CAST(:skip_ns AS text[]), CAST(:skip_keys AS text[])) AS s(ns, key)
    ), c AS MATERIALIZED (
        SELECT t.ns, t.key FROM {T} t
        WHERE t.expires_at IS NOT NULL AND t.expires_at <= :now
          AND NOT EXISTS (SELECT 1 FROM s WHERE s.ns = t.ns AND s.key = t.key)
        LIMIT :limit
    ), k AS MATERIALIZED (
        SELECT c.ns, c.key FROM c WHERE pg_try_advisory_xact_lock({_key_lock("c.ns", "c.key")})
    ), d AS (
        DELETE FROM {T} i USING (
            SELECT t.ns, t.key FROM {T} t JOIN k ON t.ns = k.ns AND t.key = k.key
            WHERE t.expires_at IS NOT NULL AND t.expires_at <= :now
            FOR UPDATE OF t SKIP LOCKED
        ) x
        WHERE i.ns = x.ns AND i.key = x.key RETURNING i.ns, i.key
    ), kept AS (
        SELECT c.ns, c.key FROM c WHERE NOT EXISTS (
            SELECT 1 FROM d WHERE d.ns = c.ns AND d.key = c.key)
    )
    SELECT (SELECT count(*) FROM d) AS n, (SELECT count(*) FROM c) AS seen,
           ARRAY(SELECT ns FROM kept) AS skip_ns, ARRAY(SELECT key FROM kept) AS skip_keys
    """
)

# ---------------------------------------------------------------------- writes

# Writers lock the keys they put, in one global order, before touching any row: two
# batches writing overlapping keys then serialize instead of deadlocking. The lock is
# a CTE that every write in the first statement waits on (a one-time filter), so it
# costs no extra round trip. First (the one-time filter of the key locks' scan), each
# namespace's items lock, shared: dropping a namespace (its items' rows, then their
# vectors') deadlocked with a batch holding a vector row and wanting its item's row,
# and a batch that put an item and added one kept the new item alone
# (tests/test_lock_order_admin.py).
_LOCK_CTE = f"""lk AS (
        SELECT count(pg_advisory_xact_lock(h)) AS n FROM (
            SELECT DISTINCT {_key_lock("p.ns", "p.key")} AS h
            FROM unnest(CAST(:lk_ns AS text[]), CAST(:lk_keys AS text[])) AS p(ns, key)
            WHERE (SELECT count(pg_advisory_xact_lock_shared(g)) FROM (
                SELECT DISTINCT {namespace_lock("n.ns")} AS g
                FROM unnest(CAST(:lk_ns AS text[])) AS n(ns) ORDER BY g) ns) >= 0
            ORDER BY h
        ) s
    )"""
_LOCKED = "(SELECT n FROM lk) >= 0"

# A batch over several namespaces then locks their BM25 counter rows (kept by migration
# 0009's triggers at the end of each statement), in namespace order: each trigger of a
# statement (UPDATE, INSERT, DELETE) locks its namespaces' rows in order, but they fire
# one after the other, so a batch that changed a text in namespace b and added an item
# in a held the counter of b while waiting for a's, and a second batch the other way
# round deadlocked with it (tests/test_lock_order.py). Locked before the triggers fire
# (in ``upsert_sql`` after the vectors' insert), the triggers find them held. A
# namespace's first counter row comes from the INSERT trigger (one firing, in order).
# A batch of one namespace skips this: one row has no order.
_COUNTERS_CTE = f"""lc AS (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM {KEYWORD_STATS} s
            WHERE s.tbl = 'i' AND s.ns = ANY(CAST(:lk_ns AS text[])) AND {_LOCKED}
            ORDER BY s.ns FOR UPDATE
        ) c
    )"""


def _lock(lock: bool, counters: bool) -> tuple[str, str]:
    """The locking CTEs (each followed by a comma) and the condition that waits on them."""
    if not lock:
        return "", "TRUE"
    if counters:
        return f"{_LOCK_CTE}, {_COUNTERS_CTE},", "(SELECT n FROM lc) >= 0"
    return f"{_LOCK_CTE},", _LOCKED


@lru_cache(maxsize=4)
def delete_many_sql(lock: bool, counters: bool = False) -> sa.TextClause:
    """Delete items (their vectors cascade); ``lock``: take the keys' locks first
    (``counters``: then the namespaces' keyword counters)."""
    ctes, locked = _lock(lock, counters)
    return sa.text(
        f"{'WITH ' + ctes.rstrip(',') if lock else ''} DELETE FROM {T} i "
        "USING unnest(CAST(:ns AS text[]), CAST(:keys AS text[])) AS p(ns, key) "
        f"WHERE i.ns = p.ns AND i.key = p.key {'AND ' + locked if lock else ''}"
    )


@lru_cache(maxsize=4)
def upsert_sql(lock: bool, counters: bool = False) -> sa.TextClause:
    """Items, then vectors, in one statement (the foreign key is checked at its end).

    Stale vector fields of re-put items are removed (PostgresStore keeps them).
    ``lock`` and ``counters``: as for :func:`delete_many_sql`.
    """
    ctes, cond = _lock(lock, counters)
    locked = f"AND {cond}" if lock else ""
    # The vectors' insert (the HNSW work) waits for the keys only; the counters are
    # locked by the items' insert and the stale vectors' delete, which (referenced by
    # nothing) run after it, before the statement's triggers: so batches over the same
    # namespaces insert their vectors at the same time.
    keys_locked = f"AND {_LOCKED}" if lock else ""
    return sa.text(
        f"""
        WITH {ctes} up AS (
            INSERT INTO {T} AS i (ns, key, value, created_at, updated_at, expires_at,
                                  ttl_minutes)
            SELECT p.ns, p.key, p.value, :now, :now, p.expires_at, p.ttl
            FROM unnest(CAST(:ns AS text[]), CAST(:keys AS text[]), CAST(:vals AS jsonb[]),
                        CAST(:expires AS timestamptz[]), CAST(:ttls AS float8[]))
                 AS p(ns, key, value, expires_at, ttl)
            WHERE TRUE {locked}
            ORDER BY p.ns, p.key
            ON CONFLICT (ns, key) DO UPDATE SET value = EXCLUDED.value,
                updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at,
                ttl_minutes = EXCLUDED.ttl_minutes
            RETURNING 1
        ), nv AS (
            SELECT n.ns, n.key, n.field, n.tsv, CAST((CAST(:v_embs AS real[]))[
                (n.i - 1) * CAST(:v_dim AS int) + 1 : n.i * CAST(:v_dim AS int)] AS vector) AS emb
            FROM unnest(CAST(:v_ns AS text[]), CAST(:v_keys AS text[]),
                        CAST(:v_fields AS text[]), CAST(:v_tsv AS text[]))
                 WITH ORDINALITY AS n(ns, key, field, tsv, i)
        ), stale AS (
            DELETE FROM {V} v
            USING unnest(CAST(:r_ns AS text[]), CAST(:r_keys AS text[])) AS r(ns, key)
            WHERE v.ns = r.ns AND v.key = r.key {locked}
              AND NOT EXISTS (SELECT 1 FROM nv WHERE nv.ns = v.ns AND nv.key = v.key
                              AND nv.field = v.field)
            RETURNING 1
        )
        INSERT INTO {V} AS v (ns, key, field, embedding, search_tsv)
        SELECT nv.ns, nv.key, nv.field, nv.emb, CAST(nv.tsv AS tsvector)
        FROM nv WHERE TRUE {keys_locked} ORDER BY nv.ns, nv.key, nv.field
        ON CONFLICT (ns, key, field) DO UPDATE SET embedding = EXCLUDED.embedding,
            search_tsv = EXCLUDED.search_tsv
        """
    )
