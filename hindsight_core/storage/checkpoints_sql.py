"""SQL for LangGraph checkpoints: named statements and small pure builders.

Every public operation is a single statement where it can be (data-modifying
CTEs), so a put or a delete is atomic in autocommit mode and costs one round
trip. Nothing here executes anything; ``hindsight_core.checkpoints`` yields these
statements and the sync or async driver runs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import sqlalchemy as sa

C = "hindsight_checkpoints"
B = "hindsight_checkpoint_blobs"
W = "hindsight_checkpoint_writes"

# Up to this many rows go in a VALUES list of plain parameters (cheap to send);
# more go as arrays through unnest().
MAX_VALUES_ROWS = 32

_UPSERT_CHECKPOINT = f"""
    INSERT INTO {C} (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
                     checkpoint, metadata)
    VALUES (:thread_id, :checkpoint_ns, :checkpoint_id, :parent_checkpoint_id,
            CAST(:checkpoint AS jsonb), CAST(:metadata AS jsonb))
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
    DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata
"""


def _rows(n: int, columns: tuple[str, ...], lead: str) -> str:
    """``VALUES``-style rows ``(lead, :col0, ...)`` for ``n`` rows, or an unnest of arrays."""
    if n > MAX_VALUES_ROWS:
        arrays = ", ".join(f"CAST(:{c}s AS {t}[])" for c, t in (col.split(":") for col in columns))
        names = ", ".join(col.split(":")[0] for col in columns)
        return f"SELECT {lead}, {names} FROM unnest({arrays}) AS r({names})"
    values = ", ".join(
        "("
        + lead
        + ", "
        + ", ".join(f"CAST(:{c}{i} AS {t})" for c, t in (col.split(":") for col in columns))
        + ")"
        for i in range(n)
    )
    return f"VALUES {values}"


@lru_cache(maxsize=64)
def put_sql(n_blobs: int) -> sa.TextClause:
    """Upsert a checkpoint and insert ``n_blobs`` blobs (existing versions kept), atomically.

    Row parameters: ``channel<i>``, ``version<i>``, ``type<i>``, ``blob<i>`` (or the
    arrays ``channels``, ``versions``, ``types``, ``blobs`` past ``MAX_VALUES_ROWS``).
    """
    if n_blobs == 0:
        return sa.text(_UPSERT_CHECKPOINT)
    rows = _rows(
        n_blobs,
        ("channel:text", "version:text", "type:text", "blob:bytea"),
        ":thread_id, :checkpoint_ns",
    )
    return sa.text(f"""
    WITH blobs AS (
        INSERT INTO {B} (thread_id, checkpoint_ns, channel, version, type, blob)
        {rows}
        ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
    )
    {_UPSERT_CHECKPOINT}""")


@lru_cache(maxsize=128)
def put_writes_sql(n: int, upsert: bool) -> sa.TextClause:
    """Insert ``n`` pending writes of one task.

    Regular writes are never overwritten (a re-sent write is a no-op); with
    ``upsert`` (special writes: errors, interrupts, ...) they replace the earlier
    ones, as in PostgresSaver. Row parameters: ``idx<i>``, ``channel<i>``,
    ``type<i>``, ``blob<i>`` (or arrays ``idxs``, ... past ``MAX_VALUES_ROWS``).
    """
    rows = _rows(
        n,
        ("idx:int", "channel:text", "type:text", "blob:bytea"),
        ":thread_id, :checkpoint_ns, :checkpoint_id, :task_id, :task_path",
    )
    conflict = (
        ("DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob")
        if upsert
        else "DO NOTHING"
    )
    return sa.text(f"""
    INSERT INTO {W} (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
                     idx, channel, type, blob)
    {rows}
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict}""")


def row_params(rows: Sequence[Sequence[object]], columns: tuple[str, ...]) -> dict[str, object]:
    """The parameters of :func:`put_sql` / :func:`put_writes_sql` for these rows."""
    if len(rows) > MAX_VALUES_ROWS:
        return {f"{c}s": [r[j] for r in rows] for j, c in enumerate(columns)}
    return {f"{c}{i}": r[j] for i, r in enumerate(rows) for j, c in enumerate(columns)}


# One row per checkpoint, with its blobs (only the versions its channel_versions
# name) and its pending writes aggregated into arrays. ``{rows}`` selects the
# checkpoint rows first (filtered, ordered and limited), so the lateral joins run
# only for the rows returned.
_SELECT = f"""
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
           c.checkpoint, c.metadata, b.b_channels, b.b_types, b.b_blobs,
           w.w_tasks, w.w_channels, w.w_types, w.w_blobs
    FROM ({{rows}}) c
    LEFT JOIN LATERAL (
        SELECT array_agg(v.key) AS b_channels, array_agg(x.type) AS b_types,
               array_agg(x.blob) AS b_blobs
        FROM jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
        CROSS JOIN LATERAL (  -- LIMIT 1: one primary-key lookup per channel, never a scan
            SELECT bl.type, bl.blob FROM {B} bl
            WHERE bl.thread_id = c.thread_id AND bl.checkpoint_ns = c.checkpoint_ns
              AND bl.channel = (v.key COLLATE "C") AND bl.version = (v.value COLLATE "C")
              AND bl.type <> 'empty'
            LIMIT 1
        ) x
    ) b ON true
    LEFT JOIN LATERAL (
        SELECT array_agg(wr.task_id ORDER BY wr.task_path, wr.task_id, wr.idx) AS w_tasks,
               array_agg(wr.channel ORDER BY wr.task_path, wr.task_id, wr.idx) AS w_channels,
               array_agg(wr.type ORDER BY wr.task_path, wr.task_id, wr.idx) AS w_types,
               array_agg(wr.blob ORDER BY wr.task_path, wr.task_id, wr.idx) AS w_blobs
        FROM {W} wr
        WHERE wr.thread_id = c.thread_id AND wr.checkpoint_ns = c.checkpoint_ns
          AND wr.checkpoint_id = c.checkpoint_id
    ) w ON true
