"""Checkpoint storage for graph runtimes (LangGraph's checkpointer sits on it).

The core deals in bytes and JSON only: a checkpoint is a JSON object, its channel
values that are not stored inline are ``(channel, version, type, bytes)`` blobs,
and pending writes are ``(idx, channel, type, bytes)``. Serialization of framework
objects is the adapter's job (``hindsight_adapters.langgraph.checkpoint``).

Each operation is a flow (see ``runtime/flow.py``) written once and run by
:class:`Checkpoints` (sync) or :class:`AsyncCheckpoints` (asyncio) on the pool of
a :class:`~hindsight_core.Memory` / :class:`~hindsight_core.AsyncMemory`. Single
statement operations run in autocommit mode on warm connections (one round trip
each; see ``runtime/fastpath.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..embeddings import Embedder
from ..runtime.fastpath import AsyncWarmConnections, WarmConnections
from ..runtime.flow import Flow, Migrate, run_async, run_sync
from .flows import (
    PRUNE_STRATEGIES,
    BlobIn,
    CheckpointRow,
    WriteIn,
    copy_thread_flow,
    delete_for_runs_flow,
    delete_threads_flow,
    get_flow,
    list_flow,
    prune_flow,
    put_flow,
    put_writes_flow,
    thread_stats_flow,
)

__all__ = ["PRUNE_STRATEGIES", "AsyncCheckpoints", "BlobIn", "CheckpointRow", "Checkpoints",
           "WriteIn"]

if TYPE_CHECKING:
    from ..runtime.host import AsyncFlowHost, FlowHost

_NO_EMBEDDER = cast(Embedder, None)  # checkpoint flows never embed
CHECKPOINTS_KEY = "\x00checkpoints"  # read-your-writes session of a memory's checkpoints


# ---------------------------------------------------------------------- front ends


class _Base:
    """Set-up state; single-statement flows run on the memory's warm connections
    (``runtime/fastpath.py``: autocommit, no pre-ping, one retry on a broken one)."""

    _migrated: bool
    _pool: WarmConnections | AsyncWarmConnections | None = None

    @property
    def _warm(self) -> list[tuple[float, Any]]:
        """The warm connections (``(last used, connection)``), for tests."""
        return [(used, conn) for used, conn, _ in self._pool._warm] if self._pool else []

    def _ready(self) -> Flow[None]:
        if not self._migrated:
            yield Migrate()
            self._migrated = True


class Checkpoints(_Base):
    """Checkpoint storage on the connection pool of a :class:`Memory` (blocking I/O).

    Args:
        memory: whose engine (pool) and settings to use; it is not closed here.
    """

    def __init__(self, memory: FlowHost) -> None:
        self.memory = memory
        self._migrated = False
        self._pool: WarmConnections | None = None

    def _run(self, make: Callable[[], Flow[Any]], atomic: bool = False) -> Any:
        """Run a flow that writes: ``atomic`` ones in a transaction, the rest in
        autocommit mode on a warm connection (one statement each, so each is atomic
        anyway). With read replicas, the WAL position is noted (read-your-writes)."""
        result = self._primary(make, atomic)
        self.memory.note_write(CHECKPOINTS_KEY)
        return result

    def _read(self, make: Callable[[], Flow[Any]]) -> Any:
        """Run a read flow: on a read replica when configured, else on the primary."""
        reads = self.memory.replica_reads() if self._migrated else None
        if reads is None:
            return self._primary(make)
        return reads.run(make, _NO_EMBEDDER, CHECKPOINTS_KEY, lambda: self._primary(make),
                         fast=True)

    def _primary(self, make: Callable[[], Flow[Any]], atomic: bool = False) -> Any:
        if not self._migrated:
            self.setup()
        engine = self.memory.engine
        if atomic:
            return run_sync(make(), engine, _NO_EMBEDDER)
        if self._pool is None or self._pool.engine is not engine:
            self._pool = WarmConnections(engine)
        return self._pool.run(make, _NO_EMBEDDER)

    def close(self) -> None:
        """Return the warm connections to the pool."""
        if self._pool is not None:
            self._pool.close()

    def setup(self) -> None:
        """Apply migrations (idempotent; also done on first use)."""
        self._migrated = False
        run_sync(self._ready(), self.memory.engine, _NO_EMBEDDER)

    def put(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        parent_checkpoint_id: str | None,
        checkpoint: Mapping[str, Any] | str,
        metadata: Mapping[str, Any] | str,
        blobs: Sequence[BlobIn] = (),
    ) -> None:
        """Store a checkpoint and the blobs of its new channel versions (atomic)."""
        self._run(
            lambda: put_flow(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                parent_checkpoint_id,
                checkpoint,
                metadata,
                blobs,
            )
        )

    def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        writes: Sequence[WriteIn],
        *,
        task_path: str = "",
        upsert: bool = False,
    ) -> None:
        """Store pending writes of a task (idempotent per ``(task_id, idx)``)."""
        self._run(
            lambda: put_writes_flow(
                thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, writes, upsert=upsert
            )
        )

    def get(
        self, thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
    ) -> CheckpointRow | None:
        """One checkpoint, or the latest of the thread and namespace; None if absent."""
        return cast(
            "CheckpointRow | None",
            self._read(lambda: get_flow(thread_id, checkpoint_ns, checkpoint_id)),
        )

    def list(
        self,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        *,
        checkpoint_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[CheckpointRow]:
        """Checkpoints newest first; ``metadata`` matches by JSON containment."""
        return cast(
            "list[CheckpointRow]",
            self._read(
                lambda: list_flow(thread_id, checkpoint_ns, checkpoint_id, metadata, before, limit)
            ),
        )

    def delete_threads(self, thread_ids: Sequence[str]) -> None:
        """Delete threads (all namespaces)."""
        self._run(lambda: delete_threads_flow(thread_ids))

    def delete_for_runs(self, run_ids: Sequence[str]) -> int:
        """Delete the checkpoints of runs; returns how many (thread, ns) were touched."""
        return cast(int, self._run(lambda: delete_for_runs_flow(run_ids), atomic=True))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread (every namespace, checkpoint and write) to another id."""
        self._run(lambda: copy_thread_flow(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
        """Prune threads: ``keep_latest`` or ``delete``."""
        self._run(lambda: prune_flow(thread_ids, strategy), atomic=True)

    def thread_stats(self, thread_id: str) -> dict[str, int]:
        """Counts of checkpoints, blobs and writes of a thread, and the largest sizes."""
        return cast("dict[str, int]", self._read(lambda: thread_stats_flow(thread_id)))


class AsyncCheckpoints(_Base):
    """:class:`Checkpoints` for asyncio code, on an :class:`AsyncMemory`'s pool."""

    def __init__(self, memory: AsyncFlowHost) -> None:
        self.memory = memory
        self._migrated = False
        self._pool: AsyncWarmConnections | None = None

    async def _run(self, make: Callable[[], Flow[Any]], atomic: bool = False) -> Any:
        result = await self._primary(make, atomic)
        await self.memory.note_write(CHECKPOINTS_KEY)
        return result

    async def _read(self, make: Callable[[], Flow[Any]]) -> Any:
        reads = self.memory.replica_reads() if self._migrated else None
        if reads is None:
            return await self._primary(make)
        return await reads.run(make, _NO_EMBEDDER, CHECKPOINTS_KEY,
                               lambda: self._primary(make), fast=True)

    async def _primary(self, make: Callable[[], Flow[Any]], atomic: bool = False) -> Any:
        if not self._migrated:
            await self.setup()
        engine = await self.memory.get_engine()
        if atomic:
            return await run_async(make(), engine, _NO_EMBEDDER)
        if self._pool is None or self._pool.engine is not engine:
            self._pool = AsyncWarmConnections(engine)
        return await self._pool.run(make, _NO_EMBEDDER)

    async def aclose(self) -> None:
        """Return the warm connections to the pool."""
        if self._pool is not None:
            await self._pool.aclose()

    async def setup(self) -> None:
        self._migrated = False
        await run_async(self._ready(), await self.memory.get_engine(), _NO_EMBEDDER)

    async def put(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        parent_checkpoint_id: str | None,
        checkpoint: Mapping[str, Any] | str,
        metadata: Mapping[str, Any] | str,
        blobs: Sequence[BlobIn] = (),
    ) -> None:
        await self._run(
            lambda: put_flow(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                parent_checkpoint_id,
                checkpoint,
                metadata,
                blobs,
            )
        )

    async def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        writes: Sequence[WriteIn],
        *,
        task_path: str = "",
        upsert: bool = False,
    ) -> None:
        await self._run(
            lambda: put_writes_flow(
                thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, writes, upsert=upsert
            )
        )

    async def get(
        self, thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
    ) -> CheckpointRow | None:
        return cast(
            "CheckpointRow | None",
            await self._read(lambda: get_flow(thread_id, checkpoint_ns, checkpoint_id)),
        )

    async def list(
        self,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        *,
        checkpoint_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[CheckpointRow]:
        return cast(
            "list[CheckpointRow]",
            await self._read(
                lambda: list_flow(thread_id, checkpoint_ns, checkpoint_id, metadata, before, limit)
            ),
        )

    async def delete_threads(self, thread_ids: Sequence[str]) -> None:
        await self._run(lambda: delete_threads_flow(thread_ids))

    async def delete_for_runs(self, run_ids: Sequence[str]) -> int:
        return cast(int, await self._run(lambda: delete_for_runs_flow(run_ids), atomic=True))

    async def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(lambda: copy_thread_flow(source_thread_id, target_thread_id))

    async def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
        await self._run(lambda: prune_flow(thread_ids, strategy), atomic=True)

    async def thread_stats(self, thread_id: str) -> dict[str, int]:
        return cast("dict[str, int]", await self._read(lambda: thread_stats_flow(thread_id)))
