"""Checkpoint operations as flows (see ``runtime/flow.py``), in bytes and JSON.

Run by :class:`~hindsight_core.checkpoints.Checkpoints` and
:class:`~hindsight_core.checkpoints.AsyncCheckpoints`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError
from ..runtime.flow import Flow, Sql
from ..storage import checkpoints_sql as q

BlobIn = tuple[str, str, str, bytes | None]
"""``(channel, version, type, data)`` of one channel value stored apart."""
WriteIn = tuple[int, str, str, bytes]
"""``(idx, channel, type, data)`` of one pending write."""

PRUNE_STRATEGIES = ("keep_latest", "delete")


@dataclass
class CheckpointRow:
    """One stored checkpoint with its blobs and pending writes (raw bytes)."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    blobs: list[tuple[str, str, bytes]] = field(default_factory=list)
    """``(channel, type, data)`` for each channel value stored apart."""
    writes: list[tuple[str, str, str, bytes]] = field(default_factory=list)
    """``(task_id, channel, type, data)``, in (task_path, task_id, idx) order."""


def _row(r: dict[str, Any]) -> CheckpointRow:
    blobs = (
        list(zip(r["b_channels"], r["b_types"], r["b_blobs"], strict=True))
        if r["b_channels"]
        else []
    )
    writes = (
        list(zip(r["w_tasks"], r["w_channels"], r["w_types"], r["w_blobs"], strict=True))
        if r["w_tasks"]
        else []
    )
    return CheckpointRow(
        thread_id=r["thread_id"],
        checkpoint_ns=r["checkpoint_ns"],
        checkpoint_id=r["checkpoint_id"],
        parent_checkpoint_id=r["parent_checkpoint_id"],
        checkpoint=r["checkpoint"],
        metadata=r["metadata"],
        blobs=blobs,
        writes=writes,
    )


def _json(value: Mapping[str, Any] | str) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def put_flow(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str | None,
    checkpoint: Mapping[str, Any] | str,
    metadata: Mapping[str, Any] | str,
    blobs: Sequence[BlobIn] = (),
) -> Flow[None]:
    """Store a checkpoint (upsert) and the blobs of its new channel versions (atomic)."""
    if not checkpoint_id:
        raise ValidationError("a checkpoint needs an id", field="checkpoint_id")
    yield Sql(
        q.put_sql(len(blobs)),
        {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_checkpoint_id,
            "checkpoint": _json(checkpoint),
            "metadata": _json(metadata),
            **q.row_params(blobs, ("channel", "version", "type", "blob")),
        },
        fetch="none",
        autocommit=True,
    )


def put_writes_flow(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    writes: Sequence[WriteIn],
    *,
    task_path: str = "",
    upsert: bool = False,
) -> Flow[None]:
    """Store pending writes of a task (idempotent per ``(task_id, idx)``); ``upsert``
    replaces earlier writes with the same index."""
    if not writes:
        return
    by_idx: dict[int, WriteIn] = {}
    for w in writes:  # one row per index: the last wins on upsert, the first otherwise
        if upsert or w[0] not in by_idx:
            by_idx[w[0]] = w
    rows = list(by_idx.values())
    yield Sql(
        q.put_writes_sql(len(rows), upsert),
        {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            **q.row_params(rows, ("idx", "channel", "type", "blob")),
        },
        fetch="none",
        autocommit=True,
    )


def get_flow(
    thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
) -> Flow[CheckpointRow | None]:
    """One checkpoint by id, or the latest of the thread and namespace; None if absent."""
    params = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id:
        rows = yield from Sql(
            q.GET_BY_ID, {**params, "checkpoint_id": checkpoint_id}, autocommit=True
        )
    else:
        rows = yield from Sql(q.GET_LATEST, params, autocommit=True)
    return _row(rows[0]) if rows else None


def list_flow(
    thread_id: str | None = None,
    checkpoint_ns: str | None = None,
    *,
    checkpoint_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    before: str | None = None,
    limit: int | None = None,
) -> Flow[list[CheckpointRow]]:
    """Checkpoints matching every given filter, newest first; ``metadata`` matches by
    JSON containment."""
    statement = q.list_sql(
        thread=thread_id is not None,
        ns=checkpoint_ns is not None,
        checkpoint_id=bool(checkpoint_id),
        metadata=bool(metadata),
        before=before is not None,
        limit=limit is not None,
    )
    params: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "checkpoint_id": checkpoint_id,
        "metadata": _json(metadata) if metadata else None,
        "before": before,
        "limit": limit,
    }
    rows = yield from Sql(
        statement, {k: v for k, v in params.items() if v is not None}, autocommit=True
    )
    return [_row(r) for r in rows]


def delete_threads_flow(thread_ids: Sequence[str]) -> Flow[None]:
    """Everything of the given threads, in every namespace."""
    if thread_ids:
        yield Sql(q.DELETE_THREADS, {"thread_ids": list(thread_ids)}, fetch="none", autocommit=True)


def delete_for_runs_flow(run_ids: Sequence[str]) -> Flow[int]:
    """Checkpoints whose ``metadata.run_id`` is given, their writes and orphaned blobs."""
    if not run_ids:
        return 0
    touched = yield from Sql(q.DELETE_FOR_RUNS, {"run_ids": [str(r) for r in run_ids]})
    for t in touched:
        yield Sql(q.DELETE_UNREFERENCED_BLOBS, dict(t), fetch="none")
    return len(touched)


def copy_thread_flow(source_thread_id: str, target_thread_id: str) -> Flow[None]:
    """Copy every checkpoint, blob and write of a thread (every namespace) under
    another id (same checkpoint ids)."""
    yield Sql(
        q.COPY_THREAD,
        {"source": source_thread_id, "target": target_thread_id},
        fetch="none",
        autocommit=True,
    )


def prune_flow(thread_ids: Sequence[str], strategy: str = "keep_latest") -> Flow[None]:
    """``keep_latest``: only the newest checkpoint per namespace; ``delete``: all."""
    if isinstance(thread_ids, str):
        raise TypeError("thread_ids must be a sequence of thread ids, not a str")
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"unknown prune strategy {strategy!r}; use one of {PRUNE_STRATEGIES}")
    ids = list(thread_ids)
    if not ids:
        return
    if strategy == "delete":
        yield from delete_threads_flow(ids)
        return
    delta = yield from Sql(q.DELTA_THREADS, {"thread_ids": ids})
    if delta:
        raise NotImplementedError(
            "keep_latest can't prune threads that use a DeltaChannel: "
            + ", ".join(sorted(r["thread_id"] for r in delta))
        )
    yield Sql(q.PRUNE_KEEP_LATEST, {"thread_ids": ids}, fetch="none")


def thread_stats_flow(thread_id: str) -> Flow[dict[str, int]]:
    """Row counts and the largest checkpoint row / blob of a thread (for tests, ops)."""
    rows = yield from Sql(q.COUNT_THREAD, {"thread_id": thread_id}, autocommit=True)
    return {k: int(v) for k, v in rows[0].items()}
