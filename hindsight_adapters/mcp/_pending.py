"""A memory still being built: the stdio server answers ``initialize`` first.

A client starting ``hindsight mcp`` waits for the ``initialize`` answer (some give up
after a few seconds), which needs only the MCP SDK and the tools' schemas. The
engine (the database stack, numpy and the core's flows) is imported by a background
thread started once the server is serving; each tool call waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from hindsight_core.errors import HindsightError

if TYPE_CHECKING:
    from hindsight_core import AsyncMemory
    from hindsight_core.models import Namespace

log = logging.getLogger("hindsight.mcp")


class PendingMemory:
    """An :class:`~hindsight_core.AsyncMemory` built by ``build`` in a daemon thread.

    Args:
        namespace: the memory's namespace, known (and validated) before it is built.
        build: makes the memory (and starts its warm-up); an error it raises is
            raised by every :meth:`get`.
    """

    def __init__(self, namespace: Namespace, build: Callable[[], AsyncMemory]) -> None:
        self.namespace = namespace
        self._build = build
        self._memory: Future[AsyncMemory] = Future()
        self._started = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> PendingMemory:
        """Start building (once; later calls do nothing)."""
        with self._started:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="hindsight-memory", daemon=True
                )
                self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._memory.set_result(self._build())
        except HindsightError as exc:  # the tool calls report it
            self._memory.set_exception(exc)
        except BaseException as exc:  # a background thread must log, not vanish
            log.exception("the memory could not be built")
            self._memory.set_exception(exc)

    async def get(self) -> AsyncMemory:
        """The memory, once built (started now if it was not)."""
        self.start()
        return await asyncio.wrap_future(self._memory)

    async def aclose(self) -> None:
        """Close the memory if it was built."""
        if self._memory.done() and self._memory.exception() is None:
            await self._memory.result().aclose()
