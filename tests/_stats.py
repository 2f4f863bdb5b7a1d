"""Fresh planner statistics for a table, so that a test's searches all see the same.

Keyword scores take a common term's document frequency from ANALYZE's statistics
(``fulltext_sql.common_terms_sql``), so an autovacuum ANALYZE of the session's shared
database between two searches of a test changed their scores (measured: a hit's
keyword 0.0015 before, 0.0030 after). Analyzed once after the test's writes, the table
has nothing left for autovacuum to do, and a second ANALYZE of unchanged rows (all of
them sampled below 30,000) finds the same statistics.
"""

from __future__ import annotations

import sqlalchemy as sa


def analyze(url: str, table: str) -> None:
    """ANALYZE ``table`` in the database at ``url``."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f"ANALYZE {table}"))
    finally:
        engine.dispose()
