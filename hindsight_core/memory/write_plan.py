"""What a write does, decided without a database.

:func:`plan_write` takes a validated batch, the stored near-duplicates of each record
and the batch's own similarities, and says which records are new and which merge
(into a stored record or into an earlier record of the same batch); a pair above the
threshold that the lexical veto keeps apart (``same_meaning``) stays two records.
:class:`Planner` decides the same a stage of the batch at a time (``write_stages``).
``write_rows.py`` turns the plan into statement parameters, ``write_cosines.py`` gives
the cosines compared; the flow in ``write_flows.py`` only fetches and yields.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dedup_veto import repeat_key
from ..models import ExperienceIn, WriteResult
from .write_cosines import PairCosines

SameMeaning = Callable[[str, str, float], bool]
"""``same_meaning(lesson_a, lesson_b, similarity)``: whether the two may merge."""


@dataclass
class Merge:
    """What a stored record takes from the batch records merged into it."""

    added: int = 0
    critical: bool = False
    importance: float | None = None
    scenes: list[str] = field(default_factory=list)


@dataclass
class WritePlan:
    """The outcome of a batch before any statement runs.

    Attributes:
        results: one per batch record, in order.
        inserts: indexes (into the batch) of the records stored as new, in order.
        ids: the new id of each insert.
        absorbed: per insert, how many later batch records merged into it.
        scenes: per insert, the other scenes of those records (a record belongs to
            every scene it was written under: ``experiences_sql.scene_condition``).
        merges: per stored record merged into, what it takes.
    """

    results: list[WriteResult] = field(default_factory=list)
    inserts: list[int] = field(default_factory=list)
    ids: dict[int, uuid.UUID] = field(default_factory=dict)
    absorbed: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    scenes: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    merges: dict[uuid.UUID, Merge] = field(default_factory=dict)


def write_stages(n: int, first: int, size: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` slices of an ``n``-record batch (of ``Planner.order``)
    planned and inserted one after another (``write_flows``: each slice's inserts run
    while the next slices are looked up and planned): ``first`` records, then ``size``
    at a time."""
    bounds = [0, *range(min(first, n), n, size), n]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]


def by_record(
    rows: Sequence[dict[str, Any]], stage: Sequence[int]
) -> dict[int, list[dict[str, Any]]]:
    """The rows of ``experiences_sql.nearest_many`` for the batch's records ``stage``
    (batch indexes, in the order looked up), by batch index (its ``i`` counts from
    1), most similar first."""
    neighbours: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        neighbours[stage[r["i"] - 1]].append(r)
    return neighbours


