"""Whether the items' ANN indexes fit their data, and rebuilding those that do not.

pgvector's ivfflat index picks its list centers (k-means) from the rows present when
it is built. :class:`Items` builds its index at setup, usually on an empty table
(LangGraph's ``PostgresStore`` does the same), so the centers are random and stay so
as the table fills: searches through the index then miss near vectors, until a
``REINDEX``. HNSW indexes grow with their data and need none of this.

How many vectors an index was built on is recorded when Hindsight builds or rebuilds
it; an ivfflat index is *stale* once the table holds at least its ``lists`` vectors of
its dimension and more than :data:`STALE_GROWTH` times what it was built on (or, built
before this was recorded, at least ``lists``). ``Items.setup()`` logs a warning for a
stale index (from the planner's row estimate), ``hindsight db status`` shows each
index, and ``Items.rebuild_indexes()`` / ``hindsight reindex`` rebuild the stale ones.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from ..runtime.flow import Flow, Sql
from ..storage import experiences_sql as eq
from ..storage import items_sql as q
from ..storage.engine import NO_TIMEOUT, SET_LOCAL_TIMEOUT

log = logging.getLogger("hindsight.items")

STALE_GROWTH = 4
"""An ivfflat index is stale once its dimension's vectors outnumber its build by this."""
DEFAULT_LISTS = 100  # pgvector's default ``lists``


@dataclass(frozen=True)
class IndexHealth:
    """One ANN index of item vectors.

    Attributes:
        name: the index's name (``hindsight_item_vectors_<type>_<kind>_<distance>_<dims>``).
        kind: ``hnsw`` or ``ivfflat``.
        dims: the vector dimension it indexes.
        lists: ivfflat's number of lists (None for hnsw).
        rows: vectors of its dimension now (an estimate when logged at setup).
        built_rows: vectors it was built on; None when not recorded (built before
            Hindsight recorded it, or by hand).
        built_at: when it was built or rebuilt (ISO 8601), if recorded.
    """

    name: str
    kind: str
    dims: int
    lists: int | None
    rows: int
    built_rows: int | None
    built_at: str | None

    @property
    def stale(self) -> bool:
        """Whether an ivfflat index's lists were trained on far fewer rows than it holds."""
        if self.kind != "ivfflat" or self.rows < (self.lists or DEFAULT_LISTS):
            return False
        return self.built_rows is None or self.rows > STALE_GROWTH * self.built_rows

    def advice(self) -> str | None:
        """What to do about a stale index, in one sentence; None when it is fine."""
        if not self.stale:
            return None
        built = (
            "was built before Hindsight recorded its size"
            if self.built_rows is None
            else f"was built on {self.built_rows} vectors"
        )
        return (
            f"the ivfflat index {self.name} {built} and now holds about {self.rows}: its "
            "list centers do not fit the data, so searches through it miss near items; "
            "rebuild it with `hindsight reindex` (or `Items.rebuild_indexes()`)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "stale": self.stale}


def _lists(options: list[str] | None) -> int | None:
    for opt in options or ():
        name, _, value = opt.partition("=")
        if name == "lists":
            return int(value)
    return None


def _health(row: dict[str, Any], rows: int) -> IndexHealth:
    built = row["built"] or {}
    ivf = row["kind"] == "ivfflat"
    return IndexHealth(
        name=row["name"],
        kind=row["kind"],
        dims=q.index_dims(row["name"]),
        lists=(_lists(row["options"]) or DEFAULT_LISTS) if ivf else None,
        rows=rows,
        built_rows=built.get("rows"),
        built_at=built.get("at"),
    )


def health_flow() -> Flow[list[IndexHealth]]:
    """Every ANN index of item vectors, with exact row counts (one scan of the vectors)."""
    indexes = yield from Sql(q.ANN_INDEXES)
    if not indexes:
        return []
    counts = yield from Sql(q.ROWS_BY_DIMS)
    per_dims = {int(r["dims"]): int(r["n"]) for r in counts}
    return [_health(r, per_dims.get(q.index_dims(r["name"]), 0)) for r in indexes]


def record_build_flow(name: str, now: datetime) -> Flow[int]:
    """Record how many vectors the index ``name`` was (re)built on now; that count."""
    (row,) = yield from Sql(q.count_rows_sql(q.index_dims(name)))
    rows = int(row["n"])
    value = json.dumps({"rows": rows, "at": now.isoformat()})
    yield Sql(eq.SET_META, {"key": q.BUILT_KEY + name, "value": value}, fetch="none")
    return rows


def warn_if_stale_flow(name: str) -> Flow[None]:
    """Log a warning when the ivfflat index ``name`` is stale, judged on the planner's
    row estimate of the vectors table (cheap enough for every setup)."""
    indexes = yield from Sql(q.ANN_INDEXES)
    (est,) = yield from Sql(q.ROWS_ESTIMATE)
    for row in indexes:
        if row["name"] == name:
            advice = _health(row, max(int(est["n"]), 0)).advice()
            if advice is not None:
                log.warning("%s", advice)


def rebuild_flow(now: datetime, force: bool = False) -> Flow[list[IndexHealth]]:
    """Rebuild the stale ivfflat indexes of item vectors (``force``: every ANN index),
    each recorded with the rows it was built on; returns the rebuilt ones, as rebuilt.

    In one transaction: item writes, and searches through an index being rebuilt,
    wait until it is done (seconds for 100,000 vectors)."""
    rebuilt: list[IndexHealth] = []
    for health in (yield from health_flow()):
        if not (force or health.stale):
            continue
        if not rebuilt:
            yield Sql(SET_LOCAL_TIMEOUT, NO_TIMEOUT)  # the build takes as long as the data needs
        yield Sql(q.reindex_sql(health.name), fetch="none")
        rows = yield from record_build_flow(health.name, now)
        rebuilt.append(
            IndexHealth(
                health.name, health.kind, health.dims, health.lists, rows, rows, now.isoformat()
            )
        )
    return rebuilt
