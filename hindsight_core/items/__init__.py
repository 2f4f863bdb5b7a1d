"""Generic items: namespaced JSON documents with TTL and vector/hybrid search.

The storage behind LangGraph's ``BaseStore`` (``hindsight_adapters.langgraph``) and
LangMem memories, usable on its own::

    from hindsight_core import Memory
    from hindsight_core.items import ItemIndex, Items, PutItem, SearchItems

    items = Items(Memory(), index=ItemIndex(dims=384))
    items.put(("users", "u1"), "prefs", {"text": "likes short answers"})
    hits = items.search(("users",), query="answer style")

:class:`Items` (blocking) and :class:`AsyncItems` (asyncio) run the same flows
(``flows.py``) with the same drivers' strategies (batches of single-statement units
on warm autocommit connections, others in a transaction retried on a deadlock) on
the connection pool of the :class:`Memory` / :class:`AsyncMemory` they are given,
embedding with ``embedder`` (default: the memory's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

from ..embeddings import Embedder, ensure_embedder
from ..embeddings.base import NoEmbedder
from ..errors import ConfigurationError, HindsightError
from ..memory.scan import ScanChoice
from ..models import Item, ItemHit, Namespace
from ..runtime.connections import AsyncConnections, Connections
from ..runtime.driver import Retry, run_async, run_sync
from ..runtime.flow import Flow, MakeFlow, Sql
from ..runtime.host import AsyncFlowHost, FlowHost
from ..runtime.routing import AsyncReplicaReads, ReplicaReads
from .flows import ItemFlows, Result, parse_filter
from .index_health import IndexHealth
from .ops import GetItem, ItemIndex, ItemOp, ListNamespaces, PutItem, Ranking, SearchItems
from .paths import field_texts, texts_at, tokenize

__all__ = [
    "AsyncItems",
    "GetItem",
    "IndexHealth",
    "ItemIndex",
    "ItemOp",
    "Items",
    "ListNamespaces",
    "PutItem",
    "Ranking",
    "SearchItems",
    "field_texts",
    "parse_filter",
    "texts_at",
    "tokenize",
]


_RETRIES = 4
R = TypeVar("R")
ITEMS_KEY = "\x00items"  # read-your-writes session of a memory's items
_READS = (GetItem, SearchItems, ListNamespaces)


def _one(stmt: Sql) -> Flow[None]:
    """A flow of one statement (a TTL refresh deferred to the primary)."""
    yield stmt


def _retryable(exc: BaseException) -> bool:
    """Whether the database aborted the transaction for a deadlock or serialization
    conflict (SQLSTATE 40P01 / 40001), which a retry resolves."""
    cause: BaseException | None = exc
    while cause is not None:
        orig = getattr(cause, "orig", cause)
        if getattr(orig, "sqlstate", None) in ("40P01", "40001"):
            return True
        cause = cause.__cause__
    return False


def deadlock_retry(attempt: int, exc: HindsightError) -> bool:
    """The items' retry policy (``driver.Retry``): a batch that lost a deadlock or
    serialization conflict runs again, up to ``_RETRIES`` times in all."""
    return attempt < _RETRIES - 1 and _retryable(exc)


_NO_EMBEDDER = NoEmbedder("items have no index configured; nothing can be embedded")


class _ItemsBase(ItemFlows):
    def __init__(
        self,
        memory: FlowHost | AsyncFlowHost,
        *,
        index: ItemIndex | None = None,
        embedder: Embedder | None = None,
        ranking: Ranking = "hybrid",
        omit_expired: bool = False,
    ) -> None:
        if ranking not in ("vector", "hybrid"):
            raise ConfigurationError(f"ranking must be 'vector' or 'hybrid', got {ranking!r}")
        self.memory = memory
        self.index = index
        self._embedder = None if embedder is None else ensure_embedder(embedder)
        self.ranking = ranking
        self.omit_expired = omit_expired
        self._ready = False
        self._scan_choice = ScanChoice()

    @property
    def embedder(self) -> Embedder:
        """The embedder of item fields and queries (default: the memory's)."""
        if self._embedder is not None:
            return self._embedder
        return self.memory.embedder if self.index is not None else _NO_EMBEDDER

    def _now(self) -> datetime:
        return self.memory.now()

    def _settings(self) -> Any:
        return self.memory.settings

    def _replica_flow(
        self, ops: Sequence[ItemOp]
    ) -> tuple[MakeFlow[list[Result]] | None, list[Sql]]:
        """For a batch of reads with read replicas configured: a maker of its flow for a
        replica, and the list that receives its TTL refresh (a write: the caller runs
        it on the primary). None when the batch runs on the primary."""
        later: list[Sql] = []
        if not (self._reads() is not None and all(isinstance(op, _READS) for op in ops)):
            return None, later

        def make() -> Flow[list[Result]]:
            later.clear()
            return self._batch_flow(ops, later)

        return make, later

    def _reads(self) -> Any:  # pragma: no cover - typed by each front end
        """The memory's read replicas, once set up; None without any."""
        raise NotImplementedError

    def _batch(self, ops: Sequence[ItemOp]) -> MakeFlow[list[Result]]:
        return lambda: self._batch_flow(ops)

    @staticmethod
    def _writes(ops: Sequence[ItemOp]) -> bool:
        return any(isinstance(op, PutItem) for op in ops)

    @staticmethod
    def _conditions(
        prefix: Namespace | None, suffix: Namespace | None
    ) -> tuple[tuple[Literal["prefix", "suffix"], Namespace], ...]:
        out: list[tuple[Literal["prefix", "suffix"], Namespace]] = []
        if prefix:
            out.append(("prefix", tuple(prefix)))
        if suffix:
            out.append(("suffix", tuple(suffix)))
        return tuple(out)


class Items(_ItemsBase):
    """Generic items on a :class:`Memory`'s database (blocking).

    Args:
        memory: provides the connection pool, settings and clock.
        index: how values are embedded; ``None`` stores no vectors (queries are ignored).
        embedder: embeds fields and queries (default: ``memory.embedder``).
        ranking: ``"hybrid"`` (semantic + keyword + recency) or ``"vector"``
            (PostgresStore's similarity in the configured distance).
        omit_expired: hide expired items that were not swept yet.
    """

    memory: FlowHost
    _conns: Connections | None = None

    def _reads(self) -> ReplicaReads | None:
        return self.memory.replica_reads() if self._ready else None

    def batch(self, ops: Sequence[ItemOp]) -> list[Result]:
        """Run operations in one transaction; one result per op, in input order.

        A transaction that loses a deadlock or serialization conflict is retried.
        """
        make, later = self._replica_flow(ops)
        reads = self._reads()
        if make is not None and reads is not None:
            results = reads.run(make, self.embedder, ITEMS_KEY, lambda: self._run(make))
            if later:  # TTL refreshes are writes: on the primary
                self._run(lambda: _one(later[0]))
            return results
        results = self._run(self._batch(ops), deadlock_retry)
        if self._writes(ops):
            self.memory.note_write(ITEMS_KEY)
        return results

    def _run(self, make: Flow[R] | MakeFlow[R], retry: Retry | None = None) -> R:
        self._conns = Connections.of(self._conns, self.memory.engine)
        return run_sync(make, self._conns, self.embedder, retry)

    def close(self) -> None:
        """Give connections kept warm back to the pool (the memory is not closed)."""
        if self._conns is not None:
            self._conns.close()

    def setup(self) -> None:
        """Migrate and create the vector index (also done on first use)."""
        self._run(self._ready_flow())

    def sweep(self) -> int:
        """Delete expired items; returns how many."""
        return self._run(self._sweep_flow)

    def index_health(self) -> list[IndexHealth]:
        """Every ANN index of item vectors in the database, with its row counts and
        whether it is stale (an ivfflat index built on far fewer rows: ``index_health``)."""
        return self._run(self._health_flow)

    def rebuild_indexes(self, *, force: bool = False) -> list[IndexHealth]:
        """Rebuild the stale ivfflat indexes of item vectors (``force``: every ANN
        index); returns those rebuilt. Item writes wait while it runs."""
        return self._run(lambda: self._rebuild_flow(force))

    def get(self, namespace: Namespace, key: str, *, refresh_ttl: bool = True) -> Item | None:
        return self.batch([GetItem(namespace, key, refresh_ttl)])[0]  # type: ignore[return-value]

    def put(
        self,
        namespace: Namespace,
        key: str,
        value: Mapping[str, Any],
        *,
        index: Literal[False] | list[str] | None = None,
        ttl: float | None = None,
    ) -> None:
        self.batch([PutItem(namespace, key, value, index, ttl)])

    def delete(self, namespace: Namespace, key: str) -> None:
        self.batch([PutItem(namespace, key, None)])

    def search(
        self,
        namespace_prefix: Namespace,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool = True,
        ranking: Ranking | None = None,
    ) -> list[ItemHit]:
        op = SearchItems(namespace_prefix, query, filter, limit, offset, refresh_ttl, ranking)
        return self.batch([op])[0]  # type: ignore[return-value]

    def list_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        op = ListNamespaces(self._conditions(prefix, suffix), max_depth, limit, offset)
        return self.batch([op])[0]  # type: ignore[return-value]


class AsyncItems(_ItemsBase):
    """Generic items for asyncio code; the same API as :class:`Items`, awaited."""

    memory: AsyncFlowHost
    _conns: AsyncConnections | None = None

    def _reads(self) -> AsyncReplicaReads | None:
        return self.memory.replica_reads() if self._ready else None

    async def batch(self, ops: Sequence[ItemOp]) -> list[Result]:
        make, later = self._replica_flow(ops)
        reads = self._reads()
        if make is not None and reads is not None:
            results = await reads.run(make, self.embedder, ITEMS_KEY, lambda: self._run(make))
            if later:  # TTL refreshes are writes: on the primary
                await self._run(lambda: _one(later[0]))
            return results
        results = await self._run(self._batch(ops), deadlock_retry)
        if self._writes(ops):
            await self.memory.note_write(ITEMS_KEY)
        return results

    async def _run(self, make: Flow[R] | MakeFlow[R], retry: Retry | None = None) -> R:
        engine = await self.memory.get_engine()
        self._conns = AsyncConnections.of(self._conns, engine)
        return await run_async(make, self._conns, self.embedder, retry)

    async def aclose(self) -> None:
        """Give connections kept warm back to the pool (the memory is not closed)."""
        if self._conns is not None:
            await self._conns.aclose()

    async def setup(self) -> None:
        await self._run(self._ready_flow())

    async def sweep(self) -> int:
        return await self._run(self._sweep_flow)

    async def index_health(self) -> list[IndexHealth]:
        return await self._run(self._health_flow)

    async def rebuild_indexes(self, *, force: bool = False) -> list[IndexHealth]:
        return await self._run(lambda: self._rebuild_flow(force))

    async def get(self, namespace: Namespace, key: str, *, refresh_ttl: bool = True) -> Item | None:
        return (await self.batch([GetItem(namespace, key, refresh_ttl)]))[0]  # type: ignore[return-value]

    async def put(
        self,
        namespace: Namespace,
        key: str,
        value: Mapping[str, Any],
        *,
        index: Literal[False] | list[str] | None = None,
        ttl: float | None = None,
    ) -> None:
        await self.batch([PutItem(namespace, key, value, index, ttl)])

    async def delete(self, namespace: Namespace, key: str) -> None:
        await self.batch([PutItem(namespace, key, None)])

    async def search(
        self,
        namespace_prefix: Namespace,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool = True,
        ranking: Ranking | None = None,
    ) -> list[ItemHit]:
        op = SearchItems(namespace_prefix, query, filter, limit, offset, refresh_ttl, ranking)
        return (await self.batch([op]))[0]  # type: ignore[return-value]

    async def list_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        op = ListNamespaces(self._conditions(prefix, suffix), max_depth, limit, offset)
        return (await self.batch([op]))[0]  # type: ignore[return-value]
