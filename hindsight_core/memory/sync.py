"""The synchronous front end: :class:`Memory`.

Each operation is a flow of the mixins (``write_flows.py``, ``read_flows.py``, ...)
bound in one line through the memory's runner (``runtime/runner.py``): the record
operations here, the whole-store ones in ``store_methods.py`` (whose
``lifecycle.LifecycleFlows`` are built on the record flows, ``write_flows.RecordFlows``)
and the inspection ones in ``inspection.py``. ``aio.py``'s
:class:`AsyncMemory` takes these very methods, awaited (``runtime/twin.py``), so each
body returns its runner call and does nothing after it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from ..models import Experience, Namespace, SearchHit, WriteResult
from ..runtime.flow import Flow, MakeFlow, R, first
from ..runtime.routing import ReplicaReads
from ..runtime.runner import SyncRunner
from ..storage.engine import create_side_engine, create_sync_engine
from ..storage.vectors import adopt_engine
from .inspection import InspectMethods
from .results import Feedback, RecallResult
from .store_methods import StoreMethods
from .write_flows import RecordInput

log = logging.getLogger("hindsight")


class Memory(StoreMethods, InspectMethods):
    """Hindsight memory, synchronous.

    Every method is confined to one namespace: ``namespace=`` when given, else the
    default passed to the constructor. See :class:`~hindsight_core.AsyncMemory` for
    the same API with ``await``.

    Example:
        >>> mem = Memory(("acme", "cleanup-agent"))
        >>> mem.write({"scene": "file-cleanup", "trigger": "deleting old files",
        ...            "lesson": "Check the extension before deleting"})
        >>> mem.search("remove stale downloads")[0].record.lesson
    """

    def __init__(self, *args: Any, engine: sa.Engine | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._engine = engine
        self._owns_engine = engine is None
        if engine is not None:
            adopt_engine(engine)
        self._engine_lock = threading.Lock()
        self._side: sa.Engine | None = None  # flow.Pipelined reads (write_many's lookups)
        self._reads: ReplicaReads | None = None  # read replicas, when configured
        self._runner = SyncRunner(
            self,
            lambda: self.embedder,
            ready=lambda: self._ready,
            check=self._read_check_flow,
            side=self._side_engine if self._owns_engine else None,
        )

    @property
    def engine(self) -> sa.Engine:
        """The SQLAlchemy engine (connection pool); created on first use.

        Created under a lock: threads sharing a new Memory each built a pool, and all
        but one leaked their connections.
        """
        if self._engine is None:
            with self._engine_lock:
                if self._engine is None:
                    self._engine = create_sync_engine(self.settings, self._database_url)
        return self._engine

    def run_flow(self, flow: Flow[R] | MakeFlow[R]) -> R:
        """Run ``flow`` (or ``flow()``, which may run again on a broken warm connection)
        on the primary: in one transaction, or on a warm connection when its first
        statement says ``autocommit`` (internal API, see ``runtime/host.py`` and
        ``runtime/runner.py``; the operations below are such flows)."""
        return self._runner.run(flow)

    def _side_engine(self) -> sa.Engine:
        """The one-connection pool for ``flow.Pipelined`` reads, built on first need."""
        engine = self.engine
        with self._engine_lock:
            if self._side is None:
                self._side = create_side_engine(self.settings, engine)
            return self._side

    def replica_reads(self) -> ReplicaReads | None:
        """The read replicas (``settings.read_database_urls``), or None."""
        if self._reads is None and self._replica_urls():
            with self._engine_lock:
                if self._reads is None:
                    self._reads = ReplicaReads(self.settings, self._replica_urls())
        return self._reads

    def note_write(self, key: str | None) -> None:
        """With replicas, note the WAL position after a write to ``key`` (a namespace
        key or a session key), so that its next reads wait for a replica to replay it."""
        self._runner.note_write(key)

    def close(self) -> None:
        """Close the connection pool (if this object created it) and the replicas'."""
        self._runner.close()
        if self._reads is not None:
            self._reads.close()
            self._reads = None
        if self._side is not None:
            self._side.dispose()
            self._side = None
        if self._engine is not None and self._owns_engine:
            self._engine.dispose()
        self._engine = None if self._owns_engine else self._engine

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ set-up

    def setup(self) -> None:
        """Apply migrations and check the embedding model (also done on first use)."""
        return self._runner.run(self.ready_flow())

    # ------------------------------------------------------------------ write & recall

    def write(
        self, record: RecordInput, *, namespace: Namespace | str | None = None
    ) -> WriteResult:
        """Validate and store one record, or merge it into a near-duplicate.

        Returns:
            Whether it was ``inserted`` or ``merged``, and the id.

        Raises:
            ValidationError: the record is malformed; nothing was written.
        """
        return self._runner.run_write(
            first(self.write_flow([record], namespace)), self.namespace_key(namespace)
        )

    def write_many(
        self, records: Sequence[RecordInput], *, namespace: Namespace | str | None = None
    ) -> list[WriteResult]:
        """Write many records in one transaction (all or nothing), deduplicated."""
        return self._runner.run_write(
            self.write_flow(records, namespace), self.namespace_key(namespace)
        )

    def search(
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
        """Hybrid recall: semantic + keyword, bent by the decayed score.

        Args:
            query: what the agent is about to do, in its own words.
            namespace: the namespace searched (default: this memory's).
            namespaces: instead, a list of namespaces searched as one collection
                (the agent's own and those it may read: tuples of labels or strings
                like ``"acme/shared"``; one ending in ``*``, e.g. ``"acme/*"``, is that
                namespace and all under it); each hit's ``namespace`` says where it
                lives (docs/sharing.md).
            scene: hard filter on the scene tag.
            top_k: how many hits (1..100).
            filters: equality filters on ``critical``, ``outcome``, ``source.agent``,
                ``source.task``, ``source.tool``.
            include_superseded: also old versions of lessons (docs/versions.md).

        Raises:
            ValidationError: a bad argument, or both ``namespace`` and ``namespaces``.
        """
        return self._runner.run_read(
            *self._search_read(
                query, namespace, namespaces, scene, top_k, filters, include_superseded
            )
        )

    def recall(
        self,
        query: str,
        *,
        namespace: Namespace | str | None = None,
        namespaces: Sequence[Namespace | str] | None = None,
        scene: str | None = None,
        top_k: int = 5,
    ) -> RecallResult:
        """Like :meth:`search`, but never fails the agent: on a database or embedding
        error, or past ``settings.recall_timeout``, it returns no hits and a warning."""
        return self._runner.call(self._recall_call(query, namespace, scene, top_k, namespaces))

    def get(self, record_id: object, *, namespace: Namespace | str | None = None) -> Experience:
        """One record by id (archived ones too)."""
        return self._runner.run_read(
            lambda: self._get_flow(record_id, namespace), self.namespace_key(namespace)
        )

    def list_records(
        self, /, *, namespace: Namespace | str | None = None, **options: Any
    ) -> list[Experience]:
        """Records of a namespace; options: ``scene``, ``archived`` (False, True or None
        for both), ``order_by``, ``descending``, ``limit``, ``offset``, ``all_namespaces``."""
        return self._runner.run_read(*self._list_read(namespace, options))

    # ------------------------------------------------------------------ feedback & curation

    def mark_used(
        self,
        record_id: object,
        helpful: bool = True,
        *,
        namespace: Namespace | str | None = None,
        by: str | None = None,
    ) -> Experience:
        """Feedback on a recalled record: helpful raises its score (+0.1) and resets its
        decay clock; unhelpful lowers it. ``namespace``: the one the record lives in
        (a hit's ``namespace``); ``by``: who gives it, recorded with it (default: that
        namespace; see :meth:`feedback`, docs/sharing.md)."""
        return self._runner.run_write(
            self.mark_used_flow(record_id, helpful, namespace, by), self.namespace_key(namespace)
        )

    def feedback(
        self, record_id: object, *, namespace: Namespace | str | None = None, limit: int = 100
    ) -> list[Feedback]:
        """The usage feedback given on a record (:meth:`mark_used`), newest first: when,
        helpful or not, and by whom.

        Raises:
            NotFoundError: no such record in the namespace.
        """
        return self._runner.run_read(
            lambda: self._feedback_flow(record_id, namespace, limit), self.namespace_key(namespace)
        )

    def locate(
        self, record_id: object, *, namespaces: Sequence[Namespace | str]
    ) -> Namespace | None:
        """Which of ``namespaces`` (as :meth:`search` takes them, prefixes too) holds the
        record ``record_id``, or None when none of them does (docs/sharing.md)."""
        return self._runner.run_read(lambda: self._locate_flow(record_id, namespaces), None)

    def forget(self, record_id: object, *, namespace: Namespace | str | None = None) -> None:
        """Delete a record for good."""
        return self._runner.run_write(
            self._forget_flow(record_id, namespace), self.namespace_key(namespace)
        )

    def archive(self, record_id: object, *, namespace: Namespace | str | None = None) -> Experience:
        """Stop recalling a record (restorable)."""
        return self._runner.run_write(
            self._curate_flow(record_id, "archive", namespace), self.namespace_key(namespace)
        )

    def restore(self, record_id: object, *, namespace: Namespace | str | None = None) -> Experience:
        """Bring an archived record back (its score is lifted to the eviction line)."""
        return self._runner.run_write(
            self._curate_flow(
                record_id, "restore", namespace, restore_score=self.settings.evict_below + 0.1
            ),
            self.namespace_key(namespace),
        )

    def set_critical(
        self, record_id: object, critical: bool = True, *, namespace: Namespace | str | None = None
    ) -> Experience:
        """Mark a record critical (never decays, never evicted) or not."""
        return self._runner.run_write(
            self._curate_flow(record_id, "critical", namespace, critical=bool(critical)),
            self.namespace_key(namespace),
        )

    def edit(
        self, /, record_id: object, *, namespace: Namespace | str | None = None, **changes: Any
    ) -> Experience:
        """Change a record's fields (lesson, trigger, ...); it is re-embedded. A new
        lesson or trigger (beyond a typo) is a new version (:meth:`supersede`), returned."""
        return self._runner.run_write(
            self._edit_flow(record_id, changes, namespace), self.namespace_key(namespace)
        )

    def merge(
        self,
        record_ids: Iterable[object],
        into: RecordInput,
        *,
        namespace: Namespace | str | None = None,
    ) -> Experience:
        """Replace records by one more general lesson; the sources are archived and linked."""
        return self._runner.run_write(
            self.merge_flow(record_ids, into, namespace), self.namespace_key(namespace)
        )

    def supersede(
        self,
        old_id: object,
        new_record: RecordInput,
        *,
        reason: str | None = None,
        actor: str | None = None,
        namespace: Namespace | str | None = None,
    ) -> WriteResult:
        """Write ``new_record`` as the new version of a lesson (docs/versions.md).

        The old one (``old_id``, or the head of its chain when another writer has
        superseded it meanwhile) is marked superseded at now, ``reason``, by ``actor``
        (default: the namespace); it keeps its usage history and is no longer recalled.

        Returns:
            The new version's write (``inserted``; ``supersedes``: the old version).
        """
        return self._runner.run_write(
            self.supersede_flow(
                old_id, new_record, reason=reason, actor=actor, namespace=namespace
            ),
            self.namespace_key(namespace),
        )

    def history(
        self, record_id: object, *, namespace: Namespace | str | None = None
    ) -> list[Experience]:
        """Every version of a lesson, oldest first, from any of its ids."""
        return self._runner.run_read(
            lambda: self._history_flow(record_id, namespace), self.namespace_key(namespace)
        )
