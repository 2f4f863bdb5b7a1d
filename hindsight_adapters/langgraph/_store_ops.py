"""Mapping LangGraph's store ops and results to the core's, and the hot async calls.

``HindsightStore``'s ``aget`` / ``aput`` / ``adelete`` / ``asearch`` /
``alist_namespaces`` queue their call on the store's coalescer directly
(:class:`DirectAsyncCalls`), as LangGraph's ``AsyncBatchedBaseStore`` does, instead of
going through ``BaseStore``'s default ``await self.abatch([op])``: under LangGraph's
``test_large_batches_async`` (60,000 coroutines in one ``asyncio.gather``) every frame
and object a pending call holds is traced by each garbage collection, and those
collections took most of the time (the store ran well behind AsyncPostgresStore). So a call
holds as little as it can: its future and its op (a read's as a
plain tuple, ``_store_util.Call``); the namespace checks are remembered per namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Literal

from langgraph.store.base import (
    NOT_PROVIDED,
    GetOp,
    Item,
    ListNamespacesOp,
    NotProvided,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    _ensure_refresh,
    _ensure_ttl,
    _validate_namespace,
    _validate_namespace_labels,
)
from langgraph.store.base import validate_op_namespace as _validate_op

from hindsight_core.arguments import remember_passed
from hindsight_core.items import GetItem, ItemOp, ListNamespaces, PutItem, SearchItems
from hindsight_core.models import Item as CoreItem
from hindsight_core.models import ItemHit, ScoreBreakdown


class HindsightSearchItem(SearchItem):
    """A ``SearchItem`` that also carries the hybrid score's parts (``breakdown``)."""

    __slots__ = ("breakdown",)

    def __init__(self, *args: Any, breakdown: ScoreBreakdown | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.breakdown = breakdown


def _core_ops(ops: list[Op]) -> list[ItemOp]:
    for op in ops:  # like PostgresStore: a bad namespace anywhere aborts the whole batch
        _validate_op(op)
    out: list[ItemOp] = []
    for op in ops:
        if isinstance(op, GetOp):
            out.append(GetItem(tuple(op.namespace), str(op.key), op.refresh_ttl))
        elif isinstance(op, PutOp):
            out.append(PutItem(tuple(op.namespace), str(op.key), op.value, op.index, op.ttl))
        elif isinstance(op, SearchOp):
            out.append(
                SearchItems(
                    tuple(op.namespace_prefix),
                    op.query,
                    op.filter,
                    op.limit,
                    op.offset,
                    op.refresh_ttl,
                )
            )
        elif isinstance(op, ListNamespacesOp):
            conds = tuple((c.match_type, tuple(c.path)) for c in op.match_conditions or ())
            out.append(ListNamespaces(conds, op.max_depth, op.limit, op.offset))
        else:
            raise ValueError(f"Unknown operation type: {type(op)}")
    return out


def _item(item: CoreItem) -> Item:
    return Item(
        value=item.value,
        key=item.key,
        namespace=item.namespace,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def _result(res: Any) -> Result:
    if isinstance(res, CoreItem):
        return _item(res)
    if isinstance(res, list) and res and isinstance(res[0], ItemHit):
        hits: list[SearchItem] = [
            HindsightSearchItem(
                h.item.namespace,
                h.item.key,
                h.item.value,
                h.item.created_at,
                h.item.updated_at,
                h.score,
                breakdown=h.breakdown,
            )
            for h in res
        ]
        return hits
    other: Result = res  # a put's None, a list of namespaces, an empty search
    return other


# LangGraph's namespace checks, remembered for the namespaces that passed them (tuples
# of strings: the same answer every time). 60,000 gathered calls of LangGraph's store
# test use a handful of namespaces, each otherwise checked label by label every call.
_check_labels = remember_passed(_validate_namespace_labels)
"""LangGraph's ``_validate_namespace_labels``, once per namespace."""
_check_namespace = remember_passed(_validate_namespace)
"""LangGraph's ``_validate_namespace`` (a put's: non-empty, not under "langgraph"),
once per namespace."""


class DirectAsyncCalls:
    """``BaseStore``'s single-op async calls, each queued straight onto the batch of its
    event-loop tick (``_enqueue``); same validation and defaults as ``BaseStore``'s."""

    ttl_config: TTLConfig | None
    # The store's coalescer's ``enqueue`` (of a read's ``_store_util.Call``, or a put's
    # core op), bound once.
    _enqueue: Callable[[tuple[Any, ...] | ItemOp], asyncio.Future[Any]]

    async def aget(
        self, namespace: tuple[str, ...], key: str, *, refresh_ttl: bool | None = None
    ) -> Item | None:
        _check_labels(namespace)
        item: Item | None = await self._enqueue(
            ("get", tuple(namespace), str(key), _ensure_refresh(self.ttl_config, refresh_ttl))
        )
        return item

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
    ) -> list[SearchItem]:
        _check_labels(namespace_prefix)
        hits: list[SearchItem] = await self._enqueue(
            (
                "search",
                tuple(namespace_prefix),
                query,
                filter,
                limit,
                offset,
                _ensure_refresh(self.ttl_config, refresh_ttl),
            )
        )
        return hits

    async def alist_namespaces(
        self,
        *,
        prefix: tuple[str, ...] | None = None,
        suffix: tuple[str, ...] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        conds: tuple[tuple[Literal["prefix", "suffix"], tuple[str, ...]], ...] = ()
        if prefix:
            _check_labels(prefix)
            conds = (("prefix", tuple(prefix)),)
        if suffix:
            _check_labels(suffix)
            conds = (*conds, ("suffix", tuple(suffix)))
        found: list[tuple[str, ...]] = await self._enqueue(
            ("list", conds, max_depth, limit, offset)
        )
        return found

    async def aput(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        index: Literal[False] | list[str] | None = None,
        *,
        ttl: float | None | NotProvided = NOT_PROVIDED,
    ) -> None:
        _check_namespace(namespace)
        await self._enqueue(
            PutItem(tuple(namespace), str(key), value, index, _ensure_ttl(self.ttl_config, ttl))
        )

    async def adelete(self, namespace: tuple[str, ...], key: str) -> None:
        _check_labels(namespace)
        await self._enqueue(PutItem(tuple(namespace), str(key), None))
