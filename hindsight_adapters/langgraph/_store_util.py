"""Small helpers of ``HindsightStore``: call coalescing and awaitable sweeper handles."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any

from hindsight_core.items import GetItem, ItemOp, ListNamespaces, PutItem, SearchItems

Call = tuple[Any, ...]
"""A read as queued: ``(kind, *the core op's fields)``, kind one of :data:`READS`. A
plain tuple, not the op: the garbage collector stops tracking a tuple of strings,
numbers and tuples after its first pass, so 15,000 pending reads of LangGraph's
store test are that many objects fewer for every full collection to trace, and
identical reads compare in C. The core op is built when the batch runs, once per
distinct read. (A put stays a core op: its value, a dict, keeps a tuple tracked.)"""
READS: dict[str, Callable[..., ItemOp]] = {
    "get": GetItem,
    "search": SearchItems,
    "list": ListNamespaces,
}


def core_op(entry: Call | ItemOp) -> ItemOp:
    """The core op of a queued read (an op queued as one, as it is)."""
    if type(entry) is tuple:
        return READS[entry[0]](*entry[1:])
    return entry  # type: ignore[return-value]


class SweeperFuture(concurrent.futures.Future[None]):
    """The sweeper's future; also awaitable, so ``await store.start_ttl_sweeper()``
    (AsyncPostgresStore's spelling) works too."""

    def __await__(self) -> Any:
        return self
        yield  # pragma: no cover - makes this a generator


class Stopped(int):
    """``stop_ttl_sweeper``'s result: truthy when stopped; awaitable like the async API."""

    def __await__(self) -> Any:
        return bool(self)
        yield  # pragma: no cover - makes this a generator

    def __repr__(self) -> str:
        return repr(bool(self))


# Callers handed their results per event-loop tick, at most this many (see _resolve).
RESOLVE_CHUNK = 100


class Coalescer:
    """Runs the calls (:data:`Call`) and op lists submitted in one event-loop tick as a
    single batch.

    If the merged batch fails and came from several callers, each caller's ops are
    retried alone, so one caller's bad op never fails another's.
    """

    def __init__(self, run: Callable[[list[ItemOp]], Awaitable[list[Any]]]) -> None:
        self._run = run
        # Per loop, this tick's submissions (a list of ops gets a list of results, a
        # single op its result) and their futures, in two lists: a (ops, future) pair
        # per call was one more object for each garbage collection to trace, 30,000 of
        # them under LangGraph's test_large_batches_async.
        self._pending: dict[asyncio.AbstractEventLoop, tuple[list[Any], list[Any]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def enqueue(self, ops: list[ItemOp] | ItemOp | Call) -> asyncio.Future[Any]:
        """Queue ``ops`` for this tick's batch; the future gets their results (one
        call, not in a list: its result).

        A plain function returning the future, not a coroutine: with 60,000 calls
        pending at once (``asyncio.gather``), each frame and object a pending call keeps
        alive is traced by every garbage collection, which took most of the time.
        """
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = ([], [])
            loop.call_soon(self._flush, loop)
        pending[0].append(ops)
        pending[1].append(fut)
        return fut

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        submitted, futures = self._pending.pop(loop, ([], []))
        task = loop.create_task(self._execute(submitted, futures))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, submitted: list[Any], futures: list[Any]) -> None:
        lists = list in map(type, submitted)  # an abatch's op list among single ops
        merged: list[Call | ItemOp] = submitted
        if lists:
            merged = []
            for ops in submitted:
                if type(ops) is list:
                    merged.extend(ops)
                else:
                    merged.append(ops)
        try:
            results = await self._run_unique(merged)
        except BaseException as exc:  # noqa: BLE001 - handed to the callers
            if len(futures) == 1 or not isinstance(exc, Exception):
                for fut in futures:
                    if not fut.done():
                        fut.set_exception(exc)
                return
            for ops, fut in zip(submitted, futures, strict=True):
                try:
                    result = await (self._run(ops) if type(ops) is list else self._one(ops))
                except Exception as one:  # noqa: BLE001 - handed to the caller
                    if not fut.done():
                        fut.set_exception(one)
                else:
                    if not fut.done():
                        fut.set_result(result)
            return
        if lists:  # an op list's results as one list, in its place
            results = _split(submitted, results)
        await _resolve(futures, results)

    async def _run_unique(self, entries: list[Call | ItemOp]) -> list[Any]:
        """Run the calls and ops with each distinct read once, its result shared by the
        identical ones (as LangGraph's ``AsyncBatchedBaseStore`` does): 60,000 gathered
        calls of LangGraph's store test hold 30,000 reads of some 2,000 distinct ones.
        Puts all go through: the batch validates each and keeps the last one of a key."""
        first: dict[Any, int] = {}
        unique: list[ItemOp] = []
        where: list[int] = []
        for entry in entries:
            at = len(unique)
            if not isinstance(entry, PutItem):
                # (try, not contextlib.suppress: a context manager per op is not free)
                try:
                    at = first.setdefault(entry, at)
                except TypeError:  # holds a dict (a search filter): not deduplicated
                    at = len(unique)
            if at == len(unique):
                unique.append(core_op(entry))
            where.append(at)
        results = await self._run(unique)
        if len(unique) == len(entries):
            return results
        return [results[i] for i in where]

    async def _one(self, entry: Call | ItemOp) -> Any:
        return (await self._run([core_op(entry)]))[0]


def _split(submitted: list[Any], results: list[Any]) -> list[Any]:
    """One result per submission: a single op's, or an op list's as a list."""
    out: list[Any] = []
    start = 0
    for ops in submitted:
        if type(ops) is list:
            out.append(results[start : start + len(ops)])
            start += len(ops)
        else:
            out.append(results[start])
            start += 1
    return out


async def _resolve(futures: list[Any], results: list[Any]) -> None:
    """Set each future's result, ``RESOLVE_CHUNK`` at a time, letting the loop run in
    between: the callers resume as they go, so each one's wake-up callback and handle
    are freed young. Setting 30,000 at once (LangGraph's test_large_batches_async)
    kept some 120,000 such objects alive together, enough to start one more full
    garbage collection (a pass over every object of the process)."""
    at = 0
    try:
        for at in range(0, len(futures), RESOLVE_CHUNK):
            if at:
                await asyncio.sleep(0)
            end = at + RESOLVE_CHUNK
            for fut, result in zip(futures[at:end], results[at:end], strict=True):
                if not fut.done():
                    fut.set_result(result)
    except BaseException:  # cancelled between two chunks (the loop closing): no caller
        for fut in futures[at:]:  # is left waiting for ever
            fut.cancel()
        raise
