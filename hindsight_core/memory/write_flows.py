"""Writing experience records: validation, the dedup guard, insert-or-merge.

The read and curation flows live in ``read_flows.py`` and ``curation.py``;
:class:`RecordFlows` composes the three for the front ends (``sync.py``, ``aio.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..dedup_veto import merge_veto, repeat_key
from ..embeddings import as_matrix
from ..embeddings.profiles import ENGLISH, LESSON_AND_TRIGGER, cosine_floor
from ..models import ExperienceIn, Namespace, WriteResult, raise_validation
from ..runtime.flow import Embed, Flow, Pipelined, Rows, Sql, Unit
from ..storage import batch_sql, scan_sql
from ..storage import experiences_sql as q
from ..storage.vectors import vectors_param
from .base import LESSON_CACHE_SIZE, MemoryBase
from .curation import CurationFlows
from .inputs import MAX_BATCH, RecordInput, embedding_text, validate_records
from .write_cosines import PairCosines, exact_neighbours
from .write_plan import Planner, by_record, write_stages
from .write_rows import insert_params, merge_params

# Near-duplicate candidates per record (the lexical veto may reject the nearest).
DEDUP_NEIGHBOURS = 3
# With the merge decided on lesson + trigger (``dedup_floor``), more: the stored
# vectors rank by the whole record, and records of the same run (its action and
# outcome) can crowd a rewording from another run out of the nearest three. Only those
# the lexical veto lets through are embedded (``WriteFlows._decided``).
DEDUP_CANDIDATES = 8
# The dedup lookup compares a namespace exactly (``scan_sql.DEDUP_VECTORS``) when it
# holds at most EXACT_DEDUP_PER_RECORD records per batch record, or, under a fifth of
# the table, EXACT_DEDUP_SMALL_PER_RECORD (at most EXACT_DEDUP_MAX records in all).
# Reading and comparing a stored record costs far less than an HNSW lookup, which in
# a small namespace of a large table is a filtered scan, slower again.
EXACT_DEDUP_PER_RECORD = 2
EXACT_DEDUP_SMALL_PER_RECORD = 20
EXACT_DEDUP_MAX = 10_000
# A batch is looked up, planned and inserted in stages (``write_plan.write_stages``, in
# ``Planner.order``): a first small one, so that inserting starts soon, then
# STAGE_RECORDS at a time.
# Each stage's inserts (an HNSW insert each: most of the batch's server time) run while the
# next stages are looked up and planned.
FIRST_STAGE_RECORDS = 100
STAGE_RECORDS = 250


class WriteFlows(MemoryBase):
    """Write experience records, merging near-duplicates (flows; see ``runtime/flow.py``)."""

    # ------------------------------------------------------------------ dedup guard

    def same_meaning(self, a: str, b: str, similarity: float) -> bool:
        """Whether two lessons at ``similarity`` may be merged.

        The cosine threshold alone merges different lessons: all-MiniLM-L6-v2 puts
        "increase the timeout" and "decrease the timeout" at 0.99, and two different
        Chinese lessons near 0.9. So a merge also needs no lexical veto
        (``dedup_veto.merge_veto``: negation, numbers, opposite terms, and for text the
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

    def _decided(
        self,
        parsed: Sequence[ExperienceIn],
        near: Mapping[int, Sequence[Mapping[str, Any]]],
        planner: Planner,
        floor: float,
    ) -> Flow[dict[int, list[dict[str, Any]]]]:
        """The stored candidates of each batch record (found by the whole record's
        vector), their ``similarity`` now the cosine of the two lesson + trigger
        embeddings, most similar first; and ``planner.decide`` the same for the batch's
        linked records. One ``Embed`` for every text needed: the batch records with a
        candidate, and the candidates the lexical veto lets through (the others cannot
        merge at any cosine, unless a repeat: ``Planner``)."""
        keep: dict[int, list[dict[str, Any]]] = {}
        for i, ns_ in near.items():
            lesson = parsed[i].lesson
            cands = [
                dict(n)
                for n in ns_
                if "key" in n
                or (n["similarity"] >= floor and self.same_meaning(lesson, n["lesson"], 1.0))
            ]
            if cands:
                keep[i] = cands
        rows = sorted(set(keep) | set(planner.linked))
        texts = {i: _lesson_text(parsed[i].lesson, parsed[i].trigger) for i in rows}
        needed = set(texts.values())
        for cands in keep.values():
            needed.update(_lesson_text(n["lesson"], n.get("trigger")) for n in cands)
        vectors = yield from self._lesson_vectors(sorted(needed))
        own = {i: vectors[t] for i, t in texts.items()}
        for i, cands in keep.items():
            for n in cands:
                other = vectors[_lesson_text(n["lesson"], n.get("trigger"))]
                n["similarity"] = float(own[i] @ other)
            cands.sort(key=lambda n: -n["similarity"])
        if planner.linked:
            planner.decide = PairCosines({i: own[i] for i in planner.linked})
        return keep

    def _lesson_vectors(self, texts: Sequence[str]) -> Flow[dict[str, np.ndarray]]:
        """The vectors of lesson + trigger ``texts``, from the side dedup compares
        (:attr:`dedup_as_query`): recent ones from a small LRU cache, the others in one
        ``Embed``."""
        out: dict[str, np.ndarray] = {}
        with self._cache_lock:
            for t in texts:
                v = self._lesson_cache.get(t)
                if v is not None:
                    self._lesson_cache.move_to_end(t)
                    out[t] = v
        missing = [t for t in texts if t not in out]
        if missing:
            matrix = as_matrix((yield from Embed(missing, query=self.dedup_as_query)))
            with self._cache_lock:
                for t, v in zip(missing, matrix, strict=True):
                    out[t] = self._lesson_cache[t] = v.copy()  # not the batch matrix
                while len(self._lesson_cache) > LESSON_CACHE_SIZE:
                    self._lesson_cache.popitem(last=False)
        return out

    def _lookups(
        self, ns: str, matrix: np.ndarray, stages: list[list[int]], exact: bool, most: int
    ) -> tuple[tuple[Sql | None, ...], tuple[Sql | None, ...]]:
        """Each stage's HNSW lookup of its records' stored neighbours (none when the
        namespace is compared exactly): ``most`` per record; and the same
        without the transaction's own rows (``Pipelined.again``)."""
        if exact:
            return (None,) * len(stages), (None,) * len(stages)
        dim = self.embedder.dim
        stmt = q.nearest_many(dim, most)
        not_own = q.nearest_many(dim, most, own_rows=False)
        params = [
            {"ns": ns, "vectors": vectors_param(matrix[stage]), "n": len(stage)} for stage in stages
        ]
        return tuple(Sql(stmt, p) for p in params), tuple(Sql(not_own, p) for p in params)

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
        # A namespace small next to the batch (``scan_sql.DEDUP_VECTORS``) is read whole
        # and compared exactly, in numpy: one statement, no approximate-search miss, and
        # in a small namespace of a large table much cheaper than the HNSW lookups (each
        # a filtered scan). Otherwise one HNSW lookup per record, a stage at a time.
        # More than lesson and trigger embedded: a repeated lesson and trigger merges at
        # any cosine (``write_plan.Planner``), found by its text.
        keys = (
            [repeat_key(p.lesson, p.trigger) for p in parsed]
            if set(self.document_fields) - {"lesson", "trigger"}
            else None
        )
        floor = self.dedup_floor  # the lessons decide: they need the stored triggers
        gate = (
            yield from Sql(
                scan_sql.DEDUP_VECTORS,
                {
                    "ns": ns,
                    "triggers": keys is not None or floor is not None,
                    "cap": EXACT_DEDUP_PER_RECORD * len(matrix),
                    "cap_small": min(EXACT_DEDUP_MAX, EXACT_DEDUP_SMALL_PER_RECORD * len(matrix)),
                },
            )
        )[0]
        if gate["unanalyzed"] and not gate["exact"]:
            analyzed = yield from Unit(_analyze(), gives_up=True)
            if not analyzed:  # queued behind DDL (a reindex) waiting for this transaction
                yield Sql(scan_sql.ANALYZE, fetch="none")
        # With the whole record embedded (``dedup_floor``), the stored vectors only find
        # candidates, from a looser cosine: another run's action and outcome move a
        # rewording's vector more than a different lesson's. The merge is decided on
        # the lesson + trigger embeddings (``_decided``), from the side the model
        # compares paraphrases with (``dedup_as_query``; the stored vectors are search
        # documents, so with that side they only find candidates too).
        link = self.dedup_threshold if floor is None else floor
        most = DEDUP_NEIGHBOURS if floor is None else DEDUP_CANDIDATES
        exact = (
            exact_neighbours(matrix, gate, threshold=link, most=most, keys=keys)
            if gate["exact"]
            else None
        )
        planner = Planner(
            parsed,
            matrix @ matrix.T,
            threshold=link,
            same_meaning=self.same_meaning,
            new_id=self._new_id,
            keys=keys,
            merge_from=self.dedup_threshold,  # ``same_meaning`` refuses any pair below it
        )
        order = planner.order
        stages = [
            order[lo:hi] for lo, hi in write_stages(len(order), FIRST_STAGE_RECORDS, STAGE_RECORDS)
        ]

        decided: dict[int, list[dict[str, Any]]] | None = None

        def step(k: int, found: Rows) -> Sql | None:
            # Plan stage k from its lookup's rows; insert the rows that became final.
            if decided is not None:
                near: Mapping[int, Sequence[Mapping[str, Any]]] = decided
            else:
                near = exact if exact is not None else by_record(found, stages[k])
            ready = planner.plan_stage(stages[k], near)
            if not ready:
                return None
            rows = insert_params(
                planner.plan,
                parsed,
                ns=ns,
                now=now,
                vectors=lambda i: self._vector_fields(texts[i], matrix[i]),
                which=planner.chained(ready),
                fields=self.document_fields,
            )
            return Sql(batch_sql.INSERT_ROWS, batch_sql.insert_rows(rows), fetch="none")

        lookups, again = self._lookups(ns, matrix, stages, exact is not None, most)
        if floor is None:
            yield from Pipelined(lookups, step, again)
        else:
            # Every lookup first (no insert yet, so none sees the batch's own rows), then
            # one embedding of the lesson + trigger texts the decisions need, then the
            # inserts, a stage at a time.
            near_all: dict[int, list[dict[str, Any]]] = {}

            def collect(k: int, found: Rows) -> None:
                near_all.update(by_record(found, stages[k]))

            if exact is None:
                yield from Pipelined(lookups, collect, again)
            decided = yield from self._decided(
                parsed, exact if exact is not None else near_all, planner, floor
            )
            yield from Pipelined((None,) * len(stages), step)
        plan = planner.plan
        if plan.merges:
            updates, events = merge_params(plan, ns=ns, now=now)
            yield Sql(batch_sql.MERGE_ROWS, batch_sql.merge_rows(updates), fetch="none")
            yield Sql(batch_sql.EVENT_ROWS, batch_sql.event_rows(events), fetch="none")
        return plan.results


def _lesson_text(lesson: str, trigger: str | None) -> str:
    return embedding_text({"lesson": lesson, "trigger": trigger or ""}, LESSON_AND_TRIGGER)


def _analyze() -> Flow[bool]:
    """Statistics for the records' table (``scan_sql.ANALYZE``), committed on a
    connection of its own: the write's lookups (on the side connection too) are planned
    with them. It gives up waiting for the table's lock (``Unit.gives_up``)."""
    yield Sql(q.GIVE_UP_LOCKS, fetch="none")
    yield Sql(scan_sql.ANALYZE, fetch="none")
    return True


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
