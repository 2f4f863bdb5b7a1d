"""The asyncio front end: :class:`AsyncMemory` (same API as ``Memory``, awaited)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import HindsightError, ValidationError
from ..models import (
    Experience,
    MaintenanceReport,
    Namespace,
    ReindexReport,
    SearchHit,
    Stats,
    WriteResult,
)
from ..runtime.connections import AsyncConnections
from ..runtime.driver import run_async
from ..runtime.flow import Flow, MakeFlow, R, embedding_errors
from ..runtime.routing import AsyncReplicaReads, write_lsn_flow
from ..storage.embedded import exit_on_signals
from ..storage.engine import create_async, create_async_side_engine
from ..storage.vectors import adopt_engine
from .inputs import check_search
from .inspection import AsyncInspectMethods
from .lifecycle import LifecycleFlows, Progress, read_import_lines, write_export
from .results import Feedback, RecallResult, degraded
from .write_flows import RecordFlows, RecordInput

if TYPE_CHECKING:  # loads the ORM: imported when the engine is built (storage.engine)
    from sqlalchemy.ext.asyncio import AsyncEngine


class AsyncMemory(RecordFlows, LifecycleFlows, AsyncInspectMethods):
    """Hindsight memory for asyncio code; see :class:`~hindsight_core.Memory` for the API.

    I/O is natively async (psycopg's async driver); the local embedding model runs
    in a worker thread so the event loop stays responsive.
    """

    def __init__(self, *args: Any, engine: AsyncEngine | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._engine = engine
        self._owns_engine = engine is None
        if engine is not None:
            adopt_engine(engine.sync_engine)
        self._conns: AsyncConnections | None = None
        self._side: AsyncEngine | None = None  # flow.Pipelined reads (write_many's lookups)
        self._reads: AsyncReplicaReads | None = None  # read replicas, when configured

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
        return await run_async(flow, await self._connections(), self.embedder)

    async def _connections(self) -> AsyncConnections:
        self._conns = AsyncConnections.of(
            self._conns, await self.get_engine(), self._side_engine if self._owns_engine else None
        )
        return self._conns

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

    async def _run_read(self, make: MakeFlow[R], key: str | None) -> R:
        """``Memory._run_read``: on a replica when configured and fresh enough."""
        reads = self.replica_reads() if self._ready else None
        if reads is None:
            return await self.run_flow(make)
        return await reads.run(make, self.embedder, key, lambda: self.run_flow(make))

    async def _run_write(self, flow: Flow[R], key: str | None) -> R:
        """``Memory._run_write``: note the WAL position after a write (with replicas)."""
        result = await self.run_flow(flow)
        await self.note_write(key)
        return result

    async def note_write(self, key: str | None) -> None:
        """``Memory.note_write``, awaited."""
        reads = self.replica_reads()
        if reads is not None:
            reads.router.note_write(key, await self.run_flow(write_lsn_flow))

    async def aclose(self) -> None:
        """Close the connection pool (if this object created it)."""
        if self._conns is not None:
            await self._conns.aclose()
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
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def setup(self) -> None:
        await self.run_flow(self.ready_flow())

    async def write(
        self, record: RecordInput, *, namespace: Namespace | str | None = None
    ) -> WriteResult:
        return (
            await self._run_write(
                self.write_flow([record], namespace), self.namespace_key(namespace)
            )
        )[0]

    async def write_many(
        self, records: Sequence[RecordInput], *, namespace: Namespace | str | None = None
    ) -> list[WriteResult]:
        return await self._run_write(
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
        # before connecting: see check_search
        check_search(query, scene, top_k, filters, namespace=namespace, namespaces=namespaces)
        return await self._run_read(
            lambda: self._search_flow(
                query,
                namespace,
                scene,
                top_k,
                filters,
                include_superseded=include_superseded,
                namespaces=namespaces,
            ),
            self._read_key(namespace, namespaces),
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
        # a bad argument is not degraded to "no hits"
        check_search(query, scene, top_k, namespace=namespace, namespaces=namespaces)
        timeout = self.settings.recall_timeout
        key = self._read_key(namespace, namespaces)
        try:
            # The first recall embeds its query outside the bound, as in Memory.recall.
            if not self._model_loaded and isinstance(query, str) and query.strip():
                with embedding_errors(self.embedder):
                    self._cache_query(query, await self.embedder.aembed_queries([query]))
                self._model_loaded = True
            return RecallResult(
                hits=await asyncio.wait_for(
                    self._run_read(
                        lambda: self._search_flow(
                            query,
                            namespace,
                            scene,
                            top_k,
                            None,
                            int(timeout * 1000),
                            namespaces=namespaces,
                        ),
                        key,
                    ),
                    timeout,
                )
            )
        except ValidationError:
            raise
        except (HindsightError, TimeoutError) as exc:
            return degraded(exc)

    async def get(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> Experience:
        return await self._run_read(
            lambda: self._get_flow(record_id, namespace), self.namespace_key(namespace)
        )

    async def list_records(
        self, *, namespace: Namespace | str | None = None, **options: Any
    ) -> list[Experience]:
        key = None if options.get("all_namespaces") else self.namespace_key(namespace)
        return await self._run_read(lambda: self._list_flow(namespace, **options), key)

    async def mark_used(
        self,
        record_id: object,
        helpful: bool = True,
        *,
        namespace: Namespace | str | None = None,
        by: str | None = None,
    ) -> Experience:
        return await self._run_write(
            self.mark_used_flow(record_id, helpful, namespace, by), self.namespace_key(namespace)
        )

    async def feedback(
        self, record_id: object, *, namespace: Namespace | str | None = None, limit: int = 100
    ) -> list[Feedback]:
        return await self._run_read(
            lambda: self._feedback_flow(record_id, namespace, limit), self.namespace_key(namespace)
        )

    async def locate(
        self, record_id: object, *, namespaces: Sequence[Namespace | str]
    ) -> Namespace | None:
        return await self._run_read(lambda: self._locate_flow(record_id, namespaces), None)

    async def forget(self, record_id: object, *, namespace: Namespace | str | None = None) -> None:
        await self._run_write(
            self._change_flow(record_id, "forget", namespace), self.namespace_key(namespace)
        )

    async def archive(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> Experience:
        return await self._run_write(
            self._curate_flow(record_id, "archive", namespace), self.namespace_key(namespace)
        )

    async def restore(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> Experience:
        return await self._run_write(
            self._curate_flow(
                record_id, "restore", namespace, restore_score=self.settings.evict_below + 0.1
            ),
            self.namespace_key(namespace),
        )

    async def set_critical(
        self, record_id: object, critical: bool = True, *, namespace: Namespace | str | None = None
    ) -> Experience:
        return await self._run_write(
            self._curate_flow(record_id, "critical", namespace, critical=bool(critical)),
            self.namespace_key(namespace),
        )

    async def edit(
        self, record_id: object, *, namespace: Namespace | str | None = None, **changes: Any
    ) -> Experience:
        return await self._run_write(
            self._edit_flow(record_id, changes, namespace), self.namespace_key(namespace)
        )

    async def merge(
        self,
        record_ids: Iterable[object],
        into: RecordInput,
        *,
        namespace: Namespace | str | None = None,
    ) -> Experience:
        return await self._run_write(
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
        return await self._run_write(
            self.supersede_flow(
                old_id, new_record, reason=reason, actor=actor, namespace=namespace
            ),
            self.namespace_key(namespace),
        )

    async def history(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> list[Experience]:
        return await self._run_read(
            lambda: self._history_flow(record_id, namespace), self.namespace_key(namespace)
        )

    async def maintain(self, *, namespace: Namespace | str | None = None) -> MaintenanceReport:
        return await self._run_write(
            self._maintain_flow(namespace, namespace is None),
            None if namespace is None else self.namespace_key(namespace),
        )

    async def stats(self, *, namespace: Namespace | str | None = None) -> Stats:
        return self._with_reads(await self.run_flow(self._stats_flow(namespace)))

    async def drop_namespace(self, namespace: Namespace | str) -> dict[str, int]:
        return await self.run_flow(self._drop_namespace_flow(namespace))

    async def export(
        self,
        target: str | Path | IO[str],
        *,
        namespace: Namespace | str | None = None,
        all_namespaces: bool = False,
    ) -> int:
        records = await self.run_flow(self._export_flow(namespace, all_namespaces))
        return write_export(target, records)

    async def import_records(
        self,
        source: str | Path | Iterable[str],
        *,
        skip_invalid: bool = False,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        return await self._run_write(
            self._import_flow(
                read_import_lines(source), skip_invalid=skip_invalid, progress=progress
            ),
            None,
        )

    async def reindex(
        self, *, force: bool = False, progress: Progress | None = None
    ) -> ReindexReport:
        return await self._run_write(self._reindex_flow(progress, force), None)
