"""Generic items: namespaced JSON documents with TTL and vector/hybrid search.

The storage behind LangGraph's ``BaseStore`` (``hindsight_adapters.langgraph``) and
LangMem memories, usable on its own::

    from hindsight_core import Memory
    from hindsight_core.items import ItemIndex, Items, PutItem, SearchItems

    items = Items(Memory(), index=ItemIndex(dims=384))
    items.put(("users", "u1"), "prefs", {"text": "likes short answers"})
    hits = items.search(("users",), query="answer style")

:class:`Items` (blocking) binds each operation through its runner in one line and
:class:`AsyncItems` (asyncio) takes the same methods, awaited (``runtime/twin.py``).
The flows (``flows.py``) run through the runner (``runtime/runner.py``; a batch is
one call, :meth:`_ItemsBase._batch_call`, written once: reads on a read replica when
configured, others in a transaction retried on a deadlock; batches of
single-statement units on warm autocommit connections) on the connection pool of
the :class:`Memory` / :class:`AsyncMemory` they are given, embedding with
``embedder`` (default: the memory's).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

from ..embeddings import Embedder, ensure_embedder
from ..embeddings.base import NoEmbedder
from ..errors import ConfigurationError, HindsightError
from ..memory.scan import ScanChoice
from ..models import Item, ItemHit, Namespace
from ..runtime.flow import Flow, MakeFlow, Sql
from ..runtime.host import AsyncFlowHost, FlowHost
from ..runtime.runner import AsyncRunner, Call, Read, Run, SyncRunner, Write
from ..runtime.twin import awaited
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
        self._runner = self._new_runner()

    @abstractmethod
    def _new_runner(self) -> SyncRunner | AsyncRunner:
        """The runner of this front end's I/O style, over ``memory``."""

    @property
    def embedder(self) -> Embedder:
        """The embedder of item fields and queries (default: the memory's)."""
        if self._embedder is not None:
            return self._embedder
        return self.memory.embedder if self.index is not None else _NO_EMBEDDER

    def _batch_call(self, ops: Sequence[ItemOp]) -> Call[list[Result]]:
        """``batch``: a batch of reads on a read replica when configured, its TTL
        refresh (a write) deferred to the primary; any other batch on the primary, one
        transaction retried on a deadlock, noting the WAL position if it wrote."""
        if self._runner.checks_first():  # set up, so that the reads may go to a replica
            yield from Run(self._ready_flow)
        if self._runner.routes() and all(isinstance(op, _READS) for op in ops):
            later: list[Sql] = []

            def make() -> Flow[list[Result]]:
                later.clear()
                return self._batch_flow(ops, later)

            results = yield from Read(make, ITEMS_KEY)
            if later:  # TTL refreshes are writes: on the primary
                yield from Run(lambda: _one(later[0]))
            return results
        batch: MakeFlow[list[Result]] = lambda: self._batch_flow(ops)  # noqa: E731
        if any(isinstance(op, PutItem) for op in ops):
            return (yield from Write(batch, ITEMS_KEY, deadlock_retry))
        return (yield from Run(batch, deadlock_retry))

    @overload
    def _one(self, op: GetItem) -> Call[Item | None]: ...
    @overload
    def _one(self, op: PutItem) -> Call[None]: ...
    @overload
    def _one(self, op: SearchItems) -> Call[list[ItemHit]]: ...
    @overload
    def _one(self, op: ListNamespaces) -> Call[list[Namespace]]: ...
    def _one(self, op: ItemOp) -> Call[Any]:
        """The batch of ``op`` alone; its one result (``get``, ``put``, ``search``, ...)."""
        return (yield from self._batch_call([op]))[0]

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
    _runner: SyncRunner

    def _new_runner(self) -> SyncRunner:
        return SyncRunner(
            self.memory, lambda: self.embedder, ready=lambda: self._ready, check=self._ready_flow
        )

    def batch(self, ops: Sequence[ItemOp]) -> list[Result]:
        """Run operations in one transaction; one result per op, in input order.

        A transaction that loses a deadlock or serialization conflict is retried.
        """
        return self._runner.call(self._batch_call(ops))

    def close(self) -> None:
        """Give connections kept warm back to the pool (the memory is not closed)."""
        self._runner.close()

    def setup(self) -> None:
        """Migrate and create the vector index (also done on first use)."""
        return self._runner.run(self._ready_flow())

    def sweep(self) -> int:
        """Delete expired items; returns how many."""
        return self._runner.run(self._sweep_flow)

    def index_health(self) -> list[IndexHealth]:
        """Every ANN index of item vectors in the database, with its row counts and
        whether it is stale (an ivfflat index built on far fewer rows: ``index_health``)."""
        return self._runner.run(self._health_flow)

    def rebuild_indexes(self, *, force: bool = False) -> list[IndexHealth]:
        """Rebuild the stale ivfflat indexes of item vectors (``force``: every ANN
        index); returns those rebuilt. Item writes wait while it runs."""
        return self._runner.run(lambda: self._rebuild_flow(force))

    def get(self, namespace: Namespace, key: str, *, refresh_ttl: bool = True) -> Item | None:
        """The item at ``key`` in ``namespace``, or None (``refresh_ttl``: its TTL starts
        again)."""
        return self._runner.call(self._one(GetItem(namespace, key, refresh_ttl)))

    def put(
        self,
        namespace: Namespace,
        key: str,
        value: Mapping[str, Any],
        *,
        index: Literal[False] | list[str] | None = None,
        ttl: float | None = None,
    ) -> None:
        """Store ``value`` at ``key`` in ``namespace`` (``index``: the fields embedded,
        ``False`` for none, default the index's; ``ttl``: minutes until it expires)."""
        return self._runner.call(self._one(PutItem(namespace, key, value, index, ttl)))

    def delete(self, namespace: Namespace, key: str) -> None:
        """Delete the item at ``key`` in ``namespace`` (nothing if there is none)."""
        return self._runner.call(self._one(PutItem(namespace, key, None)))

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
        """Items under ``namespace_prefix`` matching ``filter``, ranked for ``query`` when
        given and the items are indexed (``ranking``: default the store's), else newest
        first."""
        op = SearchItems(namespace_prefix, query, filter, limit, offset, refresh_ttl, ranking)
        return self._runner.call(self._one(op))

    def list_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        suffix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        """The namespaces holding items, filtered by ``prefix`` / ``suffix`` and cut to
        ``max_depth`` labels."""
        op = ListNamespaces(self._conditions(prefix, suffix), max_depth, limit, offset)
        return self._runner.call(self._one(op))


class AsyncItems(_ItemsBase):
    """Generic items for asyncio code; the same API as :class:`Items`, awaited."""

    memory: AsyncFlowHost
    _runner: AsyncRunner

    def _new_runner(self) -> AsyncRunner:
        return AsyncRunner(
            self.memory, lambda: self.embedder, ready=lambda: self._ready, check=self._ready_flow
        )

    async def aclose(self) -> None:
        """Give connections kept warm back to the pool (the memory is not closed)."""
        await self._runner.aclose()

    # Items' methods, awaited (``runtime/twin.py``).
    batch = awaited(Items.batch)
    setup = awaited(Items.setup)
    sweep = awaited(Items.sweep)
    index_health = awaited(Items.index_health)
    rebuild_indexes = awaited(Items.rebuild_indexes)
    get = awaited(Items.get)
    put = awaited(Items.put)
    delete = awaited(Items.delete)
    search = awaited(Items.search)
    list_namespaces = awaited(Items.list_namespaces)