"""
_ROWS = f"SELECT * FROM {C} r WHERE "


def select_sql(where: str, tail: str = "") -> str:
    """The checkpoint query for rows matching ``where`` (columns of ``r``)."""
    return _SELECT.format(rows=_ROWS + where + tail) + (
        " ORDER BY c.checkpoint_id DESC" if tail else ""
    )


GET_BY_ID = sa.text(
    select_sql(
        "r.thread_id = :thread_id AND r.checkpoint_ns = :checkpoint_ns"
        " AND r.checkpoint_id = :checkpoint_id"
    )
)
# The latest checkpoint: the primary key gives it without a sort.
GET_LATEST = sa.text(
    select_sql(
        "r.thread_id = :thread_id AND r.checkpoint_ns = :checkpoint_ns",
        " ORDER BY r.checkpoint_id DESC LIMIT 1",
    )
)


@lru_cache(maxsize=64)
def list_sql(
    *, thread: bool, ns: bool, checkpoint_id: bool, metadata: bool, before: bool, limit: bool
) -> sa.TextClause:
    """The ``list`` query for one combination of given filters, newest first."""
    where = ["true"]
    if thread:
        where.append("r.thread_id = :thread_id")
    if ns:
        where.append("r.checkpoint_ns = :checkpoint_ns")
    if checkpoint_id:
        where.append("r.checkpoint_id = :checkpoint_id")
    if metadata:
        where.append("r.metadata @> CAST(:metadata AS jsonb)")
    if before:
        where.append("r.checkpoint_id < :before")
    tail = " ORDER BY r.checkpoint_id DESC" + (" LIMIT :limit" if limit else "")
    return sa.text(select_sql(" AND ".join(where), tail))


DELETE_THREADS = sa.text(
    f"""
    WITH c AS (DELETE FROM {C} WHERE thread_id = ANY(CAST(:thread_ids AS text[]))),
         b AS (DELETE FROM {B} WHERE thread_id = ANY(CAST(:thread_ids AS text[])))
    DELETE FROM {W} WHERE thread_id = ANY(CAST(:thread_ids AS text[]))
    """
)

# Checkpoints of the runs go, with their writes; blobs that no remaining
# checkpoint of the same thread and namespace refers to go too.
DELETE_FOR_RUNS = sa.text(
    f"""
    WITH gone AS (
        DELETE FROM {C} WHERE run_id = ANY(CAST(:run_ids AS text[]))
        RETURNING thread_id, checkpoint_ns, checkpoint_id
    ), w AS (
        DELETE FROM {W} wr USING gone g
        WHERE wr.thread_id = g.thread_id AND wr.checkpoint_ns = g.checkpoint_ns
          AND wr.checkpoint_id = g.checkpoint_id
    )
    SELECT DISTINCT thread_id, checkpoint_ns FROM gone
    """
)

DELETE_UNREFERENCED_BLOBS = sa.text(
    f"""
    DELETE FROM {B} bl
    WHERE bl.thread_id = :thread_id AND bl.checkpoint_ns = :checkpoint_ns
      AND NOT EXISTS (
        SELECT 1 FROM {C} c
        WHERE c.thread_id = bl.thread_id AND c.checkpoint_ns = bl.checkpoint_ns
          AND c.checkpoint -> 'channel_versions' ->> bl.channel = bl.version
      )
    """
)

COPY_THREAD = sa.text(
    f"""
    WITH c AS (
        INSERT INTO {C} (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id,
                         checkpoint, metadata)
        SELECT :target, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint,
               CASE WHEN metadata ? 'thread_id'
                    THEN jsonb_set(metadata, '{{thread_id}}', to_jsonb(CAST(:target AS text)))
                    ELSE metadata END
        FROM {C} WHERE thread_id = :source
        ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO NOTHING
    ), b AS (
        INSERT INTO {B} (thread_id, checkpoint_ns, channel, version, type, blob)
        SELECT :target, checkpoint_ns, channel, version, type, blob
        FROM {B} WHERE thread_id = :source
        ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
    )
    INSERT INTO {W} (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx,
                     channel, type, blob)
    SELECT :target, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
    FROM {W} WHERE thread_id = :source
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING
    """
)

# keep_latest, in one statement (one snapshot): the newest checkpoint of every
# (thread, namespace) stays with its writes and the blobs it names; its parent
# link is cut; everything else of those threads goes.
PRUNE_KEEP_LATEST = sa.text(
    f"""
    WITH heads AS (
        SELECT DISTINCT ON (thread_id, checkpoint_ns) thread_id, checkpoint_ns, checkpoint_id,
               checkpoint -> 'channel_versions' AS versions
        FROM {C} WHERE thread_id = ANY(CAST(:thread_ids AS text[]))
        ORDER BY thread_id, checkpoint_ns, checkpoint_id DESC
    ), gone AS (
        DELETE FROM {C} c
        WHERE c.thread_id = ANY(CAST(:thread_ids AS text[])) AND NOT EXISTS (
            SELECT 1 FROM heads h WHERE h.thread_id = c.thread_id
              AND h.checkpoint_ns = c.checkpoint_ns AND h.checkpoint_id = c.checkpoint_id)
        RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id
    ), w AS (
        DELETE FROM {W} wr USING gone g
        WHERE wr.thread_id = g.thread_id AND wr.checkpoint_ns = g.checkpoint_ns
          AND wr.checkpoint_id = g.checkpoint_id
    ), p AS (
        UPDATE {C} c SET parent_checkpoint_id = NULL FROM heads h
        WHERE c.thread_id = h.thread_id AND c.checkpoint_ns = h.checkpoint_ns
          AND c.checkpoint_id = h.checkpoint_id AND c.parent_checkpoint_id IS NOT NULL
    )
    DELETE FROM {B} bl
    WHERE bl.thread_id = ANY(CAST(:thread_ids AS text[])) AND NOT EXISTS (
        SELECT 1 FROM heads h WHERE h.thread_id = bl.thread_id
          AND h.checkpoint_ns = bl.checkpoint_ns AND h.versions ->> bl.channel = bl.version)
    """
)

# Threads (of the given ones) that hold DeltaChannel state, which keep_latest
# must not cut (their value is rebuilt from the chain of writes).
DELTA_THREADS = sa.text(
    f"""
    SELECT DISTINCT thread_id FROM {C}
    WHERE thread_id = ANY(CAST(:thread_ids AS text[])) AND (
        metadata ? 'counters_since_delta_snapshot' OR metadata ? 'delta_writes_versioned')
    """
)

COUNT_THREAD = sa.text(
    f"""
    SELECT (SELECT count(*) FROM {C} WHERE thread_id = :thread_id) AS checkpoints,
           (SELECT count(*) FROM {B} WHERE thread_id = :thread_id) AS blobs,
           (SELECT count(*) FROM {W} WHERE thread_id = :thread_id) AS writes,
           (SELECT coalesce(max(pg_column_size(checkpoint)), 0) FROM {C}
             WHERE thread_id = :thread_id) AS max_checkpoint_bytes,
           (SELECT coalesce(max(octet_length(blob)), 0) FROM {B}
             WHERE thread_id = :thread_id) AS max_blob_bytes
    """
)
