"""The asyncio front end: :class:`AsyncMemory` (same API as ``Memory``, awaited).

The same flows as ``Memory``'s, bound in one line each through an
:class:`~hindsight_core.runtime.runner.AsyncRunner`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..models import Experience, Namespace, SearchHit, WriteResult
from ..runtime.flow import Flow, MakeFlow, R
from ..runtime.routing import AsyncReplicaReads
from ..runtime.runner import AsyncRunner
from ..storage.embedded import exit_on_signals
from ..storage.engine import create_async, create_async_side_engine
from ..storage.vectors import adopt_engine
from .inspection import AsyncInspectMethods
from .results import Feedback, RecallResult
from .store_methods import AsyncStoreMethods
from .write_flows import RecordFlows, RecordInput

if TYPE_CHECKING:  # loads the ORM: imported when the engine is built (storage.engine)
    from sqlalchemy.ext.asyncio import AsyncEngine


class AsyncMemory(RecordFlows, AsyncStoreMethods, AsyncInspectMethods):
    """Hindsight memory for asyncio code; see :class:`~hindsight_core.Memory` for the API.

    I/O is natively async (psycopg's async driver); the local embedding model runs
    in a worker thread so the event loop stays responsive.
    """

    def __init__(self, *args: Any, engine: AsyncEngine | None = None, **kwargs: Any) -> None:
        """Arguments as :class:`~hindsight_core.Memory`'s; ``engine``: an async engine to share (not
        disposed of by :meth:`aclose`)."""
        super().__init__(*args, **kwargs)
        self._engine = engine
        self._owns_engine = engine is None
        if engine is not None:
            adopt_engine(engine.sync_engine)
        self._side: AsyncEngine | None = None  # flow.Pipelined reads (write_many's lookups)
        self._reads: AsyncReplicaReads | None = None  # read replicas, when configured
        self._runner = AsyncRunner(
            self,
            lambda: self.embedder,
            ready=lambda: self._ready,
            check=self._read_check_flow,
            side=self._side_engine if self._owns_engine else None,
        )

    async def get_engine(self) -> AsyncEngine:
        """The async engine (connection pool), created on first use off the loop."""
        if self._engine is None:
            if self.database_url is None:
                # From the loop's thread: the worker thread below cannot install handlers.
                exit_on_signals()
            # Resolving the URL may start the embedded server: keep it off the loop.
            loop = asyncio.get_running_loop()
            engine = await loop.run_in_executor(
                None, create_async, self.settings, self._database_url
            )
            if self._engine is None:
                self._engine = engine
            else:
                await engine.dispose()
        return self._engine

    @property
    def engine(self) -> AsyncEngine | None:
        """The async engine, once created (it is created on first use)."""
        return self._engine

    async def run_flow(self, flow: Flow[R] | MakeFlow[R]) -> R:
        """``Memory.run_flow``, awaited."""
        return await self._runner.run(flow)

    def _side_engine(self) -> AsyncEngine:
        """The one-connection pool for ``flow.Pipelined`` reads, built on first need
        (called by the driver, so after ``get_engine``)."""
        if self._side is None:
            assert self._engine is not None
            self._side = create_async_side_engine(self.settings, self._engine)
        return self._side

    def replica_reads(self) -> AsyncReplicaReads | None:
        """The read replicas (``settings.read_database_urls``), or None."""
        if self._reads is None and self._replica_urls():
            self._reads = AsyncReplicaReads(self.settings, self._replica_urls())
        return self._reads

    async def note_write(self, key: str | None) -> None:
        """``Memory.note_write``, awaited."""
        await self._runner.note_write(key)

    async def aclose(self) -> None:
        """Close the connection pool (if this object created it)."""
        await self._runner.aclose()
        if self._reads is not None:
            await self._reads.aclose()
            self._reads = None
        if self._side is not None:
            await self._side.dispose()
            self._side = None
        if self._engine is not None and self._owns_engine:
            await self._engine.dispose()
            self._engine = None

    async def __aenter__(self) -> AsyncMemory:
        """This memory, for ``async with``."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close it (:meth:`aclose`)."""
        await self.aclose()

    async def setup(self) -> None:
        """Apply migrations and check the embedding model (also done on first use)."""
        await self._runner.run(self.ready_flow())

    async def write(
        self, record: RecordInput, *, namespace: Namespace | str | None = None
    ) -> WriteResult:
        """Validate and store one record, or merge it into a near-duplicate."""
        return (
            await self._runner.run_write(
                self.write_flow([record], namespace), self.namespace_key(namespace)
            )
        )[0]

    async def write_many(
        self, records: Sequence[RecordInput], *, namespace: Namespace | str | None = None
    ) -> list[WriteResult]:
        """Write many records in one transaction (all or nothing), deduplicated."""
        return await self._runner.run_write(
            self.write_flow(records, namespace), self.namespace_key(namespace)
        )

    async def search(
        self,
        query: str,
        *,
        namespace: Namespace | str | None = None,
        namespaces: Sequence[Namespace | str] | None = None,
        scene: str | None = None,
        top_k: int = 5,
        filters: Mapping[str, Any] | None = None,
        include_superseded: bool = False,
    ) -> list[SearchHit]:
        """Hybrid recall: semantic + keyword, bent by the decayed score."""
        return await self._runner.run_read(
            *self._search_read(
                query, namespace, namespaces, scene, top_k, filters, include_superseded
            )
        )

    async def recall(
        self,
        query: str,
        *,
        namespace: Namespace | str | None = None,
        namespaces: Sequence[Namespace | str] | None = None,
        scene: str | None = None,
        top_k: int = 5,
    ) -> RecallResult:
        """Like :meth:`search`, but never fails the agent: on an error or past
        ``settings.recall_timeout``, no hits and a warning."""
        return await self._runner.call(
            self._recall_call(query, namespace, scene, top_k, namespaces)
        )

    async def get(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> Experience:
        """One record by id (archived ones too)."""
        return await self._runner.run_read(
            lambda: self._get_flow(record_id, namespace), self.namespace_key(namespace)
        )

    async def list_records(
        self, *, namespace: Namespace | str | None = None, **options: Any
    ) -> list[Experience]:
        """Records of a namespace, filtered, ordered and paged as :meth:`Memory.list_records`'s."""
        return await self._runner.run_read(*self._list_read(namespace, options))

    async def mark_used(
        self,
        record_id: object,
        helpful: bool = True,
        *,
        namespace: Namespace | str | None = None,
        by: str | None = None,
    ) -> Experience:
        """Feedback on a recalled record: helpful raises its score and resets its decay clock;
        unhelpful lowers it; ``by`` is recorded with it (:meth:`Memory.mark_used`)."""
        return await self._runner.run_write(
            self.mark_used_flow(record_id, helpful, namespace, by), self.namespace_key(namespace)
        )

    async def feedback(
        self, record_id: object, *, namespace: Namespace | str | None = None, limit: int = 100
    ) -> list[Feedback]:
        """The usage feedback given on a record, newest first (:meth:`Memory.feedback`)."""
        return await self._runner.run_read(
            lambda: self._feedback_flow(record_id, namespace, limit), self.namespace_key(namespace)
        )

    async def locate(
        self, record_id: object, *, namespaces: Sequence[Namespace | str]
    ) -> Namespace | None:
        """Which of ``namespaces`` holds the record, or None (:meth:`Memory.locate`)."""
        return await self._runner.run_read(lambda: self._locate_flow(record_id, namespaces), None)

    async def forget(self, record_id: object, *, namespace: Namespace | str | None = None) -> None:
        """Delete a record for good."""
        await self._runner.run_write(
            self._change_flow(record_id, "forget", namespace), self.namespace_key(namespace)
        )

    async def archive(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> Experience:
        """Stop recalling a record (restorable)."""
        return await self._runner.run_write(
            self._curate_flow(record_id, "archive", namespace), self.namespace_key(namespace)
        )

    async def restore(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> Experience:
        """Bring an archived record back (its score is lifted to the eviction line)."""
        return await self._runner.run_write(
            self._curate_flow(
                record_id, "restore", namespace, restore_score=self.settings.evict_below + 0.1
            ),
            self.namespace_key(namespace),
        )

    async def set_critical(
        self, record_id: object, critical: bool = True, *, namespace: Namespace | str | None = None
    ) -> Experience:
        """Mark a record critical (never decays, never evicted) or not."""
        return await self._runner.run_write(
            self._curate_flow(record_id, "critical", namespace, critical=bool(critical)),
            self.namespace_key(namespace),
        )

    async def edit(
        self, record_id: object, *, namespace: Namespace | str | None = None, **changes: Any
    ) -> Experience:
        """Change a record's fields (lesson, trigger, ...); it is re-embedded."""
        return await self._runner.run_write(
            self._edit_flow(record_id, changes, namespace), self.namespace_key(namespace)
        )

    async def merge(
        self,
        record_ids: Iterable[object],
        into: RecordInput,
        *,
        namespace: Namespace | str | None = None,
    ) -> Experience:
        """Replace records by one more general lesson; the sources are archived and linked."""
        return await self._runner.run_write(
            self.merge_flow(record_ids, into, namespace), self.namespace_key(namespace)
        )

    async def supersede(
        self,
        old_id: object,
        new_record: RecordInput,
        *,
        reason: str | None = None,
        actor: str | None = None,
        namespace: Namespace | str | None = None,
    ) -> WriteResult:
        """Write ``new_record`` as the new version of a lesson (docs/versions.md)."""
        return await self._runner.run_write(
            self.supersede_flow(
                old_id, new_record, reason=reason, actor=actor, namespace=namespace
            ),
            self.namespace_key(namespace),
        )

    async def history(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> list[Experience]:
        """Every version of a lesson, oldest first, from any of its ids."""
        return await self._runner.run_read(
            lambda: self._history_flow(record_id, namespace), self.namespace_key(namespace)
        )
