"""Query terms too common to generate keyword candidates, cached per table.

Recall (experience records) and item search bound their keyword scan the same way:
terms that ANALYZE's statistics put in more rows than ``keyword_scan_limit``, or in
more than 2 % of the rows (``fulltext_sql.COMMON_TERM_SHARE``), do not generate
keyword candidates (they still count in the keyword score, with the namespace's own
document frequency where it is small enough to count: ``fulltext_sql.bm25_ctes``). The
set comes
from ``pg_stats`` (:func:`storage.fulltext_sql.common_terms_sql`) and is cached
for a minute, so a search costs no extra round trip most of the time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from types import MappingProxyType

from ..runtime.flow import Flow, Sql
from ..storage.fulltext_sql import common_terms_sql


class CommonTerms:
    """A minute-long cache of the common search terms of one table.

    Args:
        table: the table whose ``search_tsv`` column is ranked.
        ttl: seconds a fetched set stays valid.
    """

    def __init__(self, table: str, ttl: float = 60.0) -> None:
        self.table = table
        self.ttl = ttl
        self._lock = threading.Lock()
        # (fetched, limit, {term: share of rows})
        self._cached: tuple[float, int, Mapping[str, float]] | None = None

    def flow(self, limit: int, autocommit: bool = False) -> Flow[Mapping[str, float]]:
        """The terms estimated to occur in more than ``limit`` rows, each with the share
        of the table's rows that hold it (BM25 scales it to a namespace that is nearly
        the whole table, instead of counting)."""
        now = time.monotonic()
        cached = self._cached
        if cached is not None and cached[1] == limit and now - cached[0] < self.ttl:
            return cached[2]
        rows = yield from Sql(common_terms_sql(self.table), {"limit": limit}, autocommit=autocommit)
        terms = MappingProxyType({r["term"]: float(r["freq"]) for r in rows})
        with self._lock:
            self._cached = (now, limit, terms)
        return terms

    def clear(self) -> None:
        """Forget the cached set (the next search reads the statistics again)."""
        with self._lock:
            self._cached = None
