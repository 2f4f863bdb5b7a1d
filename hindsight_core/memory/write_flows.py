"""Writing experience records: validation, the dedup guard, insert-or-merge.

The read and curation flows live in ``read_flows.py`` and ``curation.py``;
:class:`RecordFlows` composes the three for the front ends (``sync.py``, ``aio.py``).
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..embeddings import as_matrix
from ..embeddings.profiles import ENGLISH
from ..models import Namespace, WriteResult, raise_validation
from ..runtime.flow import Embed, Flow, Parallel, Sql
from ..storage import batch_sql, scan_sql
from ..storage import experiences_sql as q
from ..storage import fulltext_sql as fts
from ..storage.vectors import vectors_param
from ..text import merge_veto, search_document, tokens
from .base import MemoryBase
from .curation import CurationFlows
from .inputs import MAX_BATCH, RecordInput, embedding_text, validate_records

# Near-duplicate candidates per record (the lexical veto may reject the nearest).
DEDUP_NEIGHBOURS = 3
# The dedup lookup compares a namespace exactly (``scan_sql.DEDUP_VECTORS``) when it
# holds at most EXACT_DEDUP_PER_RECORD records per batch record, or, under a fifth of
# the table, EXACT_DEDUP_SMALL_PER_RECORD (at most EXACT_DEDUP_MAX records in all).
# Reading and comparing a stored record costs ~50 us per 1,000 batch records, an HNSW
# lookup ~0.15 ms in a large namespace and ~1.5 ms in a small one of a large table.
EXACT_DEDUP_PER_RECORD = 2
EXACT_DEDUP_SMALL_PER_RECORD = 20
EXACT_DEDUP_MAX = 10_000
# From this many records on, a batch's HNSW lookups run in two halves at once.
PARALLEL_LOOKUP_MIN = 200


class WriteFlows(MemoryBase):
    """Write experience records, merging near-duplicates (flows; see ``runtime/flow.py``)."""

    # ------------------------------------------------------------------ dedup guard

    def same_meaning(self, a: str, b: str, similarity: float) -> bool:
        """Whether two lessons at ``similarity`` may be merged.

        The cosine threshold alone merges different lessons: all-MiniLM-L6-v2 puts
        "increase the timeout" and "decrease the timeout" at 0.99, and two different
        Chinese lessons near 0.9. So a merge also needs no lexical veto
        (``text.merge_veto``: negation, numbers, opposite terms, and for text the
        model does not cover, the same content words).
        """
        if similarity < self.dedup_threshold:
            return False
        covered = self._covered(a) and self._covered(b)
        multilingual = self.embedder.languages != ENGLISH
        return merge_veto(a, b, covered=covered, minimal_pairs=multilingual) is None

    def _stored_neighbours_flow(self, ns: str, matrix: np.ndarray
                                ) -> Flow[dict[int, list[dict[str, Any]]]]:
        """Stored records near each vector of the batch (row ``i`` of ``matrix``), most
        similar first, at most ``DEDUP_NEIGHBOURS``; called under the namespace lock.

        A namespace small next to the batch (``scan_sql.DEDUP_VECTORS``) is read whole
        and compared exactly, in numpy: one statement, no approximate-search miss, and
        in a small namespace of a large table 10x cheaper than the HNSW lookups (each a
        filtered scan). Otherwise one HNSW lookup per record.
        """
        rows = yield Sql(scan_sql.DEDUP_VECTORS, {
            "ns": ns, "cap": EXACT_DEDUP_PER_RECORD * len(matrix),
            "cap_small": min(EXACT_DEDUP_MAX, EXACT_DEDUP_SMALL_PER_RECORD * len(matrix))})
        neighbours: dict[int, list[dict[str, Any]]] = defaultdict(list)
        row = rows[0]
        if not row["exact"]:
            # A large batch's lookups in two halves at once, the second on the side
            # connection (2 cores: 1,000 lookups at 100k records 377 -> 228 ms). The
            # namespace lock keeps writers out, so both see the same records.
            halves = [(0, matrix)] if len(matrix) < PARALLEL_LOOKUP_MIN else [
                (0, matrix[: len(matrix) // 2]), (len(matrix) // 2, matrix[len(matrix) // 2:])]
            stmt = q.nearest_many(self.embedder.dim, DEDUP_NEIGHBOURS)
            found = yield Parallel(tuple(
                Sql(stmt, {"ns": ns, "vectors": vectors_param(part), "n": len(part)})
                for _, part in halves))
            for (offset, _), rows_of_half in zip(halves, found, strict=True):
                for r in rows_of_half:
                    neighbours[offset + r["i"] - 1].append(r)
            return neighbours
        if not row["ids"]:  # an empty namespace
            return neighbours
        ids, lessons, dim = row["ids"], row["lessons"], matrix.shape[1]
        stored = np.frombuffer(row["vectors"], dtype=">f4").reshape(len(ids), dim + 1)
        stored = stored[:, 1:].astype(np.float32)  # without each vector's 4-byte header
        norms = np.linalg.norm(stored, axis=1)
        sims = (matrix @ stored.T) / np.where(norms == 0, 1.0, norms)
        # Only pairs at the threshold can merge (``same_meaning``).
        for i, j in zip(*np.nonzero(sims >= self.dedup_threshold), strict=True):
            neighbours[int(i)].append({"id": ids[j], "lesson": lessons[j],
                                       "similarity": float(sims[i, j])})
        for i, near in neighbours.items():
            neighbours[i] = sorted(near, key=lambda n: -n["similarity"])[:DEDUP_NEIGHBOURS]
        return neighbours

    # ------------------------------------------------------------------ write

    def _write_flow(
        self, records: Sequence[RecordInput], namespace: Namespace | str | None
    ) -> Flow[list[WriteResult]]:
        ns = self._ns(namespace)
        parsed = validate_records(records, self.settings)
        if not parsed:
            return []
        yield from self._ready_flow()
        self._warn_language([p.lesson for p in parsed])
        texts = [embedding_text(p) for p in parsed]
        vectors = yield Embed(texts)
        now = self._now()
        yield Sql(q.LOCK_NAMESPACE, {"ns": ns})
        matrix = as_matrix(vectors)
        neighbours = yield from self._stored_neighbours_flow(ns, matrix)
        sims = matrix @ matrix.T
        threshold = self.dedup_threshold
        results: list[WriteResult] = []
        inserts: list[int] = []  # indexes into parsed
        insert_ids: dict[int, uuid.UUID] = {}
        insert_extra: dict[int, int] = defaultdict(int)  # merged into a batch insert
        # Scenes of the records merged into a batch insert (a record belongs to every
        # scene it was written under: ``experiences_sql.scene_condition``).
        insert_scenes: dict[int, list[str]] = defaultdict(list)
        merges: dict[uuid.UUID, dict[str, Any]] = {}
        for i, rec in enumerate(parsed):
            target: tuple[uuid.UUID, float, int | None] | None = None
            for n in neighbours[i]:
                if self.same_meaning(rec.lesson, n["lesson"], n["similarity"]):
                    target = (n["id"], float(n["similarity"]), None)
                    break
            # Records inserted earlier in this batch: only those above the threshold
            # are checked, most similar first (a Python loop over every earlier insert
            # cost ~0.15 s per 1,000-record batch).
            row = sims[i, inserts]
            above = np.flatnonzero(row >= threshold)
            for k in above[np.argsort(-row[above], kind="stable")]:
                j, sim = inserts[k], float(row[k])
                if target is not None and sim <= target[1]:
                    break
                if self.same_meaning(rec.lesson, parsed[j].lesson, sim):
                    target = (insert_ids[j], sim, j)
                    break
            if target is None:
                inserts.append(i)
                insert_ids[i] = self._new_id()
                results.append(WriteResult(id=insert_ids[i], status="inserted"))
                continue
            target_id, sim, batch_index = target
            results.append(WriteResult(id=target_id, status="merged", similarity=round(sim, 4)))
            if batch_index is not None:
                insert_extra[batch_index] += 1
                if rec.scene != parsed[batch_index].scene:
                    _add_scene(insert_scenes[batch_index], rec.scene)
            else:
                m = merges.setdefault(
                    target_id, {"added": 0, "critical": False, "importance": None, "scenes": []}
                )
                m["added"] += 1
                _add_scene(m["scenes"], rec.scene)
                m["critical"] = m["critical"] or rec.critical
                if rec.importance is not None:
                    m["importance"] = max(m["importance"] or 0.0, rec.importance)

        if inserts:
            params = []
            for i in inserts:
                rec = parsed[i]
                created = rec.created_at or now
                params.append({
                    "ns": ns, "id": insert_ids[i], "scene": rec.scene, "trigger": rec.trigger,
                    "action": rec.action, "outcome": rec.outcome, "lesson": rec.lesson,
                    "confidence": rec.confidence, "importance": rec.importance,
                    "critical": rec.critical,
                    "source": json.dumps(rec.source.model_dump(exclude_none=True)),
                    "score": 1.0, "use_count": 0, "occurrences": 1 + insert_extra[i],
                    "last_used_at": now if insert_extra[i] else None,
                    "created_at": created, "updated_at": now, "archived_at": None,
                    "merged_into": None, "merged_from": [], "also_scenes": insert_scenes[i],
                    **self._vector_fields(texts[i], matrix[i]),
                    "search_tsv": fts.tsvector_literal(
                        tokens(search_document(rec.lesson, rec.trigger, rec.scene))
                    ),
                })
            yield Sql(batch_sql.INSERT_ROWS, batch_sql.insert_rows(params), fetch="none")
        if merges:
            yield Sql(batch_sql.MERGE_ROWS, batch_sql.merge_rows(
                [{"ns": ns, "id": rid, "now": now, **m} for rid, m in merges.items()]),
                fetch="none")
            yield Sql(batch_sql.EVENT_ROWS, batch_sql.event_rows([
                {"ns": ns, "record_id": rid, "kind": "merged", "now": now,
                 "detail": json.dumps({"added": m["added"]})} for rid, m in merges.items()
            ]), fetch="none")
        return results


def _add_scene(scenes: list[str], scene: str) -> None:
    if scene not in scenes:
        scenes.append(scene)


class RecordFlows(WriteFlows, CurationFlows):
    """Write, recall and curate experience records: the mixin the front ends build on."""


__all__ = [
    "MAX_BATCH", "RecordFlows", "RecordInput", "WriteFlows", "embedding_text", "raise_validation",
]
