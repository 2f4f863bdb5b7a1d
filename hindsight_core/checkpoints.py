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

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import psycopg
import sqlalchemy as sa
from psycopg.rows import dict_row
from sqlalchemy.dialects.postgresql import psycopg as pg_dialect

from .embeddings import Embedder
from .errors import DatabaseError, DatabaseUnavailableError, ValidationError
from .memory.flow import Flow, Migrate, Sql, run_async, run_sync
from .storage import checkpoints_sql as q
from .storage.engine import db_errors

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from .memory.aio import AsyncMemory
    from .memory.sync import Memory

BlobIn = tuple[str, str, str, bytes | None]
"""``(channel, version, type, data)`` of one channel value stored apart."""
WriteIn = tuple[int, str, str, bytes]
"""``(idx, channel, type, data)`` of one pending write."""

PRUNE_STRATEGIES = ("keep_latest", "delete")
_NO_EMBEDDER = cast(Embedder, None)  # checkpoint flows never embed
_DIALECT = pg_dialect.dialect()


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


# ---------------------------------------------------------------------- flows


def put_flow(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str | None,
    checkpoint: Mapping[str, Any] | str,
    metadata: Mapping[str, Any] | str,
    blobs: Sequence[BlobIn],
) -> Flow[None]:
    """Store a checkpoint (upsert) and the blobs of its new channel versions."""
    if not checkpoint_id:
        raise ValidationError("a checkpoint needs an id", field="checkpoint_id")
    yield Sql(
        q.PUT,
        {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "parent_checkpoint_id": parent_checkpoint_id,
            "checkpoint": _json(checkpoint),
            "metadata": _json(metadata),
            "channels": [b[0] for b in blobs],
            "versions": [b[1] for b in blobs],
            "types": [b[2] for b in blobs],
            "blobs": [b[3] for b in blobs],
        },
        fetch="none",
    )


def put_writes_flow(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: Sequence[WriteIn],
    *,
    upsert: bool,
) -> Flow[None]:
    """Store pending writes; ``upsert`` replaces earlier writes with the same index."""
    if not writes:
        return
    by_idx: dict[int, WriteIn] = {}
    for w in writes:  # one row per index: the last wins on upsert, the first otherwise
        if upsert or w[0] not in by_idx:
            by_idx[w[0]] = w
    rows = list(by_idx.values())
    yield Sql(
        q.UPSERT_WRITES if upsert else q.PUT_WRITES,
        {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "task_path": task_path,
            "idxs": [w[0] for w in rows],
            "channels": [w[1] for w in rows],
            "types": [w[2] for w in rows],
            "blobs": [w[3] for w in rows],
        },
        fetch="none",
    )


def get_flow(
    thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
) -> Flow[CheckpointRow | None]:
    """One checkpoint by id, or the latest of the thread and namespace."""
    params = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint_id:
        rows = yield Sql(q.GET_BY_ID, {**params, "checkpoint_id": checkpoint_id})
    else:
        rows = yield Sql(q.GET_LATEST, params)
    return _row(rows[0]) if rows else None


def list_flow(
    thread_id: str | None,
    checkpoint_ns: str | None,
    checkpoint_id: str | None,
    metadata: Mapping[str, Any] | None,
    before: str | None,
    limit: int | None,
) -> Flow[list[CheckpointRow]]:
    """Checkpoints matching every given filter, newest first."""
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
    rows = yield Sql(statement, {k: v for k, v in params.items() if v is not None})
    return [_row(r) for r in rows]


def delete_threads_flow(thread_ids: Sequence[str]) -> Flow[None]:
    """Everything of the given threads, in every namespace."""
    if thread_ids:
        yield Sql(q.DELETE_THREADS, {"thread_ids": list(thread_ids)}, fetch="none")


def delete_for_runs_flow(run_ids: Sequence[str]) -> Flow[int]:
    """Checkpoints whose ``metadata.run_id`` is given, their writes and orphaned blobs."""
    if not run_ids:
        return 0
    touched = yield Sql(q.DELETE_FOR_RUNS, {"run_ids": [str(r) for r in run_ids]})
    for t in touched:
        yield Sql(q.DELETE_UNREFERENCED_BLOBS, dict(t), fetch="none")
    return len(touched)


def copy_thread_flow(source: str, target: str) -> Flow[None]:
    """Every checkpoint, blob and write of ``source`` under ``target`` (same ids)."""
    yield Sql(q.COPY_THREAD, {"source": source, "target": target}, fetch="none")


def prune_flow(thread_ids: Sequence[str], strategy: str) -> Flow[None]:
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
    delta = yield Sql(q.DELTA_THREADS, {"thread_ids": ids})
    if delta:
        raise NotImplementedError(
            "keep_latest can't prune threads that use a DeltaChannel: "
            + ", ".join(sorted(r["thread_id"] for r in delta))
        )
    yield Sql(q.PRUNE_KEEP_LATEST, {"thread_ids": ids}, fetch="none")


def thread_stats_flow(thread_id: str) -> Flow[dict[str, int]]:
    """Row counts and the largest checkpoint row / blob of a thread (for tests, ops)."""
    rows = yield Sql(q.COUNT_THREAD, {"thread_id": thread_id})
    return {k: int(v) for k, v in rows[0].items()}


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
    driver = (await conn.get_raw_connection()).driver_connection
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
                    conn.invalidate() if _disconnected(exc, conn) else conn.close()
                    if not _disconnected(exc, conn):
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
                    await (conn.invalidate() if broken else conn.close())
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
