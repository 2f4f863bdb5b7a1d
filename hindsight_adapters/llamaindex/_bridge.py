"""Calling the core from whatever event loop LlamaIndex happens to run us on.

LlamaIndex's sync entry points (``Memory.get``, ``SimpleChatEngine.chat``, ...)
run the async code through ``asyncio_run``: inside a running loop that means a
**new thread with a new event loop per call**. An :class:`~hindsight_core.AsyncMemory`
owns an asyncio connection pool that belongs to the loop it was first used on,
so using it from such a throw-away loop would break (or leak connections).

The choice made here: an ``AsyncMemory`` is used natively only on its *home loop*
(the loop running when the adapter was built, else the first loop of the main
thread that uses it).
On any other loop the bridge uses a sync :class:`~hindsight_core.Memory` that
shares the same settings, embedder and database, in the default thread pool
(``run_in_executor``): its pool is thread-safe and bound to no loop. A sync
``Memory`` passed in is always used that way. Nothing ever runs a loop-bound pool
on a foreign loop, and no event loop is ever driven from sync code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from hindsight_core import AsyncMemory, Memory, RecallResult
from hindsight_core.memory.results import degraded
from hindsight_core.memory.scope import read_set
from hindsight_core.models import Experience, Namespace, validate_namespace

if TYPE_CHECKING:
    from hindsight_core.reflection import (
        AsyncReflector,
        BackgroundReflector,
        ReflectionResult,
        Reflector,
        Trajectory,
    )

log = logging.getLogger("hindsight.llamaindex")

T = TypeVar("T")

READ_NAMESPACES = (
    "Namespaces also recalled from (an agent's team's, a sibling's; 'acme/team/*' for one "
    "and all under it), ranked with the own namespace's as one collection (docs/sharing.md)."
)


def checked_scope(data: dict[str, Any]) -> dict[str, Any]:
    """A memory block's or memory's fields with ``namespace`` validated (stored as its
    tuple) and ``read_namespaces`` checked, before pydantic sees them, so that a bad
    one fails when the object is built, with an error naming the field."""
    if data.get("namespace") is not None:
        data["namespace"] = validate_namespace(data["namespace"])
    if data.get("read_namespaces") is not None:
        read_set(data["read_namespaces"], field="read_namespaces")
    return data


class CoreBridge:
    """A loop-safe handle on a hindsight ``Memory`` or ``AsyncMemory``.

    Args:
        memory: the core memory to recall from and reflect into.
        llm: the reflection model (our ``LLM`` protocol), or ``None`` for the
            rule-based distiller.
    """

    def __init__(self, memory: Memory | AsyncMemory, llm: Any = None) -> None:
        if not isinstance(memory, Memory | AsyncMemory):
            raise TypeError(
                f"memory must be a hindsight_core Memory or AsyncMemory, got "
                f"{type(memory).__name__}"
            )
        self.core = memory
        self.llm = llm
        self._amemory = memory if isinstance(memory, AsyncMemory) else None
        self._memory = memory if isinstance(memory, Memory) else None
        self._owns_sync = False
        self._home: weakref.ReferenceType[asyncio.AbstractEventLoop] | None = None
        if self._amemory is not None:
            with contextlib.suppress(RuntimeError):  # no loop yet: the first user's
                self._home = weakref.ref(asyncio.get_running_loop())
        self._lock = threading.RLock()
        self._areflector: AsyncReflector | None = None
        self._background: BackgroundReflector | None = None
        self.pending: set[asyncio.Task[Any] | concurrent.futures.Future[Any]] = set()
        self.submitted = 0
        """How many trajectories were handed to background reflection."""

    # ------------------------------------------------------------------ plumbing

    @property
    def namespace(self) -> Namespace:
        """The core memory's default namespace."""
        return self.core.namespace

    def scope(
        self, namespace: Namespace | None, reads: Sequence[Namespace | str] | None
    ) -> dict[str, Any]:
        """Recall's namespace arguments: ``namespace`` (``None``: the core memory's), or
        it and ``reads`` (``read_namespaces``) as one collection (docs/sharing.md)."""
        if not reads:
            return {"namespace": namespace}
        return {"namespace": None, "namespaces": [namespace or self.namespace, *reads]}

    def native(self) -> bool:
        """Whether the ``AsyncMemory`` can be awaited on the current loop."""
        if self._amemory is None:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._home is None:
            if threading.current_thread() is not threading.main_thread():
                return False  # maybe one of asyncio_run's throw-away loops: don't bind to it
            self._home = weakref.ref(loop)
        return self._home() is loop

    def sync_memory(self) -> Memory:
        """The sync ``Memory`` (built once from the ``AsyncMemory``'s configuration)."""
        if self._memory is None:
            with self._lock:
                if self._memory is None:
                    amem = self._amemory
                    assert amem is not None
                    url = amem.database_url
                    if url is None and amem.engine is not None:
                        url = amem.engine.url.render_as_string(hide_password=False)
                    self._memory = Memory(
                        amem.namespace,
                        settings=amem.settings,
                        embedder=amem.embedder,
                        database_url=url,
                        clock=amem.clock,
                    )
                    self._owns_sync = True
        return self._memory

    async def _in_thread(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(func, *args, **kwargs))

    # ------------------------------------------------------------------ recall & feedback

    async def arecall(
        self,
        query: str,
        *,
        namespace: Namespace | None,
        scene: str | None,
        top_k: int,
        namespaces: Sequence[Namespace | str] | None = None,
    ) -> RecallResult:
        """Recall that never raises: any failure is a degraded result and a warning.
        ``namespaces``: instead of ``namespace``, the namespaces read (docs/sharing.md)."""
        where: dict[str, Any] = {"namespace": namespace, "namespaces": namespaces}
        try:
            if self.native():
                assert self._amemory is not None
                return await self._amemory.recall(query, **where, scene=scene, top_k=top_k)
            memory = self.sync_memory()
            return await asyncio.wait_for(
                self._in_thread(memory.recall, query, **where, scene=scene, top_k=top_k),
                memory.settings.recall_timeout + memory.settings.connect_timeout,
            )
        except Exception as exc:  # noqa: BLE001 - degrade, don't block: no lessons, the chat goes on
            return degraded(exc)

    def recall(
        self,
        query: str,
        *,
        namespace: Namespace | None,
        scene: str | None,
        top_k: int,
        namespaces: Sequence[Namespace | str] | None = None,
    ) -> RecallResult:
        """Sync recall (through the sync ``Memory``); never raises."""
        try:
            return self.sync_memory().recall(
                query, namespace=namespace, namespaces=namespaces, scene=scene, top_k=top_k
            )
        except Exception as exc:  # noqa: BLE001 - degrade, don't block (as arecall)
            return degraded(exc)

    async def amark_used(
        self,
        record_id: object,
        helpful: bool,
        *,
        namespace: Namespace | None,
        by: str | None = None,
    ) -> Experience:
        """Feedback on a recalled record (in ``namespace``, where it lives), given ``by``."""
        if self.native():
            assert self._amemory is not None
            return await self._amemory.mark_used(record_id, helpful, namespace=namespace, by=by)
        return await self._in_thread(
            self.sync_memory().mark_used, record_id, helpful, namespace=namespace, by=by
        )

    def mark_used(
        self,
        record_id: object,
        helpful: bool,
        *,
        namespace: Namespace | None,
        by: str | None = None,
    ) -> Experience:
        return self.sync_memory().mark_used(record_id, helpful, namespace=namespace, by=by)

    async def alocate(
        self, record_id: object, namespaces: Sequence[Namespace | str]
    ) -> Namespace | None:
        """Which of ``namespaces`` holds the record (``Memory.locate``)."""
        if self.native():
            assert self._amemory is not None
            return await self._amemory.locate(record_id, namespaces=namespaces)
        return await self._in_thread(self.sync_memory().locate, record_id, namespaces=namespaces)

    def locate(self, record_id: object, namespaces: Sequence[Namespace | str]) -> Namespace | None:
        return self.sync_memory().locate(record_id, namespaces=namespaces)

    # ------------------------------------------------------------------ reflection

    def _async_reflector(self) -> AsyncReflector:
        if self._areflector is None or self._areflector.llm is not self.llm:
            from hindsight_core.reflection import AsyncReflector

            assert self._amemory is not None  # native(): an AsyncMemory
            self._areflector = AsyncReflector(self._amemory, self.llm)
        return self._areflector

    def _sync_reflector(self) -> Reflector:
        from hindsight_core.reflection import Reflector

        return Reflector(self.sync_memory(), self.llm)

    def submit(
        self, trajectory: Trajectory, *, namespace: Namespace | None
    ) -> asyncio.Task[ReflectionResult] | concurrent.futures.Future[ReflectionResult]:
        """Reflect in the background; returns the task or future (never blocks)."""
        if self.native():
            job: asyncio.Task[ReflectionResult] | concurrent.futures.Future[ReflectionResult]
            job = self._async_reflector().submit(trajectory, namespace=namespace)
        else:
            with self._lock:
                if self._background is None:
                    from hindsight_core.reflection import BackgroundReflector

                    self._background = BackgroundReflector(self._sync_reflector())
            job = self._background.submit(trajectory, namespace=namespace)
        self.submitted += 1
        self.pending.add(job)
        job.add_done_callback(self.pending.discard)
        return job

    async def areflect(
        self, trajectory: Trajectory, *, namespace: Namespace | None
    ) -> ReflectionResult:
        """Reflect now and return what was written."""
        if self.native():
            return await self._async_reflector().reflect(trajectory, namespace=namespace)
        return await self._in_thread(self.reflect, trajectory, namespace=namespace)

    def reflect(self, trajectory: Trajectory, *, namespace: Namespace | None) -> ReflectionResult:
        return self._sync_reflector().reflect(trajectory, namespace=namespace)

    async def wait(self, timeout: float | None = None) -> None:
        """Wait for background reflections submitted so far (tests, shutdown)."""
        loop = asyncio.get_running_loop()
        waits = [
            j if isinstance(j, asyncio.Task) else asyncio.wrap_future(j)
            for j in list(self.pending)
            if not isinstance(j, asyncio.Task) or j.get_loop() is loop
        ]
        if waits:
            await asyncio.wait(waits, timeout=timeout)

    def close(self) -> None:
        """Stop the background reflector and close a sync memory this bridge built."""
        if self._background is not None:
            self._background.close()
            self._background = None
        if self._owns_sync and self._memory is not None:
            self._memory.close()
            self._memory = None
            self._owns_sync = False


def render_lessons(hits: Sequence[Any], header: str) -> str:
    """Compact text for the model: one line per lesson, lesson first, then trigger and id."""
    if not hits:
        return ""
    lines = [header]
    for i, hit in enumerate(hits, 1):
        rec = hit.record
        lines.append(f"{i}. {rec.lesson} (when: {rec.trigger}) [id: {rec.id}]")
    return "\n".join(lines)
