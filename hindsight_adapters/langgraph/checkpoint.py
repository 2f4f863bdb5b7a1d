"""``HindsightCheckpointer``: a LangGraph ``BaseCheckpointSaver`` on the Hindsight core.

A drop-in for ``PostgresSaver`` / ``AsyncPostgresSaver``::

    from hindsight_adapters.langgraph import HindsightCheckpointer
    with HindsightCheckpointer.from_conn_string(DB_URI) as checkpointer:
        graph = builder.compile(checkpointer=checkpointer)

It stores into the same database as the rest of Hindsight, through the core's
connection pool and migrations (``hindsight_core.checkpoints``). This module
only converts LangGraph types: values are serialized with ``self.serde``
(LangGraph's ``JsonPlusSerializer`` by default) at call time, so copies made by
``with_allowlist`` share the pool and use their own serializer. Primitive channel
values stay inline in the checkpoint row; every other value is a versioned blob
stored apart, written only when its channel changed.

Both APIs are native: sync methods run on a blocking pool, async methods on an
asyncio pool (each created on first use, for the same database).
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.checkpoints import (
    AsyncCheckpoints,
    BlobIn,
    CheckpointRow,
    Checkpoints,
    WriteIn,
)

__all__ = ["HindsightCheckpointer"]


class _Backends:
    """The sync and async storage of one checkpointer, shared by its copies."""

    def __init__(
        self,
        memory: Memory | AsyncMemory | None,
        database_url: str | None,
        settings: Settings | None,
    ) -> None:
        self.settings = settings or (memory.settings if memory is not None else Settings())
        self.database_url = database_url or (memory._database_url if memory else None)
        self._lock = threading.Lock()
        self.owned: list[Memory | AsyncMemory] = []
        self._sync = Checkpoints(memory) if isinstance(memory, Memory) else None
        self._async = AsyncCheckpoints(memory) if isinstance(memory, AsyncMemory) else None

    @property
    def sync(self) -> Checkpoints:
        if self._sync is None:
            with self._lock:
                if self._sync is None:
                    mem = Memory(settings=self.settings, database_url=self.database_url)
                    self.owned.append(mem)
                    self._sync = Checkpoints(mem)
        return self._sync

    @property
    def aio(self) -> AsyncCheckpoints:
        if self._async is None:
            with self._lock:
                if self._async is None:
                    mem = AsyncMemory(settings=self.settings, database_url=self.database_url)
                    self.owned.append(mem)
                    self._async = AsyncCheckpoints(mem)
        return self._async


class HindsightCheckpointer(BaseCheckpointSaver[str]):
    """LangGraph checkpointer storing into Hindsight's PostgreSQL (sync and async).

    Args:
        memory: a :class:`~hindsight_core.Memory` or :class:`~hindsight_core.AsyncMemory`
            whose connection pool to share, or a database URL; ``None`` uses
            ``HINDSIGHT_DATABASE_URL`` or, if unset, the embedded PostgreSQL.
        serde: the serializer; default LangGraph's ``JsonPlusSerializer``.
        settings: Hindsight settings used when no memory is given.

    Example:
        >>> checkpointer = HindsightCheckpointer()          # embedded database
        >>> graph = builder.compile(checkpointer=checkpointer)
        >>> graph.invoke({"messages": [...]}, {"configurable": {"thread_id": "1"}})
    """

    def __init__(
        self,
        memory: Memory | AsyncMemory | str | None = None,
        *,
        serde: SerializerProtocol | None = None,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(serde=serde)
        url = memory if isinstance(memory, str) else None
        mem = memory if isinstance(memory, Memory | AsyncMemory) else None
        self._backends = _Backends(mem, url, settings)

    # ------------------------------------------------------------------ construction

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str, *, serde: SerializerProtocol | None = None
    ) -> Iterator[HindsightCheckpointer]:
        """A checkpointer on ``conn_string``, closed on exit (like ``PostgresSaver``)."""
        saver = cls(conn_string, serde=serde)
        try:
            yield saver
        finally:
            saver.close()

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(
        cls, conn_string: str, *, serde: SerializerProtocol | None = None
    ) -> AsyncIterator[HindsightCheckpointer]:
        """Async twin of :meth:`from_conn_string` (like ``AsyncPostgresSaver``)."""
        saver = cls(conn_string, serde=serde)
        try:
            yield saver
        finally:
            await saver.aclose()

    def setup(self) -> None:
        """Create or upgrade the tables (idempotent; also done on first use)."""
        self._backends.sync.setup()

    async def asetup(self) -> None:
        """Async :meth:`setup`."""
        await self._backends.aio.setup()

    def close(self) -> None:
        """Give connections back; close the sync pool if this checkpointer created it
        (a memory passed in is left open)."""
        if self._backends._sync is not None:
            self._backends._sync.close()
        for mem in self._backends.owned:
            if isinstance(mem, Memory):
                mem.close()

    def __enter__(self) -> HindsightCheckpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> HindsightCheckpointer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Like :meth:`close`, for the async pool too."""
        self.close()
        if self._backends._async is not None:
            await self._backends._async.aclose()
        for mem in self._backends.owned:
            if isinstance(mem, AsyncMemory):
                await mem.aclose()

    @property
    def checkpoints(self) -> Checkpoints:
        """The core's sync checkpoint storage (bytes and JSON)."""
        return self._backends.sync

    # ------------------------------------------------------------------ conversion

    def _put_args(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> tuple[tuple[Any, ...], RunnableConfig]:
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
        dumps = self.serde.dumps_typed
        blobs: list[BlobIn] = [
            (k, str(ver), *dumps(apart[k])) for k, ver in new_versions.items() if k in apart
        ]
        row = {**checkpoint, "channel_values": inline}
        meta = json.dumps(
            get_serializable_checkpoint_metadata(config, metadata),
            separators=(",", ":"),
            default=str,
        ).replace("\\u0000", "")
        args = (
            str(thread_id),
            ns,
            checkpoint["id"],
            conf.get("checkpoint_id"),
            json.dumps(row, separators=(",", ":")),
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

    def _writes_args(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        conf = config["configurable"]
        dumps = self.serde.dumps_typed
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

    def _tuple(self, row: CheckpointRow) -> CheckpointTuple:
        loads = self.serde.loads_typed
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

    @staticmethod
    def _list_args(
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> dict[str, Any]:
        conf = (config or {}).get("configurable", {})
        return {
            "thread_id": str(conf["thread_id"]) if conf.get("thread_id") is not None else None,
            "checkpoint_ns": conf.get("checkpoint_ns"),
            "checkpoint_id": get_checkpoint_id(config) if config else None,
            "metadata": filter or None,
            "before": get_checkpoint_id(before) if before else None,
            "limit": limit,
        }

    @staticmethod
    def _get_args(config: RunnableConfig) -> tuple[str, str, str | None]:
        conf = config["configurable"]
        return str(conf["thread_id"]), conf.get("checkpoint_ns") or "", get_checkpoint_id(config)

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """``<int + 1, 32 digits>.<random>``, the same scheme as ``PostgresSaver``."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # ------------------------------------------------------------------ sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        row = self._backends.sync.get(*self._get_args(config))
        return self._tuple(row) if row else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for row in self._backends.sync.list(**self._list_args(config, filter, before, limit)):
            yield self._tuple(row)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args, next_config = self._put_args(config, checkpoint, metadata, new_versions)
        self._backends.sync.put(*args)
        return next_config

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        args, kwargs = self._writes_args(config, writes, task_id, task_path)
        self._backends.sync.put_writes(*args, **kwargs)

    def delete_thread(self, thread_id: str) -> None:
        self._backends.sync.delete_threads([str(thread_id)])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._backends.sync.delete_for_runs(list(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._backends.sync.copy_thread(str(source_thread_id), str(target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._backends.sync.prune(thread_ids, strategy)

    # ------------------------------------------------------------------ async API

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        row = await self._backends.aio.get(*self._get_args(config))
        return self._tuple(row) if row else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        rows = await self._backends.aio.list(**self._list_args(config, filter, before, limit))
        for row in rows:
            yield self._tuple(row)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args, next_config = self._put_args(config, checkpoint, metadata, new_versions)
        await self._backends.aio.put(*args)
        return next_config

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        args, kwargs = self._writes_args(config, writes, task_id, task_path)
        await self._backends.aio.put_writes(*args, **kwargs)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._backends.aio.delete_threads([str(thread_id)])

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._backends.aio.delete_for_runs(list(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._backends.aio.copy_thread(str(source_thread_id), str(target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._backends.aio.prune(thread_ids, strategy)


def _inline(value: Any) -> bool:
    """Whether a channel value stays in the checkpoint row (JSON-safe primitives)."""
    if value is None or isinstance(value, bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and "\x00" not in value