class Planner:
    """Plans a batch a stage at a time: :meth:`plan_stage` decides some records and
    says which new records are final, so that their rows can be inserted while the
    rest of the batch is still being looked up.

    A record with no other record of the batch at the threshold of it (most records)
    is decided by its own stored neighbours alone, and its row is final at once; those
    come first in :attr:`order`, so that inserting starts after the first stage's
    lookups. The others follow in batch order: each may merge into an earlier one, and
    a new one's row is final once every later record at the threshold of it is planned
    (one of those may merge into it: ``WritePlan.absorbed`` and ``scenes``). Planning
    in stages decides exactly what planning the batch in order at once does.

    With ``keys`` (``dedup_veto.repeat_key`` per record), a record repeating a stored
    or earlier record's lesson and trigger merges into it at any similarity. With
    ``merge_from``, the cosine below which ``same_meaning`` refuses any pair, only the
    batch's pairs at it (or repeated) are tested: the same plan (:meth:`_may_merge`).
    """

    def __init__(
        self,
        records: Sequence[ExperienceIn],
        sims: np.ndarray,
        *,
        threshold: float,
        same_meaning: SameMeaning,
        new_id: Callable[[], uuid.UUID],
        keys: Sequence[Hashable] | None = None,
        merge_from: float | None = None,
    ) -> None:
        self.plan = WritePlan()
        self._records, self._sims, self._keys = records, sims, keys
        self._same_meaning, self._new_id = same_meaning, new_id
        self._merge_from = merge_from
        # each record's key as a number: repeats found among thousands of pairs at once
        codes: dict[Hashable, int] = {}
        self._key_codes = np.array([codes.setdefault(k, len(codes)) for k in keys or ()])
        self.decide: PairCosines | None = None
        """The cosines the merge test takes for pairs of the batch, when not ``sims``
        (``threshold`` then only links candidates): set before :meth:`plan_stage`."""
        # Earlier records of the batch at the threshold, per record (ascending), found
        # a row at a time: with a model whose cosines crowd (e5: most pairs of a batch
        # above its candidate floor) a batch of thousands links millions of pairs, too
        # many for Python lists or a mask of the whole matrix at once.
        self._earlier: dict[int, np.ndarray] = {}
        last_later = np.full(len(records), -1)  # record -> its last later record at it
        for i in range(1, len(records)):
            earlier = np.flatnonzero(sims[i, :i] >= threshold)
            if len(earlier):
                self._earlier[i] = earlier
                last_later[earlier] = i
        if keys is not None:
            first: dict[Hashable, list[int]] = defaultdict(list)
            for i, key in enumerate(keys):
                for j in first[key]:
                    linked_to = self._earlier.get(i, np.zeros(0, dtype=np.intp))
                    if j not in linked_to:
                        self._earlier[i] = np.append(linked_to, j)
                    last_later[j] = max(last_later[j], i)
                first[key].append(i)
        self._last_later = {j: int(i) for j, i in enumerate(last_later.tolist()) if i >= 0}
        linked = set(self._earlier) | set(self._last_later)
        self.linked = sorted(linked)
        """The records with another record of the batch at ``threshold`` (or repeated)."""
        solo = [i for i in range(len(records)) if i not in linked]
        self.order = self.chained(solo) + self.linked
        """The batch indexes in the order to look up and plan (:meth:`plan_stage`)."""
        self._planned = np.zeros(len(records), dtype=bool)
        self._inserted = np.zeros(len(records), dtype=bool)
        self._results: list[WriteResult | None] = [None] * len(records)
        self._left = len(records)
        self._stored: dict[uuid.UUID, list[int]] = {}  # stored record -> batch records
        self._waiting: list[int] = []  # inserts a later record may still merge into

    def chained(self, rows: Sequence[int]) -> list[int]:
        """``rows`` (batch indexes) in a chain of near neighbours: from the first, each
        next the most similar not taken yet (greedy, in numpy).

        Inserted one after another in this order, the HNSW inserts walk one part of the
        graph after another instead of all of it in turn (less than half the backend
        CPU of batch order); the lookups of a stage in this order likewise.
        """
        if len(rows) < 3:
            return list(rows)
        sims = self._sims[np.ix_(rows, rows)]
        taken = np.zeros(len(rows), dtype=sims.dtype)  # -inf once taken
        at, out = 0, [0]
        taken[0] = -np.inf
        for _ in range(len(rows) - 1):
            at = int((sims[at] + taken).argmax())
            out.append(at)
            taken[at] = -np.inf
        return [rows[k] for k in out]

    def plan_stage(
        self, stage: Sequence[int], neighbours: Mapping[int, Sequence[Mapping[str, Any]]]
    ) -> list[int]:
        """Plan the records ``stage`` (the next of :attr:`order`); return the inserts
        whose rows became final. Once every record is planned, :attr:`plan` is whole.

        Args:
            stage: batch indexes, in :attr:`order`.
            neighbours: per batch index (of at least the records planned now), stored
                records near it (``id``, ``lesson``, ``similarity``), most similar first.
        """
        plan, records = self.plan, self._records
        ready: list[int] = []
        for i in stage:
            rec = records[i]
            target = _target(
                plan,
                records,
                i,
                neighbours.get(i, ()),
                self._may_merge(i),
                self._same_meaning,
                self._keys,
            )
            self._planned[i] = True
            if target is None:
                self._inserted[i] = True
                plan.inserts.append(i)
                plan.ids[i] = self._new_id()
                self._results[i] = WriteResult(id=plan.ids[i], status="inserted")
                (ready if i not in self._last_later else self._waiting).append(i)
                continue
            target_id, sim, batch_index = target
            self._results[i] = WriteResult(id=target_id, status="merged", similarity=round(sim, 4))
            if batch_index is None:
                self._stored.setdefault(target_id, []).append(i)
                continue
            plan.absorbed[batch_index] += 1
            if rec.scene != records[batch_index].scene:
                _add_scene(plan.scenes[batch_index], rec.scene)
        self._left -= len(stage)
        final = [i for i in self._waiting if self._planned[self._last_later[i]]]
        if final:
            self._waiting = [i for i in self._waiting if not self._planned[self._last_later[i]]]
        if not self._left:
            self._finish()
        return ready + final

    def _may_merge(self, i: int) -> list[tuple[float, int]]:
        """The inserts of the batch record ``i`` may merge into: its earlier records at
        the threshold (or repeated) that were inserted, with their cosines (``decide``'s
        or ``sims``'), in that order. With ``merge_from`` (the merge test's own
        threshold), only those at it or repeated: below it ``same_meaning`` refuses any
        pair, so leaving them out decides the same (``_target`` returns the first that
        may merge, most similar first) without testing each of thousands of pairs."""
        earlier = self._earlier.get(i)
        if earlier is None:
            return []
        js = earlier[self._inserted[earlier]]
        if self._merge_from is not None and len(js):
            if self.decide is not None:
                keep = self.decide.at_least(i, js, self._merge_from)
            else:  # the values compared as ``float(sims[i, j])``, in double precision
                keep = self._sims[i, js].astype(np.float64) >= self._merge_from
            if self._keys is not None:
                keep |= self._key_codes[js] == self._key_codes[i]
            js = js[keep]
        sims = self._sims if self.decide is None else self.decide
        return [(float(sims[i, j]), j) for j in js.tolist()]

    def _finish(self) -> None:
        """The inserts, and the merges into stored records each taken, in batch order
        (as planning the batch in order does: the order of rows, scenes and events)."""
        plan, records = self.plan, self._records
        plan.results = [r for r in self._results if r is not None]
        plan.inserts.sort()
        for target_id, merged in sorted(self._stored.items(), key=lambda kv: min(kv[1])):
            m = plan.merges[target_id] = Merge()
            for i in sorted(merged):
                rec = records[i]
                m.added += 1
                _add_scene(m.scenes, rec.scene)
                m.critical = m.critical or rec.critical
                if rec.importance is not None:
                    m.importance = max(m.importance or 0.0, rec.importance)


