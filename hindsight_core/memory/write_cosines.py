"""The cosines a write's dedup compares, besides the stored records' from the index.

:func:`exact_neighbours` compares a batch with a namespace read whole (a small one:
``write_flows``); :class:`PairCosines` gives the planner (``write_plan.Planner``) the
cosines of pairs of the batch's records from their lesson + trigger vectors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from ..dedup_veto import repeat_key


def exact_neighbours(
    matrix: np.ndarray,
    row: Mapping[str, Any],
    *,
    threshold: float,
    most: int,
    keys: Sequence[Hashable] | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """Stored records at ``threshold`` or above of each batch vector, compared exactly.

    Args:
        matrix: the batch's vectors, one a row.
        row: the reply of ``scan_sql.DEDUP_VECTORS``: the namespace's ``ids``,
            ``lessons``, ``vectors`` (pgvector's binary form, one after another) and
            ``triggers`` (``None`` when not asked for; asked for with ``keys``).
        threshold: the dedup threshold (only pairs at it can merge).
        most: how many neighbours a record keeps, most similar first.
        keys: per batch record, its ``dedup_veto.repeat_key``: a stored record with
            the same key is a neighbour at any similarity, kept beyond ``most``.
    """
    neighbours: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if not row["ids"]:  # an empty namespace
        return neighbours
    ids, lessons, dim = row["ids"], row["lessons"], matrix.shape[1]
    stored = np.frombuffer(row["vectors"], dtype=">f4").reshape(len(ids), dim + 1)
    stored = stored[:, 1:].astype(np.float32)  # without each vector's 4-byte header
    norms = np.linalg.norm(stored, axis=1)
    sims = (matrix @ stored.T) / np.where(norms == 0, 1.0, norms)
    triggers = row.get("triggers")
    for i, j in zip(*np.nonzero(sims >= threshold), strict=True):
        n = {"id": ids[j], "lesson": lessons[j], "similarity": float(sims[i, j])}
        if triggers is not None:
            n["trigger"] = triggers[j]
        neighbours[int(i)].append(n)
    for i, near in neighbours.items():
        neighbours[i] = sorted(near, key=lambda n: -n["similarity"])[:most]
    if keys is not None:
        stored_keys: dict[Hashable, list[int]] = defaultdict(list)
        for j, (lesson, trigger) in enumerate(zip(lessons, row["triggers"], strict=True)):
            stored_keys[repeat_key(lesson, trigger)].append(j)
        for i, key in enumerate(keys):
            seen = {n["id"] for n in neighbours.get(i, [])}
            for j in stored_keys.get(key, ()):
                if ids[j] not in seen:
                    n = {"id": ids[j], "lesson": lessons[j], "similarity": float(sims[i, j])}
                    neighbours[i].append({**n, "trigger": row["triggers"][j], "key": key})
    return neighbours


class PairCosines:
    """The cosines of pairs of batch records, from their vectors (``vectors``: by
    batch index), computed when asked (``cosines[i, j]``): :attr:`Planner.decide`
    asks only for the pairs the stored vectors linked, fewer than a square matrix of
    a large batch holds."""

    def __init__(self, vectors: Mapping[int, np.ndarray]) -> None:
        self._vectors = vectors
        self._rows: np.ndarray | None = None  # every vector, one a row (``at_least``)
        self._row_of = np.zeros(0, dtype=np.intp)  # batch index -> its row there
        self._block = (0, np.zeros((0, 0), dtype=np.float32))  # first row, its cosines

    def __getitem__(self, pair: tuple[int, int]) -> float:
        i, j = pair
        return float(self._vectors[i] @ self._vectors[j])

    def at_least(self, i: int, js: np.ndarray, floor: float) -> np.ndarray:
        """Which of the pairs ``(i, j)``, ``j`` in ``js``, have a cosine (as
        ``self[i, j]`` gives it) of ``floor`` or above.

        A matrix product screens them, :data:`SCREEN_ROWS` rows of cosines with every
        vector at a time (the planner asks in batch order, so each block serves its
        rows in turn); the few it keeps are computed again one by one, as its sums
        run in another order (a pair right at ``floor`` could land either side).
        """
        if self._rows is None:
            self._row_of = np.zeros(max(self._vectors) + 1, dtype=np.intp)
            self._row_of[list(self._vectors)] = np.arange(len(self._vectors))
            self._rows = np.stack(list(self._vectors.values()))
        row = int(self._row_of[i])
        lo, block = self._block
        if not lo <= row < lo + len(block):
            lo = row
            self._block = lo, self._rows[lo : lo + SCREEN_ROWS] @ self._rows.T
            block = self._block[1]
        near = block[row - lo, self._row_of[js]].astype(np.float64) >= floor - _SCREEN
        out = np.zeros(len(js), dtype=bool)
        out[near] = [self[i, j] >= floor for j in js[near].tolist()]
        return out


SCREEN_ROWS = 256
"""Rows of cosines :meth:`PairCosines.at_least` computes at a time (one product)."""
_SCREEN = 1e-4
"""How far below a floor a screened cosine is computed exactly (float32 sums of 384
unit-vector products in two orders differ by far less)."""
