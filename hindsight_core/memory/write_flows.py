"""Writing experience records: validation, the dedup guard, insert-or-merge.

The read and curation flows live in ``read_flows.py`` and ``curation.py``;
:class:`RecordFlows` composes the three for the front ends (``sync.py``, ``aio.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..embeddings import as_matrix
from ..embeddings.profiles import ENGLISH, cosine_floor
from ..models import Namespace, WriteResult, raise_validation
from ..runtime.flow import Embed, Flow, Parallel, Sql
from ..storage import batch_sql, scan_sql
from ..storage import experiences_sql as q
from ..storage.vectors import vectors_param
from ..text import merge_veto
from .base import MemoryBase
from .curation import CurationFlows
from .inputs import MAX_BATCH, RecordInput, embedding_text, validate_records
from .write_plan import (
    exact_neighbours,
    insert_params,
    lookup_parts,
    merge_params,
    plan_write,
)

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
        model does not cover, the same content words). The minimal-pair rule (one
        sentence with a word swapped or a detail added) applies whenever the cosine
        cannot tell such a pair from a rewording: with a multilingual model; with a
        model whose cosines crowd near 1 (a ``cosine_floor`` above 0, e5: "Pin numpy
        below 2.0" / "Pin pandas below 2.0" at 0.985, also when declared English-only);
        and when more than lesson and trigger is embedded (``document_fields``), the
        shared scene, action and outcome lifting the pair's cosine.
        """
        if similarity < self.dedup_threshold:
            return False
        covered = self._covered(a) and self._covered(b)
        minimal_pairs = (
            self.embedder.languages != ENGLISH
            or cosine_floor(self.settings, self.embedder) > 0
            or bool(set(self.document_fields) - {"lesson", "trigger"})
        )
        return merge_veto(a, b, covered=covered, minimal_pairs=minimal_pairs) is None

    def _stored_neighbours_flow(
        self, ns: str, matrix: np.ndarray
    ) -> Flow[dict[int, list[dict[str, Any]]]]:
        """Stored records near each vector of the batch (row ``i`` of ``matrix``), most
        similar first, at most ``DEDUP_NEIGHBOURS``; called under the namespace lock.

        A namespace small next to the batch (``scan_sql.DEDUP_VECTORS``) is read whole
        and compared exactly, in numpy: one statement, no approximate-search miss, and
        in a small namespace of a large table 10x cheaper than the HNSW lookups (each a
        filtered scan). Otherwise one HNSW lookup per record.
        """
        rows = yield from Sql(
            scan_sql.DEDUP_VECTORS,
            {
                "ns": ns,
                "cap": EXACT_DEDUP_PER_RECORD * len(matrix),
                "cap_small": min(EXACT_DEDUP_MAX, EXACT_DEDUP_SMALL_PER_RECORD * len(matrix)),
            },
        )
        row = rows[0]
        if not row["exact"]:
            # A large batch's lookups in two halves at once, the second on the side
            # connection (2 cores: 1,000 lookups at 100k records 377 -> 228 ms). The
            # namespace lock keeps writers out, so both see the same records.
            halves = lookup_parts(len(matrix), PARALLEL_LOOKUP_MIN)
            stmt = q.nearest_many(self.embedder.dim, DEDUP_NEIGHBOURS)
            found = yield from Parallel(
                tuple(
                    Sql(stmt, {"ns": ns, "vectors": vectors_param(matrix[lo:hi]), "n": hi - lo})
                    for lo, hi in halves
                )
            )
            neighbours: dict[int, list[dict[str, Any]]] = defaultdict(list)
            for (lo, _), rows_of_half in zip(halves, found, strict=True):
                for r in rows_of_half:
                    neighbours[lo + r["i"] - 1].append(r)
            return neighbours
        return exact_neighbours(matrix, row, threshold=self.dedup_threshold, most=DEDUP_NEIGHBOURS)

    # ------------------------------------------------------------------ write

    def write_flow(
        self, records: Sequence[RecordInput], namespace: Namespace | str | None
    ) -> Flow[list[WriteResult]]:
        """Validate ``records`` and insert each, or merge it into a stored
        near-duplicate (``write`` / ``write_many``; reflection reuses it)."""
        ns = self.namespace_key(namespace)
        parsed = validate_records(records, self.settings)
        if not parsed:
            return []
        yield from self.ready_flow()
        self._warn_language([p.lesson for p in parsed])
        texts = [embedding_text(p, self.document_fields) for p in parsed]
        vectors = yield from Embed(texts)
        now = self.now()
        yield Sql(q.LOCK_NAMESPACE, {"ns": ns})
        matrix = as_matrix(vectors)
        neighbours = yield from self._stored_neighbours_flow(ns, matrix)
        plan = plan_write(
            parsed,
            neighbours,
            matrix @ matrix.T,
            threshold=self.dedup_threshold,
            same_meaning=self.same_meaning,
            new_id=self._new_id,
        )
        if plan.inserts:
            yield Sql(
                batch_sql.INSERT_ROWS,
                batch_sql.insert_rows(
                    insert_params(
                        plan,
                        parsed,
                        ns=ns,
                        now=now,
                        vectors=lambda i: self._vector_fields(texts[i], matrix[i]),
                    )
                ),
                fetch="none",
            )
        if plan.merges:
            updates, events = merge_params(plan, ns=ns, now=now)
            yield Sql(batch_sql.MERGE_ROWS, batch_sql.merge_rows(updates), fetch="none")
            yield Sql(batch_sql.EVENT_ROWS, batch_sql.event_rows(events), fetch="none")
        return plan.results


class RecordFlows(WriteFlows, CurationFlows):
    """Write, recall and curate experience records: the mixin the front ends build on."""


__all__ = [
    "MAX_BATCH",
    "RecordFlows",
    "RecordInput",
    "WriteFlows",
    "embedding_text",
    "raise_validation",
]
