"""``HindsightStore``: LangGraph's ``BaseStore`` on Hindsight's item storage.

A drop-in for ``langgraph.store.postgres.PostgresStore`` (same index and TTL
configuration, same batch semantics), sync and natively async, with hybrid ranking
(semantic + keyword + recency) by default and ``ranking="vector"`` to reproduce
PostgresStore's scores exactly. All storage and ranking is the core's
(:mod:`hindsight_core.items`); this module only maps LangGraph's ops and results.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, Literal

from langgraph.store.base import (
    BaseStore,
    IndexConfig,
    Op,
    Result,
    TTLConfig,
)

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.embeddings import Embedder
from hindsight_core.items import AsyncItems, ItemIndex, ItemOp, Items

from ._store_ops import DirectAsyncCalls, _core_ops, _result
from ._store_util import Coalescer, Stopped, SweeperFuture
from .embeddings import as_embedder

log = logging.getLogger("hindsight.langgraph")

Ranking = Literal["hybrid", "vector"]


def item_index(index: IndexConfig | dict[str, Any]) -> ItemIndex:
    """Our index settings from a LangGraph ``IndexConfig`` / ``PostgresIndexConfig``."""
    ann: dict[str, Any] = dict(index.get("ann_index_config") or {})  # type: ignore[arg-type]
    kind = ann.get("kind", "hnsw")
    params: tuple[tuple[str, int], ...] = tuple(
        (k, int(ann[k])) for k in ("m", "ef_construction") if k in ann
    )
    if "nlist" in ann:
        params += (("lists", int(ann["nlist"])),)
    fields = index.get("fields") or ["$"]
    return ItemIndex(
        dims=int(index["dims"]),
        fields=tuple(fields),
        distance=index.get("distance_type", "cosine"),  # type: ignore[arg-type]
        vector_type=ann.get("vector_type", "vector"),
        kind=kind,
        params=params,
    )


class HindsightStore(DirectAsyncCalls, BaseStore):
    """LangGraph store on Hindsight (PostgreSQL + pgvector).

    Args:
        database_url: PostgreSQL URL; ``None`` uses ``HINDSIGHT_DATABASE_URL`` or else the
            embedded PostgreSQL.
        index: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``) plus
            PostgresStore's ``distance_type`` and ``ann_index_config``. ``embed`` may be a
            LangChain ``Embeddings``, a function, a ``"provider:model"`` string or a
            Hindsight embedder. Without it, items are stored but queries are ignored.
        ttl: ``TTLConfig``: ``default_ttl`` (minutes), ``refresh_on_read``,
            ``sweep_interval_minutes``, ``omit_expired``.
        ranking: ``"hybrid"`` (default; fused score) or ``"vector"`` (PostgresStore's).
        settings: Hindsight settings (weights, decay, pool size).
        embedder: the embedder of experience records (for the agent tools, ``.memory``).
        memory / amemory: existing core front ends to share their connection pools.
    """

    supports_ttl: bool = True

    def __init__(
        self,
        database_url: str | None = None,
        *,
        index: IndexConfig | dict[str, Any] | None = None,
        ttl: TTLConfig | None = None,
        ranking: Ranking = "hybrid",
        settings: Settings | None = None,
        embedder: Embedder | None = None,
        memory: Memory | None = None,
        amemory: AsyncMemory | None = None,
    ) -> None:
        self.settings = settings or (memory.settings if memory else Settings())
        self._url = database_url
        self.memory = memory or Memory(
            settings=self.settings, embedder=embedder, database_url=database_url
        )
        self._amemory = amemory
        self._embedder_arg = embedder
        self.ttl_config = ttl
        self.ranking: Ranking = ranking
        self.index_config: dict[str, Any] | None = dict(index) if index else None
        self.embeddings: Any = None
        item_embedder: Embedder | None = None
        spec: ItemIndex | None = None
        if index:
            spec = item_index(index)
            item_embedder = as_embedder(index.get("embed"), spec.dims)
            self.embeddings = getattr(item_embedder, "embeddings", item_embedder)
        self._index = spec
        self._item_embedder = item_embedder
        omit = self._omit_expired()
        self.items = Items(
            self.memory, index=spec, embedder=item_embedder, ranking=ranking, omit_expired=omit
        )
        self._aitems: AsyncItems | None = None
        self._coalescer = Coalescer(self._run_batch)
        self._enqueue = self._coalescer.enqueue
        self._omit = omit
        self._sweeper: threading.Thread | None = None
        self._sweep_stop = threading.Event()
        self._asweeper: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ constructors

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        ranking: Ranking = "hybrid",
        **kwargs: Any,
    ) -> Iterator[HindsightStore]:
        """A store on ``conn_string``, closed on exit (like ``PostgresStore``'s).

        ``pipeline`` and ``pool_config`` are accepted for compatibility and ignored
        (Hindsight pools connections itself; size via ``settings.pool_size``).
        """
        store = cls._compatible(conn_string, index=index, ttl=ttl, ranking=ranking, **kwargs)
        try:
            yield store
        finally:
            store.close()

    @classmethod
    @asynccontextmanager
    async def afrom_conn_string(
        cls,
        conn_string: str,
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        ranking: Ranking = "hybrid",
        **kwargs: Any,
    ) -> AsyncIterator[HindsightStore]:
        """Async twin of :meth:`from_conn_string` (closes the async pool on exit)."""
        store = cls._compatible(conn_string, index=index, ttl=ttl, ranking=ranking, **kwargs)
        try:
            yield store
        finally:
            await store.aclose()

    @classmethod
    def _compatible(cls, conn_string: str, **kwargs: Any) -> HindsightStore:
        """``cls(conn_string, **kwargs)`` without ``PostgresStore``'s ``pipeline`` and
        ``pool_config``, which are ignored."""
        kwargs.pop("pipeline", None)
        kwargs.pop("pool_config", None)
        return cls(conn_string, **kwargs)

    @property
    def amemory(self) -> AsyncMemory:
        """The asyncio core front end on the same database (created on first use)."""
        if self._amemory is None:
            # The memory's database and embedder (one model loaded, not two).
            self._amemory = AsyncMemory(
                settings=self.settings,
                embedder=self._embedder_arg or self.memory.embedder,
                database_url=self._url or self.memory.database_url,
                clock=self.memory.clock,
            )
        return self._amemory

    @property
    def aitems(self) -> AsyncItems:
        if self._aitems is None:
            self._aitems = AsyncItems(
                self.amemory,
                index=self._index,
                embedder=self._item_embedder,
                ranking=self.ranking,
                omit_expired=self._omit,
            )
        return self._aitems

    def setup(self) -> None:
        """Apply migrations and create the vector index (also done on first use)."""
        self.items.setup()

    async def asetup(self) -> None:
        await self.aitems.setup()

    def close(self) -> None:
        """Stop the sweeper and close the sync pool (call :meth:`aclose` for the async one)."""
        self.stop_ttl_sweeper()
        self.items.close()
        self.memory.close()

    async def aclose(self) -> None:
        await self.astop_ttl_sweeper()
        self.stop_ttl_sweeper()
        if self._aitems is not None:  # its warm connections, back to the pool
            await self._aitems.aclose()
        if self._amemory is not None:
            await self._amemory.aclose()
        self.items.close()
        self.memory.close()

    def __enter__(self) -> HindsightStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ batch

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ops in one transaction, with PostgresStore's semantics (see module docs)."""
        ops = list(ops)
        self.items.omit_expired = self._omit_expired()
        return [_result(r) for r in self.items.batch(_core_ops(ops))]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Natively async :meth:`batch` (async database driver; the embedder's ``aembed``).

        Like LangGraph's ``AsyncBatchedBaseStore``, calls made in the same event-loop
        tick (e.g. ``asyncio.gather`` of many ``aput``/``aget``) run as one batch.
        """
        return await self._queue(ops if isinstance(ops, list) else list(ops))

    async def _run_batch(self, ops: list[ItemOp]) -> list[Result]:
        """One coalesced batch, its results mapped to LangGraph's; a result shared by
        identical reads is mapped once and stays shared."""
        mapped: dict[int, Result] = {}
        out: list[Result] = []
        self.aitems.omit_expired = self._omit_expired()  # ttl_config may have changed
        for r in await self.aitems.batch(ops):
            if r is None:  # a put's, or a missing item's
                out.append(None)
                continue
            m = mapped.get(id(r))
            if m is None:
                m = mapped[id(r)] = _result(r)
            out.append(m)
        return out

    def _queue(self, ops: list[Op]) -> asyncio.Future[list[Any]]:
        """Queue ``ops`` on this tick's batch (a future of their results)."""
        return self._coalescer.enqueue(_core_ops(ops))

    def _omit_expired(self) -> bool:
        return bool((self.ttl_config or {}).get("omit_expired", False))

    # ------------------------------------------------------------------ TTL

    def sweep_ttl(self) -> int:
        """Delete expired items now; returns how many."""
        return self.items.sweep()

    async def asweep_ttl(self) -> int:
        return await self.aitems.sweep()

    def _interval(self, minutes: float | None) -> float:
        return 60.0 * float(minutes or (self.ttl_config or {}).get("sweep_interval_minutes") or 5)

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> SweeperFuture:
        """Sweep expired items periodically in a daemon thread (PostgresStore's API).

        Returns a future that completes when the sweeper stops; it can also be awaited
        (returning itself), as with AsyncPostgresStore's ``await start_ttl_sweeper()``.
        """
        done = SweeperFuture()
        if not self.ttl_config:
            done.set_result(None)
            return done
        if self._sweeper is not None and self._sweeper.is_alive():
            return done
        interval = self._interval(sweep_interval_minutes)
        self._sweep_stop.clear()

        def run() -> None:
            while not self._sweep_stop.wait(interval):
                try:
                    n = self.sweep_ttl()
                    if n:
                        log.debug("swept %d expired items", n)
                except Exception:  # keep sweeping; the error is logged
                    log.exception("TTL sweep failed")
            done.set_result(None)

        self._sweeper = threading.Thread(target=run, name="hindsight-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return done

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Stopped:
        """Stop the sweeper thread; true once it has stopped (awaitable too)."""
        if self._sweeper is None:
            return Stopped(True)
        self._sweep_stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return Stopped(stopped)

    async def astart_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Sweep periodically as an asyncio task (AsyncPostgresStore's API)."""
        if self._asweeper is not None and not self._asweeper.done():
            return self._asweeper
        interval = self._interval(sweep_interval_minutes)

        async def run() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.asweep_ttl()
                except Exception:  # keep sweeping; the error is logged
                    log.exception("TTL sweep failed")

        if not self.ttl_config:
            self._asweeper = asyncio.create_task(asyncio.sleep(0))
        else:
            self._asweeper = asyncio.create_task(run(), name="hindsight-ttl-sweeper")
        return self._asweeper

    async def astop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        task, self._asweeper = self._asweeper, None
        if task is None or task.done():
            return True
        task.cancel()
        with suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), timeout)
        return task.done()
