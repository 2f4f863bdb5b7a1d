"""Same data, same queries, same results: two fresh loads rank alike, ANALYZE or not.

Three loads of the same LoCoMo conversations gave R@5 .448 / .463 / .478: a prefix was
ranked exactly or through the HNSW index (whose graph differs from build to build)
depending on ``pg_class.reltuples``, which (auto)analyze sets; and the keyword
candidates left out the terms ANALYZE's statistics called common.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from langgraph.store.base import PutOp

from hindsight_adapters.langgraph import HindsightStore
from hindsight_core import Settings
from tests._lg_store_util import DIMS, char_embed

WORDS = (
    "deploy rollback billing invoice cache token retry queue schema index backup "
    "restore alert pager budget quota latency replica shard vacuum"
).split()
# (prefix, items): a prefix far under a fifth of the table, one over it, one tiny
SIZES = ((("t", "big"), 700), (("t", "mid"), 150), (("t", "small"), 30))
QUERIES = [
    "billing invoice retry",
    "deploy rollback",
    "vacuum replica shard latency",
    "cache token",
    "restore backup alert",
    "queue",
    "quota budget pager",
    "schema index",
]
PREFIXES = [p for p, _ in SIZES] + [("t",)]


def _ops() -> list[PutOp]:
    rng = random.Random(7)
    ops = []
    for prefix, n in SIZES:
        for i in range(n):
            text = " ".join(rng.choices(WORDS, k=rng.randint(2, 7)))
            ops.append(PutOp(prefix, f"k{i:04d}", {"text": text}))
    return ops


@pytest.fixture
def two_dbs(database_url: str) -> Iterator[list[str]]:
    """Two new, empty databases on the session's server; dropped afterwards."""
    names = ["t_" + uuid.uuid4().hex[:10] for _ in range(2)]
    admin = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for name in names:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base = sa.make_url(database_url)
    yield [base.set(database=n).render_as_string(hide_password=False) for n in names]
    with admin.connect() as conn:
        for name in names:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _store(url: str, hub: float | None = None) -> HindsightStore:
    index = {"dims": DIMS, "embed": char_embed, "fields": ["text"]}
    settings = Settings(database_url=url, embedding_hub_correction=hub)
    return HindsightStore(url, index=index, settings=settings)


def _top10s(url: str, hub: float | None = None) -> tuple[list[Any], list[float]]:
    """Every query's top 10 under every prefix: keys and how they were found, and the
    scores. A new store each time: nothing cached from an earlier search."""
    store = _store(url, hub)
    ranked: list[Any] = []
    scores: list[float] = []
    try:
        for prefix in PREFIXES:
            for q in QUERIES:
                hits = store.search(prefix, query=q, limit=10)
                ranked.append([(h.key, h.breakdown.scan) for h in hits])
                scores += [h.score or 0.0 for h in hits]
    finally:
        store.close()
    return ranked, scores


def _same(a: tuple[list[Any], list[float]], b: tuple[list[Any], list[float]]) -> None:
    assert a[0] == b[0]
    # recency decay moves every score by ~1e-8 per second between load and search
    assert a[1] == pytest.approx(b[1], abs=1e-6)


# 0.75: the hub correction (an e5 model's) on, its mean taken over the prefix's first
# fields, from their sums (items_search_sql.SUMS, migration 0013).
@pytest.mark.parametrize("hub", [None, 0.75])
def test_two_fresh_loads_rank_alike_with_or_without_analyze(
    two_dbs: list[str], hub: float | None
) -> None:
    for url in two_dbs:
        store = _store(url)
        store.setup()
        ops = _ops()
        for i in range(0, len(ops), 100):  # the same records, in the same order
            store.batch(ops[i : i + 100])
        store.close()
    first, second = (_top10s(url, hub) for url in two_dbs)
    _same(first, second)
    engine = sa.create_engine(two_dbs[0], isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE"))  # one of them only: autovacuum's timing
        common = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_stats, unnest(most_common_elem_freqs) f "
                "WHERE tablename = 'hindsight_item_vectors' AND attname = 'search_tsv' "
                "AND f > 0.02"
            )
        ).scalar()
    engine.dispose()
    assert common  # the statistics now call terms common
    _same(_top10s(two_dbs[0], hub), second)
    # every prefix here is small enough to be ranked exactly, the whole table included
    assert {scan for rows in second[0] for _, scan in rows} == {"exact"}
