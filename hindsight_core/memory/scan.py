"""How a search finds semantic candidates in a namespace: exact scan or ANN index.

A namespace of at most 2,000 rows is ranked exactly (``storage.scan_sql`` decides with
a bounded count of its rows, so that the same data gets the same answer); everything
else goes through the HNSW index. The answer is cached per namespace (and scene) for a minute:
counting up to 2,000 rows on every search would cost more than some searches, and with the
answer known
the search statement needs no branch on it. A namespace that grows or shrinks past
the bound is decided again within the minute: until then it is scanned exactly a
little longer (a bounded cost), or through the index (pgvector's iterative scan
still fills the candidates).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import sqlalchemy as sa

from ..runtime.flow import Flow, Sql

MAX_ENTRIES = 4096


class ScanChoice:
    """A minute-long cache of exact-or-index answers, by namespace key."""

    def __init__(self, ttl: float = 60.0) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._cached: OrderedDict[Hashable, tuple[float, bool]] = OrderedDict()

    def flow(
        self,
        key: Hashable,
        stmt: sa.TextClause,
        params: dict[str, Any],
        autocommit: bool = False,
        mode: str = "auto",
    ) -> Flow[bool]:
        """Whether the namespace ``key`` stands for should be scanned exactly; ``stmt``
        (one row, ``exact``) with ``params`` answers when the cache does not. ``mode``
        (``HINDSIGHT_SEMANTIC_SCAN``): ``exact`` or ``index`` decide without asking."""
        if mode != "auto":
            return mode == "exact"
        now = time.monotonic()
        with self._lock:
            hit = self._cached.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        rows = yield from Sql(stmt, params, autocommit=autocommit)
        exact = bool(rows[0]["exact"])
        with self._lock:
            self._cached[key] = (now, exact)
            self._cached.move_to_end(key)
            while len(self._cached) > MAX_ENTRIES:
                self._cached.popitem(last=False)
        return exact

    def clear(self) -> None:
        """Forget every answer (after a bulk load, say)."""
        with self._lock:
            self._cached.clear()