def plan_write(
    records: Sequence[ExperienceIn],
    neighbours: Mapping[int, Sequence[Mapping[str, Any]]],
    sims: np.ndarray,
    *,
    threshold: float,
    same_meaning: SameMeaning,
    new_id: Callable[[], uuid.UUID],
) -> WritePlan:
    """Decide, for each record of a batch, insert or merge (a :class:`Planner` at once).

    Args:
        records: the validated batch.
        neighbours: per batch index, stored records near it (``id``, ``lesson``,
            ``similarity``), most similar first.
        sims: the batch's cosine similarities with itself (``len(records)`` square).
        threshold: the dedup threshold; only pairs at it are checked within the batch.
        same_meaning: the merge test (cosine threshold and the lexical veto).
        new_id: gives the id of each new record.
    """
    planner = Planner(records, sims, threshold=threshold, same_meaning=same_meaning, new_id=new_id)
    planner.plan_stage(planner.order, neighbours)
    return planner.plan


def _target(
    plan: WritePlan,
    records: Sequence[ExperienceIn],
    i: int,
    near: Sequence[Mapping[str, Any]],
    inserted: Sequence[tuple[float, int]],
    same_meaning: SameMeaning,
    keys: Sequence[Hashable] | None,
) -> tuple[uuid.UUID, float, int | None] | None:
    """The record that record ``i`` merges into (id, similarity, batch index or None
    for a stored one), or None to insert it: the first stored neighbour that may merge
    (or repeats it: ``Planner``), unless an earlier insert of the batch (``inserted``:
    ``(cosine, index)`` of the earlier inserts at the threshold or repeated, in batch
    order) is more similar and may merge too."""
    lesson = records[i].lesson
    key = keys[i] if keys is not None else None

    def repeats(n: Mapping[str, Any]) -> bool:  # "key": found by it (``exact_neighbours``)
        if key is None or "key" in n:
            return key is not None and bool(n["key"] == key)
        return "trigger" in n and repeat_key(n["lesson"], n["trigger"]) == key

    target: tuple[uuid.UUID, float, int | None] | None = None
    for n in near:
        if same_meaning(lesson, n["lesson"], n["similarity"]) or repeats(n):
            target = (n["id"], float(n["similarity"]), None)
            break
    # Earlier inserts, most similar first (stable: the earlier first on a tie).
    for sim, j in sorted(inserted, key=lambda c: -c[0]):
        if target is not None and sim <= target[1]:
            break
        if same_meaning(lesson, records[j].lesson, sim) or (keys is not None and keys[j] == key):
            return (plan.ids[j], sim, j)
    return target


def _add_scene(scenes: list[str], scene: str) -> None:
    if scene not in scenes:
        scenes.append(scene)
