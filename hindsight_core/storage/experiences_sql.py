"""SQL for experience records: named statements and small pure builders.

Nothing here executes anything; ``runtime.flows`` yields these statements and the
sync or async driver runs them. Vector columns have no fixed dimension, so every
vector expression is written as ``embedding::vector(<dim>)``. The HNSW index that
``ensure_index_sql`` creates for the configured model is on the half-precision
``embedding::halfvec(<dim>)`` (:func:`ann`): nearest-neighbour ORDER BYs use that
expression, scores are computed from the full-precision vectors.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from .vectors import unpack_sql

T = "hindsight_experiences"

COLUMNS = (
    "ns, id, scene, trigger, action, outcome, lesson, confidence, importance, critical, "
    "source, score, use_count, occurrences, last_used_at, created_at, updated_at, "
    "archived_at, merged_into, merged_from, also_scenes, "
    "version, lineage, supersedes, superseded_by, superseded_at, superseded_reason, "
    "superseded_actor"
)


def scene_condition(scene: str = ":scene") -> str:
    """SQL true when record ``e`` belongs to the scene ``scene`` (an SQL expression):
    its own scene or one of the scenes of the writes merged into it (``also_scenes``,
    migration 0007). The b-tree on ``(ns, scene)`` and the GIN index on
    ``also_scenes`` serve the two halves."""
    return f"(e.scene = {scene} OR e.also_scenes @> ARRAY[{scene}])"


def decay_multiplier(since: str) -> str:
    """``decay_factor ** (time since <since> / decay_period)``, from the clock's ``:now``.

    Shared by experience records (since last use) and generic items (since last update);
    the parameters come from :func:`params_for_decay`.
    """
    return (
        "power(CAST(:decay_factor AS float8), "
        f"GREATEST(0, extract(epoch FROM (CAST(:now AS timestamptz) - {since})) "
        "/ CAST(:decay_period_s AS float8)))"
    )


# The score after decay, computed at read time from the clock passed as :now.
DECAYED = (
    "(CASE WHEN e.critical THEN e.score ELSE e.score * "
    f"{decay_multiplier('COALESCE(e.last_used_at, e.created_at)')} END)"
)

_E_COLUMNS = ", ".join("e." + c.strip() for c in COLUMNS.split(","))
SELECT_RECORD = f"SELECT {_E_COLUMNS}, {DECAYED} AS decayed_score FROM {T} e"


def head_of(e: str = "e") -> str:
    """The id a write near record ``e`` merges into (migration 0011): ``e`` itself
    when current, else the live head of its chain of versions (NULL when the head is
    archived or gone: the chain counts as archived, as the lookups skip those)."""
    return (
        f"CASE WHEN {e}.superseded_by IS NULL THEN {e}.id ELSE (SELECT h.id FROM {T} h "
        f"WHERE h.ns = {e}.ns AND h.lineage = {e}.lineage AND h.superseded_by IS NULL "
        "AND h.archived_at IS NULL) END"
    )


LOCK_NAMESPACE = sa.text("SELECT pg_advisory_xact_lock(hashtextextended('hindsight:' || :ns, 0))")


def vec(dim: int, expr: str = "e.embedding") -> str:
    """A vector column or parameter cast to the configured dimension (for scores)."""
    return f"(({expr})::vector({int(dim)}))"


def ann(dim: int, expr: str = "e.embedding") -> str:
    """The indexed expression: ``expr`` in half precision (for nearest-neighbour order).

    Half precision halves the index (198 → ~100 MB at 100k records of 384 dims), makes
    an HNSW insert cheaper and lets
    models of up to 4,000 dimensions be indexed (2,000 in full precision); the index's
    recall against exact search was no lower (0.997 vs 0.992 @5 on 150 queries).
    """
    return f"(({expr})::halfvec({int(dim)}))"


def index_name(dim: int) -> str:
    """The HNSW index for ``dim`` dimensions (migration 0006 replaced the
    full-precision ``hindsight_experiences_hnsw_<dim>``)."""
    return f"hindsight_experiences_halfvec_{int(dim)}"


def ensure_index_sql(dim: int) -> sa.TextClause:
    """The HNSW (cosine) index for vectors of ``dim`` dimensions."""
    return sa.text(
        f"CREATE INDEX IF NOT EXISTS {index_name(dim)} ON {T} "
        f"USING hnsw ({ann(dim, 'embedding')} halfvec_cosine_ops) WHERE archived_at IS NULL"
    )


def index_exists_sql(dim: int) -> sa.TextClause:
    """One row if the HNSW index for ``dim`` exists (checked before ``CREATE INDEX IF NOT
    EXISTS``, which takes a SHARE lock on the table even when the index is there: held to
    the end of a first write, it deadlocked against concurrent writers)."""
    return sa.text(
        f"SELECT 1 FROM pg_class WHERE relname = '{index_name(dim)}' "
        "AND relkind = 'i' AND pg_table_is_visible(oid)"
    )


def drop_index_sql(dim: int) -> sa.TextClause:
    return sa.text(f"DROP INDEX IF EXISTS {index_name(dim)}")


# Not a row the current transaction inserted or updated (none when it has no id yet).
NOT_OWN = " AND e.xmin IS DISTINCT FROM pg_current_xact_id_if_assigned()::xid"


@lru_cache(maxsize=8)
def nearest_many(dim: int, k: int = 3, *, own_rows: bool = True) -> sa.TextClause:
    """The ``k`` nearest live records, in one namespace, for each of many vectors.

    ``own_rows=False``: not the rows the current transaction wrote (their ``xmin`` is
    its id), so that, in the transaction, the answer is what another connection reads.

    ``:vectors`` is a :func:`vectors.vectors_param` of ``:n`` vectors, unpacked once,
    up front (``MATERIALIZED``): converting inside the lateral subquery would redo it
    for every row compared (with text literals, a batch's lookup grew with batch size
    times stored records).

    A superseded record found near a vector answers with its chain's head
    (:func:`head_of`): a write never merges into an old version (docs/versions.md).
    """
    q = "q.v"
    return sa.text(
        f"""
        WITH q AS MATERIALIZED ({unpack_sql("vectors", dim, "CAST(:n AS int)")})
        SELECT q.i AS i, n.id, n.lesson, n.trigger, n.similarity
        FROM q CROSS JOIN LATERAL (
            SELECT {head_of()} AS id, e.lesson, e.trigger,
                1 - ({vec(dim)} <=> {q}) AS similarity
            FROM {T} e
            WHERE e.ns = :ns AND e.archived_at IS NULL{"" if own_rows else NOT_OWN}
            ORDER BY {ann(dim)} <=> {ann(dim, q)}
            LIMIT {int(k)}
        ) n
        WHERE n.id IS NOT NULL
        ORDER BY q.i, n.similarity DESC
        """
    )


MARK_HELPFUL = sa.text(
    f"""
    UPDATE {T} e SET score = {DECAYED} + :bonus, use_count = e.use_count + 1,
        last_used_at = :now, updated_at = :now
    WHERE e.ns = :ns AND e.id = :id
    RETURNING e.id
    """
)

MARK_UNHELPFUL = sa.text(
    f"""
    UPDATE {T} e SET score = GREATEST(0, e.score - :bonus), use_count = e.use_count + 1,
        updated_at = :now
    WHERE e.ns = :ns AND e.id = :id
    RETURNING e.id
    """
)

GET = sa.text(f"{SELECT_RECORD} WHERE e.ns = :ns AND e.id = ANY(CAST(:ids AS uuid[]))")

# The live records among :ids, their rows locked in id order (one order for every
# multi-row update of records; after the namespace lock, so no eviction is half-way).
LOCK_LIVE = sa.text(
    f"SELECT id FROM {T} WHERE ns = :ns AND id = ANY(CAST(:ids AS uuid[]))"
    " AND archived_at IS NULL ORDER BY id FOR UPDATE"
)

DELETE = sa.text(f"DELETE FROM {T} WHERE ns = :ns AND id = :id RETURNING id")

ARCHIVE = sa.text(
    f"UPDATE {T} SET archived_at = :now, updated_at = :now "
    "WHERE ns = :ns AND id = :id AND archived_at IS NULL RETURNING id"
)

RESTORE = sa.text(
    f"UPDATE {T} SET archived_at = NULL, merged_into = NULL, updated_at = :now, "
    "score = GREATEST(score, :restore_score), last_used_at = :now "
    "WHERE ns = :ns AND id = :id AND archived_at IS NOT NULL RETURNING id"
)

SET_CRITICAL = sa.text(
    f"UPDATE {T} SET critical = :critical, updated_at = :now WHERE ns = :ns AND id = :id "
    "RETURNING id"
)

EDIT = sa.text(
    f"""
    UPDATE {T} SET scene = :scene, trigger = :trigger, action = :action, outcome = :outcome,
        lesson = :lesson, importance = :importance, critical = :critical, updated_at = :now,
        also_scenes = array_remove(also_scenes, CAST(:scene AS text)),
        embedding = CAST(:embedding AS vector), embed_key = :embed_key,
        search_tsv = CAST(:search_tsv AS tsvector)
    WHERE ns = :ns AND id = :id RETURNING id
    """
)

ARCHIVE_MERGED = sa.text(
    f"UPDATE {T} SET archived_at = :now, merged_into = :into, updated_at = :now "
    "WHERE ns = :ns AND id = ANY(CAST(:ids AS uuid[])) AND archived_at IS NULL RETURNING id"
)

# A superseded version is history: it never decays into eviction on its own (its
# chain is evicted by its head's score, and the head keeps the chain's links).
_EVICTABLE = (
    "e.archived_at IS NULL AND NOT e.critical AND e.superseded_by IS NULL "
    f"AND {DECAYED} < :evict_below"
)
# The namespaces with records to evict, in order.
EVICTABLE_NAMESPACES = sa.text(f"SELECT DISTINCT e.ns FROM {T} e WHERE {_EVICTABLE} ORDER BY e.ns")

# Eviction in the namespaces ``:spaces`` first takes their namespace locks
# (LOCK_NAMESPACE's), in namespace order as an import takes them (in hash order, an
# eviction and an import each holding one of two namespaces' locks deadlocked:
# tests/test_lock_order_import.py), and as a write does, before touching a row: a write
# holds its namespace's keyword counter (insert trigger) when it merges into a record,
# and an eviction that had archived that record first wanted the counter (update
# trigger), a deadlock (tests/test_lock_order.py). After the wait, a record a write
# merged into is re-checked against the condition (no longer decayed), and a write's
# lookup after its lock finds the evicted records archived. The caller bounds the
# namespaces per transaction (each lock takes a slot of the server's lock table).
EVICT = sa.text(
    f"""
    WITH lk AS (
        SELECT count(pg_advisory_xact_lock(hashtextextended('hindsight:' || s.ns, 0))) AS n
        FROM (
            SELECT DISTINCT s.ns COLLATE "C" AS ns FROM unnest(CAST(:spaces AS text[])) AS s(ns)
            ORDER BY 1
        ) s
    )
    UPDATE {T} e SET archived_at = :now, updated_at = :now
    WHERE e.ns = ANY(CAST(:spaces AS text[])) AND {_EVICTABLE} AND (SELECT n FROM lk) >= 0
    RETURNING e.ns, e.id
    """
)


def list_conditions(*, scene: bool, archived: bool | None, all_ns: bool = False) -> str:
    """The WHERE clause of a record listing (``e`` is the table): namespace, scene,
    archived or live. Shared by :func:`list_sql` and ``inspect_sql.count_sql``."""
    where = ["TRUE" if all_ns else "e.ns = :ns"]
    if scene:
        where.append(scene_condition())
    if archived is True:
        where.append("e.archived_at IS NOT NULL")
    elif archived is False:
        where.append("e.archived_at IS NULL")
    return " AND ".join(where)


def list_sql(
    *, order_by: str, descending: bool, scene: bool, archived: bool | None, all_ns: bool
) -> sa.TextClause:
    """Records of a namespace (or all), for listing, export and the inspector."""
    order_cols = {
        "created_at": "e.created_at",
        "updated_at": "e.updated_at",
        "score": "decayed_score",
        "use_count": "e.use_count",
        "occurrences": "e.occurrences",
        "last_used_at": "e.last_used_at",
        "lesson": "e.lesson",
    }
    direction = "DESC NULLS LAST" if descending else "ASC NULLS FIRST"
    return sa.text(
        f"{SELECT_RECORD} WHERE {list_conditions(scene=scene, archived=archived, all_ns=all_ns)} "
        f"ORDER BY {order_cols[order_by]} {direction}, e.ns, e.id LIMIT :limit OFFSET :offset"
    )


SORTABLE = (
    "created_at",
    "updated_at",
    "score",
    "use_count",
    "occurrences",
    "last_used_at",
    "lesson",
)

FILTERABLE = {
    "critical": ("e.critical", "bool"),
    "outcome": ("e.outcome", "text"),
    "source.agent": ("e.source->>'agent'", "text"),
    "source.task": ("e.source->>'task'", "text"),
    "source.tool": ("e.source->>'tool'", "text"),
}


def stats_sql() -> sa.TextClause:
    """Counts for ``stats``; ``:ns`` NULL means every namespace."""
    in_ns = "(CAST(:ns AS text) IS NULL OR ns = :ns)"
    return sa.text(
        f"""
        SELECT
          (SELECT count(*) FROM {T} WHERE archived_at IS NULL AND {in_ns}) AS records,
          (SELECT count(*) FROM {T} WHERE archived_at IS NOT NULL AND {in_ns}) AS archived,
          (SELECT count(DISTINCT ns) FROM {T} WHERE {in_ns}) AS namespaces,
          (SELECT count(*) FROM hindsight_items WHERE {in_ns}) AS items,
          (SELECT COALESCE(jsonb_object_agg(scene, n), '{{}}') FROM
              (SELECT scene, count(*) AS n FROM {T} WHERE archived_at IS NULL AND {in_ns}
               GROUP BY scene) s) AS scenes,
          (SELECT count(*) FROM hindsight_llm_usage) AS llm_calls,
          (SELECT COALESCE(sum(prompt_tokens), 0) FROM hindsight_llm_usage) AS llm_prompt_tokens,
          (SELECT COALESCE(sum(completion_tokens), 0) FROM hindsight_llm_usage)
              AS llm_completion_tokens
        """
    )


GET_META = sa.text("SELECT value FROM hindsight_meta WHERE key = :key")
SET_META = sa.text(
    "INSERT INTO hindsight_meta (key, value) VALUES (:key, CAST(:value AS jsonb)) "
    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
)
LOCK_META = sa.text("SELECT pg_advisory_xact_lock(hashtextextended('hindsight:meta', 0))")

# Reindex keeps writers out of the records' table for its transaction (reads go on). It
# re-embeds stale records row by row in (ns, id) order, in one transaction over every
# namespace: a write holding its namespace's lock and a record it merged into waited for
# a record the reindex held, which waited for the write's (a deadlock:
# tests/test_lock_order_admin.py), and an edit between the reindex's read and its update
# got the old text's vector. Namespace locks instead would take one slot of the server's
# lock table per namespace until the commit. Taken after LOCK_META; a writer takes the
# meta lock only in a set-up transaction of its own, before its write's first statement.
LOCK_WRITERS_OUT = sa.text(f"LOCK TABLE {T} IN EXCLUSIVE MODE")

REINDEX_BATCH = sa.text(
    f"SELECT ns, id, scene, trigger, action, outcome, lesson, embed_key FROM {T} "
    "WHERE (ns, id) > (:ns, :id) "
    "ORDER BY ns, id LIMIT :limit"
)
REINDEX_UPDATE = sa.text(
    f"UPDATE {T} SET embedding = CAST(:embedding AS vector), embed_key = :embed_key "
    "WHERE ns = :ns AND id = :id"
)
COUNT_ALL = sa.text(f"SELECT count(*) FROM {T}")
# Whether any record (live or archived) was ever embedded into this database.
NO_RECORDS = sa.text(f"SELECT NOT EXISTS (SELECT 1 FROM {T}) AS empty")
EXISTING_IDS = sa.text(f"SELECT ns, id FROM {T} WHERE id = ANY(CAST(:ids AS uuid[]))")


def params_for_decay(settings: Any, now: Any) -> dict[str, Any]:
    return {
        "now": now,
        "decay_factor": settings.decay_factor,
        "decay_period_s": settings.decay_period_days * 86400.0,
    }


# The dedup lookup's HNSW search effort, set for the write transaction (whatever the
# server's default). A shorter candidate list is cheaper but misses near-duplicates in
# large namespaces: at 100k records, a rewording at cosine ~0.99 was not among the 3
# nearest for 1.2 % of 1,000 stored records with ef_search = 20, 0.6 % with 40 (this),
# 0.1 % with 64; none at 10k. write_many: 40 costs ~5 % more than 20, 64 ~20 %. Set by
# ``scan_sql.DEDUP_VECTORS``.
DEDUP_EF_SEARCH = 40

# How long a write's helper statement on a connection of its own (a side connection's
# dedup lookup, a new table's ANALYZE) waits for a lock (ms). Only DDL makes them wait
# so long: a reindex dropping the index or locking writers out, queued behind the
# write's transaction, which waits for them (a cycle through the client the server
# cannot see). Then they run in that transaction, which holds the table's lock, so
# goes first (``runtime/driver.py``: ``Pipelined.again``, ``Unit.gives_up``).
GIVE_UP_LOCK_MS = 200
GIVE_UP_LOCKS = sa.text(f"SELECT set_config('lock_timeout', '{GIVE_UP_LOCK_MS}', true)")
