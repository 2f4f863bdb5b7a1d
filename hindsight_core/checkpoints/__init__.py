"""Checkpoint storage for graph runtimes (LangGraph's checkpointer sits on it).

The core deals in bytes and JSON only: a checkpoint is a JSON object, its channel
values that are not stored inline are ``(channel, version, type, bytes)`` blobs,
and pending writes are ``(idx, channel, type, bytes)``. Serialization of framework
objects is the adapter's job (``hindsight_adapters.langgraph.checkpoint``).

Each operation is a flow (``flows.py``; see ``runtime/flow.py``); :class:`Checkpoints`
(sync) binds each to a one-line method through its runner (``runtime/runner.py``) and
:class:`AsyncCheckpoints` (asyncio) takes the same methods, awaited (``runtime/twin.py``),
on the pool of a :class:`~hindsight_core.Memory` / :class:`~hindsight_core.AsyncMemory`:
reads on a read replica when configured, writes noting the WAL position for the
checkpoints' read-your-writes session. The flows of one statement say ``autocommit``
and run on warm connections (one round trip each; ``runtime/connections.py``); the
others in a transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..embeddings.base import NoEmbedder
from ..runtime.flow import Flow, Migrate
from ..runtime.runner import AsyncRunner, SyncRunner
from ..runtime.twin import awaited
from .flows import (
    PRUNE_STRATEGIES,
    BlobIn,
    CheckpointRow,
    WriteIn,
    copy_thread_flow,
    delete_for_runs_flow,
    delete_threads_flow,
    get_flow,
    list_flow,
    prune_flow,
    put_flow,
    put_writes_flow,
    thread_stats_flow,
)

__all__ = [
    "PRUNE_STRATEGIES",
    "AsyncCheckpoints",
    "BlobIn",
    "CheckpointRow",
    "Checkpoints",
    "WriteIn",
]

if TYPE_CHECKING:
    from ..runtime.host import AsyncFlowHost, FlowHost

_NO_EMBEDDER = NoEmbedder("checkpoints are not embedded")  # checkpoint flows never embed
CHECKPOINTS_KEY = "\x00checkpoints"  # read-your-writes session of a memory's checkpoints
_KEY = CHECKPOINTS_KEY


class _Base:
    """Set-up state: migrated once, before the first flow (the runner's ``setup``)."""

    _migrated: bool = False

    def _ready(self) -> Flow[None]:
        if not self._migrated:
            yield Migrate()
            self._migrated = True


class Checkpoints(_Base):
    """Checkpoint storage on the connection pool of a :class:`Memory` (blocking I/O).

    Args:
        memory: whose engine (pool) and settings to use; it is not closed here.
    """

    def __init__(self, memory: FlowHost) -> None:
        self.memory = memory
        self._runner = SyncRunner(
            memory, lambda: _NO_EMBEDDER, ready=lambda: self._migrated, setup=self._ready
        )

    def close(self) -> None:
        """Return the warm connections to the pool."""
        self._runner.close()

    def setup(self) -> None:
        """Apply migrations (idempotent; also done on first use)."""
        self._migrated = False
        return self._runner.prepare()

    def put(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        parent_checkpoint_id: str | None,
        checkpoint: Mapping[str, Any] | str,
        metadata: Mapping[str, Any] | str,
        blobs: Sequence[BlobIn] = (),
    ) -> None:
        """Store a checkpoint and its blobs (:func:`~.flows.put_flow`)."""
        return self._runner.run_write(
            lambda: put_flow(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                parent_checkpoint_id,
                checkpoint,
                metadata,
                blobs,
            ),
            _KEY,
        )

    def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        writes: Sequence[WriteIn],
        *,
        task_path: str = "",
        upsert: bool = False,
    ) -> None:
        """Store pending writes of a task (:func:`~.flows.put_writes_flow`)."""
        return self._runner.run_write(
            lambda: put_writes_flow(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                task_id,
                writes,
                task_path=task_path,
                upsert=upsert,
            ),
            _KEY,
        )

    def get(
        self, thread_id: str, checkpoint_ns: str = "", checkpoint_id: str | None = None
    ) -> CheckpointRow | None:
        """One checkpoint by id, or the latest of the thread and namespace; None if absent."""
        return self._runner.run_read(
            lambda: get_flow(thread_id, checkpoint_ns, checkpoint_id), _KEY
        )

    def list(
        self,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        *,
        checkpoint_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        before: str | None = None,
        limit: int | None = None,
    ) -> list[CheckpointRow]:
        """Checkpoints matching every given filter, newest first (:func:`~.flows.list_flow`)."""
        return self._runner.run_read(
            lambda: list_flow(
                thread_id,
                checkpoint_ns,
                checkpoint_id=checkpoint_id,
                metadata=metadata,
                before=before,
                limit=limit,
            ),
            _KEY,
        )

    def delete_threads(self, thread_ids: Sequence[str]) -> None:
        """Everything of the given threads, in every namespace."""
        return self._runner.run_write(lambda: delete_threads_flow(thread_ids), _KEY)

    def delete_for_runs(self, run_ids: Sequence[str]) -> int:
        """Checkpoints whose ``metadata.run_id`` is given, their writes and orphaned blobs."""
        return self._runner.run_write(lambda: delete_for_runs_flow(run_ids), _KEY)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, blob and write of a thread under another id."""
        return self._runner.run_write(
            lambda: copy_thread_flow(source_thread_id, target_thread_id), _KEY
        )

    def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
        """``keep_latest``: only the newest checkpoint per namespace; ``delete``: all."""
        return self._runner.run_write(lambda: prune_flow(thread_ids, strategy), _KEY)

    def thread_stats(self, thread_id: str) -> dict[str, int]:
        """Row counts and the largest checkpoint row / blob of a thread."""
        return self._runner.run_read(lambda: thread_stats_flow(thread_id), _KEY)


class AsyncCheckpoints(_Base):
    """:class:`Checkpoints` for asyncio code, on an :class:`AsyncMemory`'s pool."""

    def __init__(self, memory: AsyncFlowHost) -> None:
        self.memory = memory
        self._runner = AsyncRunner(
            memory, lambda: _NO_EMBEDDER, ready=lambda: self._migrated, setup=self._ready
        )

    async def aclose(self) -> None:
        """Return the warm connections to the pool."""
        await self._runner.aclose()

    # Checkpoints' methods, awaited (``runtime/twin.py``).
    setup = awaited(Checkpoints.setup)
    put = awaited(Checkpoints.put)
    put_writes = awaited(Checkpoints.put_writes)
    get = awaited(Checkpoints.get)
    list = awaited(Checkpoints.list)
    delete_threads = awaited(Checkpoints.delete_threads)
    delete_for_runs = awaited(Checkpoints.delete_for_runs)
    copy_thread = awaited(Checkpoints.copy_thread)
    prune = awaited(Checkpoints.prune)
    thread_stats = awaited(Checkpoints.thread_stats)
