"""Checkpoint storage for graph runtimes (LangGraph's checkpointer sits on it).

The core deals in bytes and JSON only: a checkpoint is a JSON object, its channel
values that are not stored inline are ``(channel, version, type, bytes)`` blobs,
and pending writes are ``(idx, channel, type, bytes)``. Serialization of framework
objects is the adapter's job (``hindsight_adapters.langgraph.checkpoint``).

Each operation is a flow (see ``memory/flow.py``) written once and run by
:class:`Checkpoints` (sync) or :class:`AsyncCheckpoints` (asyncio) on the pool of
a :class:`~hindsight_core.Memory` / :class:`~hindsight_core.AsyncMemory`. Single
statement operations run in autocommit mode (one round trip each).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import psycopg
import sqlalchemy as sa
from psycopg.rows import dict_row
from sqlalchemy.dialects.postgresql import psycopg as pg_dialect

from .checkpoint_flows import (
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
from .embeddings import Embedder
from .errors import DatabaseError, DatabaseUnavailableError
from .memory.flow import Flow, Migrate, Sql, run_async, run_sync
from .storage.engine import db_errors

__all__ = ["PRUNE_STRATEGIES", "AsyncCheckpoints", "BlobIn", "CheckpointRow", "Checkpoints",
           "WriteIn"]

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from .memory.aio import AsyncMemory
    from .memory.sync import Memory

_NO_EMBEDDER = cast(Embedder, None)  # checkpoint flows never embed
_DIALECT = pg_dialect.dialect()


# ---------------------------------------------------------------------- front ends


class _Base:
    """Set-up state and a few warm connections kept between calls.

    A checkpointer makes many small calls; checking a connection out of the pool
    for each costs a pre-ping round trip. Connections used within the last
    ``KEEP_WARM`` seconds are kept checked out (at most ``WARM_MAX``) and reused
    without a ping; a warm connection found broken is dropped and the call is
    retried once on a fresh (pinged) one. They are still the memory's pool's
    connections.
    """

    KEEP_WARM = 10.0
    WARM_MAX = 2
    _migrated: bool

    def _init_warm(self) -> None:
        self._warm: list[tuple[float, Any]] = []
        self._warm_lock = threading.Lock()

    def _take_warm(self) -> tuple[Any | None, list[Any]]:
        """A warm connection (or None) and the cold ones to give back to the pool."""
        now = time.monotonic()
        with self._warm_lock:
            cold = [c for used, c in self._warm if now - used >= self.KEEP_WARM]
            self._warm = [(used, c) for used, c in self._warm if now - used < self.KEEP_WARM]
            return (self._warm.pop()[1] if self._warm else None), cold

    def _give_warm(self, conn: Any) -> bool:
        with self._warm_lock:
            if len(self._warm) < self.WARM_MAX:
                self._warm.append((time.monotonic(), conn))
                return True
        return False

    def _drain(self) -> list[Any]:
        with self._warm_lock:
            conns = [c for _, c in self._warm]
            self._warm.clear()
        return conns

    def _ready(self) -> Flow[None]:
        if not self._migrated:
            yield Migrate()
            self._migrated = True


@lru_cache(maxsize=256)
def _pyformat(statement: sa.TextClause) -> str:
    """A statement as psycopg runs it (``%(name)s`` parameters)."""
    return str(statement.compile(dialect=_DIALECT))


def _map_error(exc: Exception) -> DatabaseError:
    first = (str(exc).strip().splitlines() or ["unknown error"])[0]
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseUnavailableError(f"the database cannot be reached: {first}")
    return DatabaseError(f"database error: {first}")


# Single-statement flows run straight on the pooled connection's psycopg driver
# (autocommit): SQLAlchemy's execution layer would cost more than the statement.
def _drive(flow: Flow[Any], conn: sa.Connection) -> Any:
    driver = conn.connection.driver_connection
    assert driver is not None
    reply: Any = None
    with driver.cursor(row_factory=dict_row) as cur:
        while True:
            try:
                req = flow.send(reply)
            except StopIteration as stop:
                return stop.value
            assert isinstance(req, Sql), "checkpoint flows only run SQL"
            cur.execute(_pyformat(req.statement), req.params)
            reply = cur.fetchall() if req.fetch == "all" and cur.description else []


async def _adrive(flow: Flow[Any], conn: AsyncConnection) -> Any:
    # Connected already: reaching the driver does no I/O (and needs no greenlet).
    sync_conn = conn.sync_connection
    assert sync_conn is not None
    driver = sync_conn.connection.driver_connection
    assert driver is not None
    reply: Any = None
    async with driver.cursor(row_factory=dict_row) as cur:
        while True:
            try:
                req = flow.send(reply)
            except StopIteration as stop:
                return stop.value
            assert isinstance(req, Sql), "checkpoint flows only run SQL"
            await cur.execute(_pyformat(req.statement), req.params)
            reply = await cur.fetchall() if req.fetch == "all" and cur.description else []


def _disconnected(exc: BaseException, conn: Any) -> bool:
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) or bool(
        getattr(conn, "closed", False) or getattr(conn, "invalidated", False)
    )


class Checkpoints(_Base):
    """Checkpoint storage on the connection pool of a :class:`Memory` (blocking I/O).

    Args:
        memory: whose engine (pool) and settings to use; it is not closed here.
    """

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._migrated = False
        self._init_warm()
        # When the memory's pool is disposed (memory.close()), warm connections are
        # closed too: the old pool is gone, so giving them back would leak them.
        sa.event.listen(memory.engine, "engine_disposed", self._on_dispose)

    def _on_dispose(self, _engine: sa.Engine) -> None:
        for conn in self._drain():
            conn.invalidate()
            conn.close()

    def _run(self, make: Callable[[], Flow[Any]], atomic: bool = False) -> Any:
        """Run a flow: ``atomic`` ones in a transaction, the rest in autocommit mode
        on a warm connection (one statement each, so each is atomic anyway)."""
        if not self._migrated:
            self.setup()
        if atomic:
            return run_sync(make(), self.memory.engine, _NO_EMBEDDER)
        conn, cold = self._take_warm()
        for c in cold:
            c.close()
        try:
            if conn is not None:
                try:
                    result = _drive(make(), conn)
                except BaseException as exc:
                    broken = _disconnected(exc, conn)
                    if broken:
                        conn.invalidate()
                    conn.close()
                    if not broken:
                        raise
                else:
                    self._release(conn)
                    return result
            with db_errors():
                conn = self.memory.engine.connect()
                conn.execution_options(isolation_level="AUTOCOMMIT")
            try:
                result = _drive(make(), conn)
            except BaseException:
                conn.close()
                raise
            self._release(conn)
            return result
        except psycopg.Error as exc:
            raise _map_error(exc) from exc

    def _release(self, conn: sa.Connection) -> None:
        if not self._give_warm(conn):
            conn.close()

    def close(self) -> None:
        """Return the warm connections to the pool."""
        for conn in self._drain():
            conn.close()

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
            self._run(lambda: get_flow(thread_id, checkpoint_ns, checkpoint_id)),
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
            self._run(
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
        return cast("dict[str, int]", self._run(lambda: thread_stats_flow(thread_id)))


class AsyncCheckpoints(_Base):
    """:class:`Checkpoints` for asyncio code, on an :class:`AsyncMemory`'s pool."""

    def __init__(self, memory: AsyncMemory) -> None:
        self.memory = memory
        self._migrated = False
        self._init_warm()
        self._hooked: AsyncEngine | None = None

    def _on_dispose(self, _engine: sa.Engine) -> None:
        # Runs inside AsyncEngine.dispose()'s greenlet, where the sync facade can
        # close a connection of the async driver.
        for conn in self._drain():
            conn.sync_connection.invalidate()
            conn.sync_connection.close()

    async def _run(self, make: Callable[[], Flow[Any]], atomic: bool = False) -> Any:
        if not self._migrated:
            await self.setup()
        engine = await self.memory._get_engine()
        if self._hooked is not engine:
            sa.event.listen(engine.sync_engine, "engine_disposed", self._on_dispose)
            self._hooked = engine
        if atomic:
            return await run_async(make(), engine, _NO_EMBEDDER)
        conn, cold = self._take_warm()
        for c in cold:
            await c.close()
        try:
            if conn is not None:
                try:
                    result = await _adrive(make(), conn)
                except BaseException as exc:
                    broken = _disconnected(exc, conn)
                    if broken:
                        await conn.invalidate()
                    await conn.close()
                    if not broken:
                        raise
                else:
                    await self._release(conn)
                    return result
            with db_errors():
                conn = await engine.connect()
            try:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                result = await _adrive(make(), conn)
            except BaseException:
                await conn.close()
                raise
            await self._release(conn)
            return result
        except psycopg.Error as exc:
            raise _map_error(exc) from exc

    async def _release(self, conn: AsyncConnection) -> None:
        if not self._give_warm(conn):
            await conn.close()

    async def aclose(self) -> None:
        """Return the warm connections to the pool."""
        for conn in self._drain():
            await conn.close()

    async def setup(self) -> None:
        self._migrated = False
        await run_async(self._ready(), await self.memory._get_engine(), _NO_EMBEDDER)

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
            await self._run(lambda: get_flow(thread_id, checkpoint_ns, checkpoint_id)),
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
            await self._run(
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
        return cast("dict[str, int]", await self._run(lambda: thread_stats_flow(thread_id)))
