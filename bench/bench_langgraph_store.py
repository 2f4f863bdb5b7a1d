"""HindsightStore vs LangGraph's PostgresStore on the same PostgreSQL, one run.

Both stores get the same index configuration (384 dims, cosine, HNSW, field "text")
and the same vectors: a precomputed table (random unit vectors per text), so the
embedding model does not dominate. Each store is preloaded with the same items
(``--items`` across 20 namespaces), then timed on: ``put`` (one embedded item),
``get``, ``search`` with a query (PostgresStore's ranking vs ours in ``vector`` and
``hybrid`` mode), ``search`` with a filter and no query, and ``list_namespaces``.
Each round runs every operation in four quarters, PostgresStore and ours in the order
A B B A (B A A B in the next round), so that machine load and the order of back-to-back
runs hit both alike; ops/s are medians over rounds and the ratio is the median of the
per-round ratios (the runs of a round are close in time, so load drift cancels).

Usage::

    python bench/bench_langgraph_store.py [--rounds 5] [--ops 200] [--items 2000]

Uses ``HINDSIGHT_DATABASE_URL`` if set, else the embedded PostgreSQL under /tmp.
Prints ops/s and the ratio ``hindsight time / postgres time`` (≤ 1.0: ours is no
slower) and writes ``bench/results/langgraph_store.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import abba, fresh_database, write_results

DIMS = 384
WORDS = (
    "apple",
    "billing",
    "cache",
    "deploy",
    "email",
    "file",
    "git",
    "host",
    "invoice",
    "json",
    "key",
    "log",
    "mail",
    "node",
    "order",
    "page",
    "queue",
    "retry",
    "secret",
    "token",
    "upload",
    "vector",
    "webhook",
    "yaml",
    "zone",
)


class Table:
    """Deterministic unit vector per text, computed once and cached (cheap)."""

    def __init__(self) -> None:
        self.cache: dict[str, list[float]] = {}

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for t in texts:
            v = self.cache.get(t)
            if v is None:
                rng = np.random.default_rng(zlib.crc32(t.encode()))
                a = rng.standard_normal(DIMS)
                v = self.cache[t] = (a / np.linalg.norm(a)).tolist()
            out.append(v)
        return out


def text(i: int) -> str:
    return " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7)) + f" item {i}"


def preload(store: Any, n: int) -> None:
    from langgraph.store.base import PutOp

    ops = [
        PutOp(
            ("bench", f"user{i % 20}"),
            f"k{i}",
            {"text": text(i), "n": i % 100, "kind": "note" if i % 3 else "todo"},
        )
        for i in range(n)
    ]
    for start in range(0, n, 500):
        store.batch(ops[start : start + 500])


def vacuum_analyze(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def workload(store: Any, op: str, n: int, round_: int) -> tuple[float, float]:
    """Wall and client-CPU seconds for ``n`` calls of ``op``."""
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        ns = ("bench", f"user{i % 20}")
        if op == "put":
            store.put(ns, f"new{round_}_{i}", {"text": text(i + 7), "n": i % 100})
        elif op == "get":
            store.get(ns, f"k{(i * 20 + i % 20) % 2000}")
        elif op.startswith("search_q"):
            store.search(("bench",), query=text(i % 50), limit=10)
        elif op == "search_filter":
            store.search(ns, filter={"kind": "todo", "n": {"$gte": 50}}, limit=10)
        elif op == "list_ns":
            store.list_namespaces(prefix=("bench",), limit=50)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--items", type=int, default=2000)
    args = ap.parse_args()

    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.base import PostgresIndexConfig

    from hindsight_adapters.langgraph import HindsightStore
    from hindsight_core import Settings

    drop = None
    url = os.environ.get("HINDSIGHT_DATABASE_URL")
    if url is None:
        url, drop = fresh_database("bench_lg_store")
    embed = Table()
    index: PostgresIndexConfig = {
        "dims": DIMS,
        "embed": embed,
        "fields": ["text"],
        "distance_type": "cosine",
    }
    pg = url.replace("postgresql+psycopg://", "postgresql://", 1)
    settings = Settings(database_url=url)
    try:
        with (
            PostgresStore.from_conn_string(pg, index=index) as theirs,
            HindsightStore.from_conn_string(
                url, index=index, ranking="vector", settings=settings
            ) as ours_vec,
            HindsightStore.from_conn_string(
                url, index=index, ranking="hybrid", settings=settings
            ) as ours_hyb,
        ):
            theirs.setup()
            ours_vec.setup()
            preload(theirs, args.items)
            preload(ours_vec, args.items)
            # The steady state autovacuum keeps, for both stores (as bench_recall.py):
            # fresh statistics and a merged GIN pending list. Right after the bulk load
            # autovacuum ran at some moment of the measured rounds, which moment
            # depending on the machine's load.
            vacuum_analyze(pg)
            for s in (theirs, ours_vec, ours_hyb):  # warm up pools and caches
                for op in ("put", "get", "search_q", "search_filter", "list_ns"):
                    workload(s, op, 10, -1)
            plan = [
                ("put", theirs, ours_vec),
                ("get", theirs, ours_vec),
                ("search_q_vector", theirs, ours_vec),
                ("search_q_hybrid", theirs, ours_hyb),
                ("search_filter", theirs, ours_vec),
                ("list_ns", theirs, ours_vec),
            ]
            times: dict[str, dict[str, list[tuple[float, float]]]] = {
                op: {"postgres": [], "hindsight": []} for op, _, _ in plan
            }
            half = max(1, args.ops // 2)  # ops per quarter
            for r in range(args.rounds):
                for op, a, b in plan:
                    pair = (("postgres", a), ("hindsight", b))
                    quarters = [
                        (pair[who][0], workload(pair[who][1], op, half, 4 * r + q))
                        for q, who in enumerate(abba(r))
                    ]
                    for name, _ in pair:  # a round's figure: both quarters of a store
                        mine = [t for n, t in quarters if n == name]
                        times[op][name].append((sum(w for w, _ in mine), sum(c for _, c in mine)))
    finally:
        if drop is not None:
            drop()

    rows = []
    print(
        f"{'operation':<18}{'PostgresStore ops/s':>21}{'HindsightStore ops/s':>22}"
        f"{'ratio (paired)':>16}{'client CPU us/op (PG / ours)':>31}"
    )
    for op, t in times.items():
        tp = statistics.median(w for w, _ in t["postgres"])
        th = statistics.median(w for w, _ in t["hindsight"])
        cp = statistics.median(c for _, c in t["postgres"]) / (2 * half) * 1e6
        ch = statistics.median(c for _, c in t["hindsight"]) / (2 * half) * 1e6
        # The runs of a round are close in time: their ratio cancels load drift.
        paired = [h / p for (h, _), (p, _) in zip(t["hindsight"], t["postgres"], strict=True)]
        row = {
            "op": op,
            "postgres_ops_s": round(2 * half / tp, 1),
            "hindsight_ops_s": round(2 * half / th, 1),
            "ratio": round(statistics.median(paired), 3),
            "ratio_of_medians": round(th / tp, 3),
            "ratio_rounds": [round(x, 3) for x in paired],
            "cpu_us_postgres": round(cp),
            "cpu_us_hindsight": round(ch),
        }
        rows.append(row)
        print(
            f"{op:<18}{row['postgres_ops_s']:>21}{row['hindsight_ops_s']:>22}"
            f"{row['ratio']:>16}{round(cp):>19} / {round(ch)}"
        )
    write_results("langgraph_store", args, rows)


if __name__ == "__main__":
    main()
