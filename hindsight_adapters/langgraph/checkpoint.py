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

import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.checkpoints import AsyncCheckpoints, Checkpoints

from ._checkpoint_convert import get_args, list_args, put_args, to_tuple, writes_args

__all__ = ["HindsightCheckpointer"]

T = TypeVar("T")
M = TypeVar("M", Memory, AsyncMemory)


class _Backends:
    """The sync and async storage of one checkpointer, shared by its copies."""

    def __init__(
        self,
        memory: Memory | AsyncMemory | None,
        database_url: str | None,
        settings: Settings | None,
    ) -> None:
        self.settings = settings or (memory.settings if memory is not None else Settings())
        self.database_url = database_url or (memory.database_url if memory else None)
        self._lock = threading.Lock()
        self.owned: list[Memory | AsyncMemory] = []
        self._sync = Checkpoints(memory) if isinstance(memory, Memory) else None
        self._async = AsyncCheckpoints(memory) if isinstance(memory, AsyncMemory) else None

    @property
    def sync(self) -> Checkpoints:
        """The blocking storage; on its own pool unless a ``Memory`` was given."""
        return self._lazy("_sync", lambda: Checkpoints(self._own(Memory)))

    @property
    def aio(self) -> AsyncCheckpoints:
        """The asyncio storage; on its own pool unless an ``AsyncMemory`` was given."""
        return self._lazy("_async", lambda: AsyncCheckpoints(self._own(AsyncMemory)))

    def _lazy(self, attr: str, make: Callable[[], T]) -> T:
        """``self.<attr>``, first set to ``make()`` if it is None (once, under the lock)."""
        value: T | None = getattr(self, attr)
        if value is None:
            with self._lock:
                value = getattr(self, attr)
                if value is None:
                    value = make()
                    setattr(self, attr, value)
        return value

    def _own(self, kind: type[M]) -> M:
        mem = kind(settings=self.settings, database_url=self.database_url)
        self.owned.append(mem)
        return mem


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

    @property
    def memory(self) -> Memory:
        """The core :class:`~hindsight_core.Memory` the blocking checkpoints run on: the
        one given, or the checkpointer's own on the same database (where
        ``reflect_thread`` stores a thread's lessons by default)."""
        host = self._backends.sync.memory
        assert isinstance(host, Memory)  # _Backends builds the sync side on a Memory
        return host

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
        row = self._backends.sync.get(*get_args(config))
        return to_tuple(self.serde, row) if row else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for row in self._backends.sync.list(**list_args(config, filter, before, limit)):
            yield to_tuple(self.serde, row)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args, next_config = put_args(self.serde, config, checkpoint, metadata, new_versions)
        self._backends.sync.put(*args)
        return next_config

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        args, kwargs = writes_args(self.serde, config, writes, task_id, task_path)
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
        row = await self._backends.aio.get(*get_args(config))
        return to_tuple(self.serde, row) if row else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        rows = await self._backends.aio.list(**list_args(config, filter, before, limit))
        for row in rows:
            yield to_tuple(self.serde, row)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        args, next_config = put_args(self.serde, config, checkpoint, metadata, new_versions)
        await self._backends.aio.put(*args)
        return next_config

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        args, kwargs = writes_args(self.serde, config, writes, task_id, task_path)
        await self._backends.aio.put_writes(*args, **kwargs)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._backends.aio.delete_threads([str(thread_id)])

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._backends.aio.delete_for_runs(list(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._backends.aio.copy_thread(str(source_thread_id), str(target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._backends.aio.prune(thread_ids, strategy)
