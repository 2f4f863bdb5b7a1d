"""Small helpers of ``HindsightStore``: call coalescing and awaitable sweeper handles."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import Any

from hindsight_core.items import ItemOp


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



class Coalescer:
    """Runs the op lists submitted in one event-loop tick as a single batch.

    If the merged batch fails and came from several callers, each caller's ops are
    retried alone, so one caller's bad op never fails another's.
    """

    def __init__(self, run: Callable[[list[ItemOp]], Awaitable[list[Any]]]) -> None:
        self._run = run
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[list[ItemOp], Any]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, ops: list[ItemOp]) -> list[Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        pending = self._pending.setdefault(loop, [])
        pending.append((ops, fut))
        if len(pending) == 1:
            loop.call_soon(self._flush, loop)
        return await fut  # type: ignore[no-any-return]

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        entries = self._pending.pop(loop, [])
        task = loop.create_task(self._execute(entries))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, entries: list[tuple[list[ItemOp], Any]]) -> None:
        merged = [op for ops, _ in entries for op in ops]
        try:
            results = await self._run(merged)
        except BaseException as exc:  # noqa: BLE001 - handed to the callers
            if len(entries) == 1 or not isinstance(exc, Exception):
                for _, fut in entries:
                    if not fut.done():
                        fut.set_exception(exc)
                return
            for ops, fut in entries:
                try:
                    result = await self._run(ops)
                except Exception as one:  # noqa: BLE001 - handed to the caller
                    if not fut.done():
                        fut.set_exception(one)
                else:
                    if not fut.done():
                        fut.set_result(result)
            return
        start = 0
        for ops, fut in entries:
            if not fut.done():
                fut.set_result(results[start:start + len(ops)])
            start += len(ops)
