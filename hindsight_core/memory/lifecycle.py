"""Flows for the whole store: maintenance, stats, export/import, reindex."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from ..items.flows import sweep_flow
from ..models import (
    Experience,
    MaintenanceReport,
    Namespace,
    ReindexReport,
    Stats,
    ns_key,
    validate_namespace,
)
from ..runtime.flow import Embed, Flow, Sql, Unit
from ..runtime.runner import Call, Run
from ..storage import batch_sql, namespace_sql, tasks_sql, versions_sql
from ..storage import experiences_sql as q
from .export_file import ExportedRecord, check_import_lines, write_export
from .export_file import read_import_lines as read_import_lines  # the CLI's import
from .inputs import embedding_text
from .write_flows import RecordFlows
from .write_rows import record_row

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` during long operations."""

REINDEX_BATCH = 256
# Namespaces evicted per transaction by maintain() over all of them (experiences_sql.EVICT).
EVICT_NAMESPACES = 64


class LifecycleFlows(RecordFlows):
    """Whole-store operations (flows; see ``runtime/flow.py``), built on the record
    flows: export pages through ``_list_flow``, import writes with ``write_flow``."""

    def _maintain_write(
        self, namespace: Namespace | str | None
    ) -> tuple[Flow[MaintenanceReport], str | None]:
        """``maintain``'s write for either front end's ``runner.run_write``: its flow
        and the key it notes (``namespace=None``: every namespace, every key's)."""
        key = None if namespace is None else self.namespace_key(namespace)
        return self._maintain_flow(namespace, namespace is None), key

    def _maintain_flow(
        self, namespace: Namespace | str | None, all_namespaces: bool
    ) -> Flow[MaintenanceReport]:
        ns = None if all_namespaces else self.namespace_key(namespace)
        yield from self.ready_flow()
        now = self.now()
        # The items' sweep as Items.sweep runs it: in chunks committed one by one, each
        # under its keys' locks (items_sql.SWEEP; a chunk's locks fill the lock table),
        # first, so that no connection of this flow is held while it runs.
        items = yield from Unit(sweep_flow(now))
        params = {"evict_below": self.settings.evict_below, **self.decay_params(now)}
        if ns is not None:
            archived = yield from self._evict_flow([ns], params, now)
        else:
            # In transactions of EVICT_NAMESPACES namespaces each (committed one by one):
            # each holds their namespace locks, a slot of the server's lock table each.
            # The listing in autocommit: a transaction kept open across the chunks held
            # its read's table lock, a reindex dropping the index queued behind it, the
            # next chunk behind the reindex, and this flow waited for the chunk, a cycle
            # the server cannot see (tests/test_lock_order_admin.py).
            listing = Sql(q.EVICTABLE_NAMESPACES, params, autocommit=True)
            spaces = [r["ns"] for r in (yield from listing)]
            archived = 0
            for i in range(0, len(spaces), EVICT_NAMESPACES):
                chunk = spaces[i : i + EVICT_NAMESPACES]
                archived += yield from Unit(self._evict_flow(chunk, params, now))
        tasks = yield from Sql(tasks_sql.SWEEP_TASKS, {"now": now}, autocommit=ns is None)
        return MaintenanceReport(archived=archived, expired_items=items, expired_tasks=len(tasks))

    def _evict_flow(self, spaces: list[str], params: dict[str, Any], now: datetime) -> Flow[int]:
        """Archive the decayed records of the namespaces ``spaces`` (their locks first,
        as writes take them: ``experiences_sql.EVICT``); how many."""
        evicted = yield from Sql(q.EVICT, {"spaces": spaces, "now": now, **params})
        if evicted:
            yield Sql(
                batch_sql.EVENT_ROWS,
                batch_sql.event_rows(
                    [
                        {
                            "ns": r["ns"],
                            "record_id": r["id"],
                            "kind": "archive",
                            "now": now,
                            "detail": json.dumps({"reason": "decayed"}),
                        }
                        for r in evicted
                    ]
                ),
                fetch="none",
            )
        return len(evicted)

    def _stats_flow(self, namespace: Namespace | str | None) -> Flow[Stats]:
        ns = None if namespace is None else self.namespace_key(namespace)
        yield from self.ready_flow(check_model=False)
        (row,) = yield from Sql(q.stats_sql(), {"ns": ns})
        meta = yield from Sql(q.GET_META, {"key": "embedding"})
        model = meta[0]["value"] if meta else {}
        return Stats(**row, embedding_model=model.get("model"), embedding_dim=model.get("dim"))

    def _stats_call(self, namespace: Namespace | str | None) -> Call[Stats]:
        """``stats``, with how this memory's reads were routed (when replicas are set)."""
        stats = yield from Run(self._stats_flow(namespace))
        if self._reads is None:
            return stats
        return stats.model_copy(update={"reads": self._reads.router.counts()})

    def _drop_namespace_flow(self, namespace: Namespace | str) -> Flow[dict[str, int]]:
        ns = ns_key(validate_namespace(namespace))
        yield from self.ready_flow(check_model=False)
        yield Sql(q.LOCK_NAMESPACE, {"ns": ns})  # no write lands halfway through
        yield Sql(namespace_sql.LOCK_ITEMS, {"ns": ns})  # nor an item batch
        (row,) = yield from Sql(namespace_sql.DROP_NAMESPACE, {"ns": ns})
        return {k: int(v) for k, v in row.items()}

    def _export_flow(
        self, namespace: Namespace | str | None, all_namespaces: bool, page: int = 1000
    ) -> Flow[list[Experience]]:
        out: list[Experience] = []
        offset = 0
        while True:
            batch = yield from self._list_flow(
                namespace,
                archived=None,
                order_by="created_at",
                descending=False,
                limit=page,
                offset=offset,
                all_namespaces=all_namespaces,
            )
            out.extend(batch)
            if len(batch) < page:
                return out
            offset += page

    def _export_call(
        self, target: str | Path | IO[str], namespace: Namespace | str | None, all_namespaces: bool
    ) -> Call[int]:
        """``export``: the records (archived too) written to ``target``; how many."""
        return write_export(target, (yield from Run(self._export_flow(namespace, all_namespaces))))

    def _import_flow(
        self,
        lines: Iterable[str],
        *,
        skip_invalid: bool = False,
        progress: Progress | None = None,
    ) -> Flow[dict[str, Any]]:
        """Validate every line first (``export_file.check_import_lines``); write
        nothing if one is bad (unless skipping).

        A line with an ``id`` is an exported record, restored as it was (kept if that
        id is already stored). A line without one is a new record, written through
        the normal write path (dedup included) in its ``namespace`` or the default.
        """
        checked = check_import_lines(
            lines,
            default=self.namespace,
            lesson_max_chars=self.settings.lesson_max_chars,
            field_max_chars=self.settings.field_max_chars,
            skip_invalid=skip_invalid,
        )
        restored, plain, total = checked.restored, checked.plain, checked.total
        yield from self.ready_flow()
        now = self.now()
        done = existing = inserted = merged = 0
        # A namespace at a time, in namespace order, each locked before its first row:
        # as a write locks its namespace before the keyword counter its insert takes, and
        # as eviction takes several namespaces' locks. An import took the counters of
        # the namespaces of each 256-record batch in turn, so two imports could take two
        # counters in opposite orders, and one that restored records into a namespace and
        # then wrote plain ones there held its counter when it asked for its lock, which
        # a write held, waiting for the counter (deadlocks: tests/test_lock_order_import.py).
        for ns in sorted(restored.keys() | plain.keys(), key=ns_key):
            yield Sql(q.LOCK_NAMESPACE, {"ns": ns_key(ns)})
            batches = restored.get(ns, [])
            for start in range(0, len(batches), REINDEX_BATCH):
                batch = batches[start : start + REINDEX_BATCH]
                existing += yield from self._restore_flow(batch, now)
                done += len(batch)
                if progress:
                    progress(done, total)
            new_records = plain.get(ns, [])
            for start in range(0, len(new_records), REINDEX_BATCH):
                batch_in = new_records[start : start + REINDEX_BATCH]
                results = yield from self.write_flow(batch_in, ns)
                merged += sum(r.status == "merged" for r in results)
                inserted += sum(r.status == "inserted" for r in results)
                done += len(batch_in)
                if progress:
                    progress(done, total)
        return {
            "read": total + len(checked.skipped),
            "imported": checked.restoring - existing + inserted,
            "merged": merged,
            "already_present": existing,
            "skipped_lines": checked.skipped,
        }

    def _restore_flow(self, batch: list[ExportedRecord], now: datetime) -> Flow[int]:
        """Insert exported records as they were (one namespace's, under its lock); a
        record already stored (same namespace and id) is kept as it is: how many were."""
        present = yield from Sql(q.EXISTING_IDS, {"ids": [r.id for r in batch]})
        stored = {(row["ns"], row["id"]) for row in present}
        new = [r for r in batch if (ns_key(tuple(r.namespace)), r.id) not in stored]
        if new:
            texts = [embedding_text(r, self.document_fields) for r in new]
            vectors = yield from Embed(texts)
            params = [
                _import_params(r, self._vector_fields(t, v), now, self.document_fields)
                for r, t, v in zip(new, texts, vectors, strict=True)
            ]
            yield Sql(batch_sql.INSERT_ROWS, batch_sql.insert_rows(params), fetch="none")
            links = [_links(r) for r in new if r.lineage is not None or r.version > 1]
            if links:
                yield Sql(versions_sql.RESTORE_LINKS, {"rows": json.dumps(links)}, fetch="none")
        return len(batch) - len(new)

    def _reindex_flow(
        self, progress: Progress | None = None, force: bool = False
    ) -> Flow[ReindexReport]:
        """Re-embed, with the configured model, the records whose vector was computed
        from another model or text (every record with ``force``); record the model and
        make sure the index is there."""
        yield from self.ready_flow(check_model=False)
        yield Sql(q.LOCK_META)
        meta = yield from Sql(q.GET_META, {"key": "embedding"})
        want: dict[str, Any] = {"model": self.embedder.model_name, "dim": self.embedder.dim}
        have = meta[0]["value"] if meta else None
        if have is not None and (have != want or force):
            # Most vectors change: updating the HNSW index row by row costs more than
            # building it again afterwards. (Its ACCESS EXCLUSIVE lock first, not after
            # LOCK_WRITERS_OUT: a write holding a read's lock and waiting for ours would
            # then deadlock with the upgrade.)
            yield Sql(q.drop_index_sql(int(have["dim"])), fetch="none")
        yield Sql(q.LOCK_WRITERS_OUT, fetch="none")  # writers wait: none holds a row of ours
        (count,) = yield from Sql(q.COUNT_ALL)
        total = int(count["count"])
        done = embedded = 0
        cursor: dict[str, Any] = {"ns": "", "id": uuid.UUID(int=0)}
        while True:
            rows = yield from Sql(q.REINDEX_BATCH, {**cursor, "limit": REINDEX_BATCH})
            if not rows:
                break
            fields = self.document_fields
            texts = {i: embedding_text(r, fields) for i, r in enumerate(rows)}
            stale = [
                i for i, t in texts.items() if force or rows[i]["embed_key"] != self._embed_key(t)
            ]
            if stale:
                vectors = yield from Embed([texts[i] for i in stale])
                yield Sql(
                    q.REINDEX_UPDATE,
                    [
                        {
                            "ns": rows[i]["ns"],
                            "id": rows[i]["id"],
                            **self._vector_fields(texts[i], v),
                        }
                        for i, v in zip(stale, vectors, strict=True)
                    ],
                    fetch="none",
                )
            done += len(rows)
            embedded += len(stale)
            cursor = {"ns": rows[-1]["ns"], "id": rows[-1]["id"]}
            if progress:
                progress(done, total)
        yield Sql(q.SET_META, {"key": "embedding", "value": json.dumps(want)}, fetch="none")
        yield from self._build_index_flow(want["dim"])
        return ReindexReport(reembedded=embedded, skipped=done - embedded)


def _import_params(
    r: ExportedRecord, vector: dict[str, Any], now: datetime, fields: Sequence[str]
) -> dict[str, Any]:
    return record_row(
        r,
        ns=ns_key(tuple(r.namespace)),
        id=r.id,
        vector=vector,
        fields=fields,
        score=r.score,
        use_count=r.use_count,
        occurrences=r.occurrences,
        last_used_at=r.last_used_at,
        created_at=r.created_at or now,
        updated_at=r.updated_at or now,
        archived_at=r.archived_at,
        merged_into=r.merged_into,
        merged_from=r.merged_from,
        also_scenes=[s for s in dict.fromkeys(r.scenes) if s != r.scene],
    )


def _links(r: ExportedRecord) -> dict[str, Any]:
    """An imported record's row of ``versions_sql.RESTORE_LINKS``."""
    fields = ("version", "lineage", "supersedes", "superseded_by", "superseded_at")
    row = r.model_dump(mode="json", include={*fields, "superseded_reason", "superseded_actor"})
    return {"ns": ns_key(tuple(r.namespace)), "id": str(r.id), **row}
