"""Conversion between LangGraph checkpoint types and the core's checkpoint rows.

Pure functions used by :class:`~hindsight_adapters.langgraph.HindsightCheckpointer`;
values are serialized with the checkpointer's ``serde`` passed in at call time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from hindsight_core.checkpoints import BlobIn, CheckpointRow, WriteIn

__all__ = ["get_args", "list_args", "put_args", "to_tuple", "writes_args"]

# Made once: ``json.dumps`` with any option builds a new encoder per call.
_encode = json.JSONEncoder(separators=(",", ":")).encode
_encode_metadata = json.JSONEncoder(separators=(",", ":"), default=str).encode


def put_args(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> tuple[tuple[Any, ...], RunnableConfig]:
    """Arguments of ``Checkpoints.put`` for a LangGraph ``put``, and the config it returns.

    Primitive channel values stay inline in the row; the others become blobs,
    written only for channels in ``new_versions``.
    """
    conf = config["configurable"]
    thread_id = conf["thread_id"]
    ns = conf.get("checkpoint_ns") or ""
    inline: dict[str, Any] = {}
    apart: dict[str, Any] = {}
    for k, v in checkpoint["channel_values"].items():
        if isinstance(v, _DeltaSnapshot):
            apart[k], inline[k] = v, True
        elif _inline(v):
            inline[k] = v
        else:
            apart[k] = v
    dumps = serde.dumps_typed
    blobs: list[BlobIn] = [
        (k, str(ver), *dumps(apart[k])) for k, ver in new_versions.items() if k in apart
    ]
    row = {**checkpoint, "channel_values": inline}
    meta = _encode_metadata(get_serializable_checkpoint_metadata(config, metadata)).replace(
        "\\u0000", ""
    )
    args = (
        str(thread_id),
        ns,
        checkpoint["id"],
        conf.get("checkpoint_id"),
        _encode(row),
        meta,
        blobs,
    )
    next_config: RunnableConfig = {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
        }
    }
    return args, next_config


def writes_args(
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Positional and keyword arguments of ``Checkpoints.put_writes``."""
    conf = config["configurable"]
    dumps = serde.dumps_typed
    rows: list[WriteIn] = [
        (WRITES_IDX_MAP.get(ch, i), ch, *dumps(v)) for i, (ch, v) in enumerate(writes)
    ]
    upsert = all(ch in WRITES_IDX_MAP for ch, _ in writes)
    return (
        (
            str(conf["thread_id"]),
            conf.get("checkpoint_ns") or "",
            conf["checkpoint_id"],
            task_id,
            rows,
        ),
        {"task_path": task_path, "upsert": upsert},
    )


def to_tuple(serde: SerializerProtocol, row: CheckpointRow) -> CheckpointTuple:
    """A stored row as LangGraph's ``CheckpointTuple``, blobs and writes deserialized."""
    loads = serde.loads_typed
    values = dict(row.checkpoint.get("channel_values") or {})
    for channel, type_, data in row.blobs:
        values[channel] = loads((type_, data))
    checkpoint: Checkpoint = {**row.checkpoint, "channel_values": values}  # type: ignore[typeddict-item]
    base = {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns}
    return CheckpointTuple(
        config={"configurable": {**base, "checkpoint_id": row.checkpoint_id}},
        checkpoint=checkpoint,
        metadata=row.metadata,  # type: ignore[arg-type]
        parent_config={"configurable": {**base, "checkpoint_id": row.parent_checkpoint_id}}
        if row.parent_checkpoint_id
        else None,
        pending_writes=[(tid, ch, loads((t, d))) for tid, ch, t, d in row.writes],
    )


def list_args(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> dict[str, Any]:
    """Keyword arguments of ``Checkpoints.list`` for a LangGraph ``list``."""
    conf = (config or {}).get("configurable", {})
    return {
        "thread_id": str(conf["thread_id"]) if conf.get("thread_id") is not None else None,
        "checkpoint_ns": conf.get("checkpoint_ns"),
        "checkpoint_id": get_checkpoint_id(config) if config else None,
        "metadata": filter or None,
        "before": get_checkpoint_id(before) if before else None,
        "limit": limit,
    }


def get_args(config: RunnableConfig) -> tuple[str, str, str | None]:
    """``(thread_id, checkpoint_ns, checkpoint_id)`` of a config, for ``Checkpoints.get``."""
    conf = config["configurable"]
    return str(conf["thread_id"]), conf.get("checkpoint_ns") or "", get_checkpoint_id(config)


def _inline(value: Any) -> bool:
    """Whether a channel value stays in the checkpoint row (JSON-safe primitives)."""
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and "\x00" not in value
