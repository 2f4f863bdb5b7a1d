"""The typed internal API: what a flow's host provides to the core's other modules.

A *host* is the object whose database, embedder, settings and clock a flow runs
with: :class:`~hindsight_core.Memory` and :class:`~hindsight_core.AsyncMemory`
implement these protocols. Reflection, the worker, items and checkpoints depend on
the protocols, not on the front ends' private members, so each side can change
its internals without breaking the other (mypy checks that both front ends still
fit):

- :class:`FlowContext`: what a flow reads while it is built and run (settings,
  embedder, namespace key, clock, the set-up flow, decay parameters); the same
  for sync and async hosts, so one flow serves both;
- :class:`RecordContext`: a :class:`FlowContext` whose record flows (write,
  merge, feedback) and dedup rule other flows reuse (reflection);
- :class:`FlowHost` / :class:`AsyncFlowHost`: a context that also runs flows,
  blocking or awaited, and routes reads to replicas.

These are internal: applications call the front ends' operations (``write``,
``search``, ...), which are flows run by the front end's runner (``runner.py``),
the same code that carries out ``run_flow`` and ``note_write`` here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncEngine

    from ..embeddings import Embedder
    from ..models import Experience, ExperienceIn, Namespace, WriteResult
    from ..settings import Settings
    from .flow import Flow
    from .routing import AsyncReplicaReads, ReplicaReads

R = TypeVar("R")


class FlowContext(Protocol):
    """What a flow reads from its host, sync or async alike."""

    @property
    def settings(self) -> Settings:
        """The configuration (``HINDSIGHT_*``) the host was built with."""
        ...

    @property
    def embedder(self) -> Embedder:
        """The embedder of experience records and queries."""
        ...

    def namespace_key(self, namespace: Namespace | str | None) -> str:
        """The stored key (``ns`` column) of ``namespace``, validated; ``None``: the
        host's default namespace.

        Raises:
            ValidationError: the namespace is malformed.
        """
        ...

    def now(self) -> datetime:
        """The host clock's "now", an aware datetime in UTC (tests control it).

        Raises:
            ValidationError: the clock returned a naive datetime.
        """
        ...

    def decay_params(self, now: datetime) -> dict[str, Any]:
        """The statement parameters of the decayed score at ``now`` (half-life,
        floors), for statements that rank or read records."""
        ...

    def ready_flow(self, *, check_model: bool = True) -> Flow[None]:
        """Set-up, once per host: migrate, record or check the embedding model, build
        the vector index, as a unit committed before the rest of the flow.

        Args:
            check_model: with ``False`` a model mismatch is let through (statistics,
                ``reindex``) and the host does not count as ready.

        Raises:
            EmbeddingModelMismatchError: the database holds another model's vectors.
        """
        ...


class RecordContext(FlowContext, Protocol):
    """A :class:`FlowContext` whose record flows other flows reuse (reflection writes,
    reinforces and merges records with them, in its own requests)."""

    @property
    def dedup_threshold(self) -> float:
        """The cosine from which a new record merges into a stored one."""
        ...

    @property
    def dedup_as_query(self) -> bool:
        """Whether dedup embeds the lessons it compares as queries (``Embed.query``)."""
        ...

    def same_meaning(self, a: str, b: str, similarity: float) -> bool:
        """Whether two lessons at ``similarity`` may be merged (threshold and veto)."""
        ...

    def write_flow(
        self, records: Sequence[ExperienceIn | Mapping[str, Any]], namespace: Namespace | str | None
    ) -> Flow[list[WriteResult]]:
        """Validate and write records, merging near-duplicates (``Memory.write_many``).

        Raises:
            ValidationError: a record is malformed (raised before any I/O).
        """
        ...

    def merge_flow(
        self,
        record_ids: Iterable[object],
        into: ExperienceIn | Mapping[str, Any],
        namespace: Namespace | str | None,
    ) -> Flow[Experience]:
        """Replace records by one more general lesson (``Memory.merge``)."""
        ...

    def mark_used_flow(
        self,
        record_id: object,
        helpful: bool,
        namespace: Namespace | str | None,
        by: str | None = None,
    ) -> Flow[Experience]:
        """Feedback on a recalled record (``Memory.mark_used``), given ``by`` someone
        (default: the namespace).

        Raises:
            NotFoundError: no such record in the namespace.
        """
        ...

    def supersede_flow(
        self,
        old_id: object,
        record: ExperienceIn | Mapping[str, Any],
        *,
        reason: str | None,
        actor: str | None,
        namespace: Namespace | str | None,
        locked: bool = False,
    ) -> Flow[WriteResult]:
        """Write a new version of a lesson (``Memory.supersede``, docs/versions.md)."""
        ...


class FlowHost(FlowContext, Protocol):
    """A host that runs flows with blocking I/O (:class:`~hindsight_core.Memory`)."""

    @property
    def engine(self) -> sa.Engine:
        """The connection pool (created on first use)."""
        ...

    def run_flow(self, flow: Flow[R]) -> R:
        """Run ``flow`` in one transaction on the primary; returns its result."""
        ...

    def replica_reads(self) -> ReplicaReads | None:
        """The read replicas (``settings.read_database_urls``), or ``None``."""
        ...

    def note_write(self, key: str | None) -> None:
        """After a write to ``key`` (a namespace key, or a session key such as items'),
        note the primary's WAL position so that ``key``'s next replica reads wait
        for it (read-your-writes); nothing without replicas."""
        ...


class AsyncFlowHost(FlowContext, Protocol):
    """A host that runs flows with asyncio I/O (:class:`~hindsight_core.AsyncMemory`)."""

    async def get_engine(self) -> AsyncEngine:
        """The connection pool, created on first use (off the event loop)."""
        ...

    async def run_flow(self, flow: Flow[R]) -> R:
        """Run ``flow`` in one transaction on the primary; returns its result."""
        ...

    def replica_reads(self) -> AsyncReplicaReads | None:
        """The read replicas (``settings.read_database_urls``), or ``None``."""
        ...

    async def note_write(self, key: str | None) -> None:
        """:meth:`FlowHost.note_write`, awaited."""
        ...


__all__ = ["AsyncFlowHost", "FlowContext", "FlowHost", "RecordContext"]
