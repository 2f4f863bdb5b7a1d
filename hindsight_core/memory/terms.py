"""Query terms too common to generate keyword candidates, cached per table.

Recall (experience records) and item search bound their keyword scan the same way:
terms that ANALYZE's statistics put in more rows than ``keyword_scan_limit``, or in
more than 2 % of the rows (``fulltext_sql.COMMON_TERM_SHARE``), do not generate
keyword candidates (they still count in the keyword score). The set comes
from ``pg_stats`` (:func:`storage.fulltext_sql.common_terms_sql`) and is cached
for a minute, so a search costs no extra round trip most of the time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from ..storage.fulltext_sql import common_terms_sql
from .flow import Flow, Sql


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
        self._cached: tuple[float, int, frozenset[str]] | None = None  # (fetched, limit, terms)

    def flow(self, limit: int, autocommit: bool = False) -> Flow[frozenset[str]]:
        """The terms estimated to occur in more than ``limit`` rows."""
        now = time.monotonic()
        cached = self._cached
        if cached is not None and cached[1] == limit and now - cached[0] < self.ttl:
            return cached[2]
        rows = yield Sql(common_terms_sql(self.table), {"limit": limit}, autocommit=autocommit)
        terms = frozenset(r["term"] for r in rows)
        with self._lock:
            self._cached = (now, limit, terms)
        return terms

    def clear(self) -> None:
        """Forget the cached set (the next search reads the statistics again)."""
        with self._lock:
            self._cached = None

    def rare(self, terms: Sequence[str], limit: int, autocommit: bool = False
             ) -> Flow[list[str]]:
        """``terms`` minus the common ones (no round trip when ``terms`` is empty)."""
        if not terms:
            return []
        common = yield from self.flow(limit, autocommit)
        return [t for t in terms if t not in common]
