"""The whole-store methods of both front ends: maintain, stats, drop, export/import,
reindex.

The flows are ``lifecycle.py``'s; :class:`StoreMethods` binds each through the runner
in one line, and :class:`AsyncStoreMethods` takes the same methods, awaited
(``runtime/twin.py``); they are mixed into :class:`~hindsight_core.Memory` and
:class:`~hindsight_core.AsyncMemory` (as ``inspection.py``'s methods are).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from ..models import MaintenanceReport, Namespace, ReindexReport, Stats
from ..runtime.runner import AsyncRunner, SyncRunner
from ..runtime.twin import awaited
from .export_file import read_import_lines
from .lifecycle import LifecycleFlows, Progress


class StoreMethods(LifecycleFlows):
    """Synchronous whole-store methods (mixed into :class:`~hindsight_core.Memory`)."""

    _runner: SyncRunner  # Memory's

    def maintain(self, *, namespace: Namespace | str | None = None) -> MaintenanceReport:
        """Archive records decayed below ``evict_below`` (never critical ones), sweep
        expired items and abandoned task logs. ``namespace=None``: every namespace."""
        return self._runner.run_write(*self._maintain_write(namespace))

    def stats(self, *, namespace: Namespace | str | None = None) -> Stats:
        """Counts of records, archived records, namespaces, items, scenes and LLM usage."""
        return self._runner.call(self._stats_call(namespace))

    def drop_namespace(self, namespace: Namespace | str) -> dict[str, int]:
        """Delete everything stored in ``namespace`` (exactly it, not those under it):
        records, their history, items and task logs. For throw-away namespaces (demos,
        examples, tests); there is no undo.

        Returns:
            How many ``records``, ``events``, ``items`` and ``tasks`` were deleted.
        """
        return self._runner.run(self._drop_namespace_flow(namespace))

    def export(
        self,
        target: str | Path | IO[str],
        *,
        namespace: Namespace | str | None = None,
        all_namespaces: bool = False,
    ) -> int:
        """Write records (archived too) as JSON lines; returns how many."""
        return self._runner.call(self._export_call(target, namespace, all_namespaces))

    def import_records(
        self,
        source: str | Path | Iterable[str],
        *,
        skip_invalid: bool = False,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Import JSON lines: written by :meth:`export`, or one new record per line.

        A line with an ``id`` is restored as exported (kept if already stored); a
        line without one (``{"lesson": ..., "trigger": ...}``, optionally with a
        ``namespace``) is written like :meth:`write_many`, near-duplicates merged.
        A malformed line raises :class:`ImportFormatError` with its line number and
        nothing is imported, unless ``skip_invalid``.

        Returns:
            Counts: ``read``, ``imported``, ``merged``, ``already_present`` and
            ``skipped_lines`` (their numbers).
        """
        return self._runner.run_write(
            self._import_flow(
                read_import_lines(source), skip_invalid=skip_invalid, progress=progress
            ),
            None,
        )

    def reindex(self, *, force: bool = False, progress: Progress | None = None) -> ReindexReport:
        """Re-embed with the configured model the records whose vector came from another
        model or from other text (``force``: every record), record the model and build
        the index. Returns how many were re-embedded and skipped. One transaction:
        writes wait until it commits; searches go on (not while it drops the index, with
        another model or ``force``)."""
        return self._runner.run_write(self._reindex_flow(progress, force), None)


class AsyncStoreMethods(LifecycleFlows):
    """:class:`StoreMethods`, awaited (``runtime/twin.py``; mixed into ``AsyncMemory``)."""

    _runner: AsyncRunner  # AsyncMemory's

    maintain = awaited(StoreMethods.maintain)
    stats = awaited(StoreMethods.stats)
    drop_namespace = awaited(StoreMethods.drop_namespace)
    export = awaited(StoreMethods.export)
    import_records = awaited(StoreMethods.import_records)
    reindex = awaited(StoreMethods.reindex)
