"""How recall finds semantic candidates in a namespace: exact scan or HNSW index.

A small namespace in a large table is ranked exactly (``experiences_sql.exact_scan_sql``
decides with a bounded count); everything else goes through the HNSW index. The
answer is cached per namespace and scene for a minute, so recall runs one of two
fixed-shape statements and PostgreSQL can keep a generic plan for each instead of
planning every call. A namespace that grows or shrinks past the bound is decided
again within the minute: until then it is scanned exactly a little longer (a bounded
cost), or through the index (pgvector's iterative scan still fills the candidates).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from ..storage import experiences_sql as q
from .flow import Flow, Sql

MAX_ENTRIES = 4096


class ScanChoice:
    """A minute-long cache of :func:`experiences_sql.exact_scan_sql` answers."""

    def __init__(self, ttl: float = 60.0) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._cached: OrderedDict[tuple[str, str | None], tuple[float, bool]] = OrderedDict()

    def flow(self, ns: str, scene: str | None, autocommit: bool = False) -> Flow[bool]:
        """Whether ``ns`` (and ``scene``) should be scanned exactly."""
        key = (ns, scene)
        now = time.monotonic()
        with self._lock:
            hit = self._cached.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        rows = yield Sql(q.exact_scan_sql(scene is not None), {"ns": ns, "scene": scene},
                         autocommit=autocommit)
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
