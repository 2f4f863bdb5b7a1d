"""Recall on a streaming read replica vs on the primary, and the cost of read-your-writes.

Run (about 2 minutes on 2 cores)::

    nice python bench/bench_replica.py                 # 10,000 records, 300 queries
    nice python bench/bench_replica.py --records 2000  # a quick look

A primary (the embedded PostgreSQL, in its own home ``/tmp/hindsight-bench-replica``)
and a hot standby copied from it with ``pg_basebackup`` and streaming over a unix
socket, both on this machine (``tests/_replica_util.Standby``). In one run, query by
query and alternating which goes first (ABBA):

- recall (``Memory.search``, precomputed query vectors) by a memory without replicas,
  and by one with ``HINDSIGHT_READ_DATABASE_URLS`` set to the standby;
- write-then-search (the search must see the write): on the primary alone, and with
  the replica, where the search waits for the standby to replay the write
  (read-your-writes) or falls back to the primary after ``read_your_writes_timeout``.

Reports p50/p95, the replica lag seen by the router's probes, how reads were routed,
and the replay delay each write-then-search waited for. Results: ``results/replica.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
import _common as c
from _replica_util import Standby, wait_for
from bench_recall import Workload

from hindsight_core import Memory, Settings
from hindsight_core.embeddings.callable import CallableEmbedder
from hindsight_core.memory.inputs import embedding_text
from hindsight_core.models import ExperienceIn
from hindsight_core.storage import embedded

RESULTS = Path(__file__).parent / "results"
HOME = Path("/tmp/hindsight-bench-replica")


def alternate(a: Any, b: Any, n: int) -> tuple[list[float], list[float]]:
    """Time ``a(i)`` and ``b(i)`` ``n`` times each, ABBA order; milliseconds."""
    out: tuple[list[float], list[float]] = ([], [])
    for i in range(n):
        for who in c.abba(i // 2)[(i % 2) * 2 : (i % 2) * 2 + 2]:
            fn = (a, b)[who]
            t0 = time.perf_counter()
            fn(i)
            out[who].append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--writes", type=int, default=200)
    args = ap.parse_args()
    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir(parents=True)
    HOME.chmod(0o755)
    url = embedded.embedded_url(HOME)
    work = Workload()
    emb = CallableEmbedder(work.lookup, dim=c.DIM, model_name=c.MODEL)
    ns = c.new_ns()
    # The load is set-up, not measured: no statement timeout (a shared, busy machine).
    loader = Memory(ns, settings=Settings(database_url=url, statement_timeout_ms=0), embedder=emb)
    stored = 0
    while stored < args.records:
        stored += len(loader.write_many(work.records(min(1000, args.records - stored))))
    # The steady state autovacuum keeps (see bench_recall.measure_scale): statistics
    # fresh, the GIN pending list merged; the standby copies it as it is.
    with loader.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE hindsight_experiences"))
    loader.close()
    standby = Standby(url)
    try:
        standby.create()
        standby.start()
        wait_for(standby.caught_up, "the standby to catch up", timeout=300)
        row = measure(url, standby, ns, work, emb, args)
    finally:
        standby.destroy()
        embedded.stop(HOME)
    row["machine"] = c.machine()
    print(json.dumps(row, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "replica.json").write_text(json.dumps(row, indent=1) + "\n")


def measure(
    url: str,
    standby: Standby,
    ns: tuple[str, str],
    work: Workload,
    emb: CallableEmbedder,
    args: argparse.Namespace,
) -> dict[str, Any]:
    primary = Memory(ns, settings=Settings(database_url=url), embedder=emb)
    replica = Memory(
        ns, settings=Settings(database_url=url, read_database_urls=standby.url), embedder=emb
    )
    texts = work.queries(args.queries)
    try:
        for mem in (primary, replica):  # set up, warm caches and connections
            for t in texts[:20]:
                mem.search(t)
        on_primary, on_replica = alternate(
            lambda i: primary.search(texts[i]), lambda i: replica.search(texts[i]), args.queries
        )
        recall_reads = replica.stats().reads
        # Write, then search for it at once (a new lesson each time).
        records = work.records(2 * args.writes)
        for i, rec in enumerate(records):  # a query that finds this record
            work.lookup.add(f"query {i}", work.lookup.table[embedding_text(ExperienceIn(**rec))])
        parts: dict[str, list[float]] = {
            k: [] for k in ("write_primary", "write_replica", "search_primary", "search_replica")
        }

        def write_search(mem: Memory, i: int) -> None:
            side = "replica" if mem is replica else "primary"
            t0 = time.perf_counter()
            rid = mem.write(records[i]).id
            t1 = time.perf_counter()
            hits = mem.search(f"query {i}", top_k=20)
            parts[f"write_{side}"].append((t1 - t0) * 1000)
            parts[f"search_{side}"].append((time.perf_counter() - t1) * 1000)
            if rid not in {h.record.id for h in hits}:
                raise AssertionError("a search after a write did not see it")

        p_ws, r_ws = alternate(
            lambda i: write_search(primary, 2 * i),
            lambda i: write_search(replica, 2 * i + 1),
            args.writes,
        )
        reads = replica.stats().reads
    finally:
        primary.close()
        replica.close()
    ryw = {
        k: reads[k] - recall_reads.get(k, 0)
        for k in ("replica", "primary", "waited", "skipped_lag")
    }
    return {
        "records": args.records,
        "recall_primary_ms": c.percentiles(on_primary),
        "recall_replica_ms": c.percentiles(on_replica),
        "recall_ratio_p50": round(
            c.percentiles(on_replica)["p50"] / c.percentiles(on_primary)["p50"], 3
        ),
        "recall_routing": recall_reads,
        "write_then_search_primary_ms": c.percentiles(p_ws),
        "write_then_search_replica_ms": c.percentiles(r_ws),
        **{
            f"{k}_after_write_ms" if k.startswith("search") else f"{k}_ms": c.percentiles(v)
            for k, v in parts.items()
        },
        "read_your_writes_routing": ryw,
        "max_replica_lag_seen_s": reads["max_lag_seconds"],
    }


if __name__ == "__main__":
    main()
