"""HindsightStore vs AsyncPostgresStore under LangGraph's ``test_large_batches_async``.

The shape of LangGraph's own store test: ``M * N`` rounds of six coroutines (``aput``,
``aget``, ``alist_namespaces(max_depth=m + 1)``, ``asearch(("test",))``, ``aput``,
``adelete``) all started at once through one ``asyncio.gather`` (60,000 coroutines
with the test's N = 1000, M = 10), on stores without a vector index. Each round runs
both stores in the order A B B A (B A A B in the next one); the ratio is the median of
the per-round ratios ``hindsight time / postgres time`` (target ≤ 1.0).

Usage::

    python bench/bench_store_async_batches.py [--rounds 3] [--n 1000] [--m 10]

Uses ``HINDSIGHT_DATABASE_URL`` if set, else the embedded PostgreSQL under /tmp.
Writes ``bench/results/store_async_batches.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import abba, fresh_database, write_results


def coroutines(store: Any, n: int, m_count: int) -> list[Any]:
    """LangGraph's ``test_large_batches_async`` coroutines, in its order."""
    coros = []
    for m in range(m_count):
        ns = ("test", "foo", "bar", "baz", str(m % 2))
        for i in range(n):
            coros += [
                store.aput(ns, f"key{i}", value={"foo": "bar" + str(i)}),
                store.aget(ns, f"key{i}"),
                store.alist_namespaces(prefix=None, max_depth=m + 1),
                store.asearch(("test",)),
                store.aput(ns, f"key{i}", value={"foo": "bar" + str(i)}),
                store.adelete(ns, f"key{i}"),
            ]
    return coros


async def run_once(store: Any, n: int, m: int) -> tuple[float, float]:
    """Wall and client-CPU seconds of one gather."""
    coros = coroutines(store, n, m)
    t0, c0 = time.perf_counter(), time.process_time()
    results = await asyncio.gather(*coros)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(results) == n * m * 6
    return elapsed, cpu


async def amain(args: argparse.Namespace) -> list[dict[str, Any]]:
    from langgraph.store.postgres import AsyncPostgresStore

    from hindsight_adapters.langgraph import HindsightStore
    from hindsight_core import Settings

    drop = None
    url = os.environ.get("HINDSIGHT_DATABASE_URL")
    if url is None:
        url, drop = fresh_database("bench_store_batches")
    pg = url.replace("postgresql+psycopg://", "postgresql://", 1)
    times: dict[str, list[float]] = {"postgres": [], "hindsight": []}
    cpus: dict[str, list[float]] = {"postgres": [], "hindsight": []}
    try:
        async with (
            AsyncPostgresStore.from_conn_string(pg) as theirs,
            HindsightStore.afrom_conn_string(url, settings=Settings(database_url=url)) as ours,
        ):
            await theirs.setup()
            await ours.asetup()
            stores = (("postgres", theirs), ("hindsight", ours))
            for _, s in stores:  # warm up pools and caches
                await run_once(s, 20, 2)
            for r in range(args.rounds):
                runs: dict[str, float] = {"postgres": 0.0, "hindsight": 0.0}
                cpu: dict[str, float] = {"postgres": 0.0, "hindsight": 0.0}
                for who in abba(r):
                    name, store = stores[who]
                    wall, used = await run_once(store, args.n // 2, args.m)
                    runs[name] += wall
                    cpu[name] += used
                for name, t in runs.items():
                    times[name].append(t)
                    cpus[name].append(cpu[name])
                print(
                    f"round {r}: postgres {runs['postgres']:.2f} s "
                    f"(client CPU {cpu['postgres']:.2f}), hindsight {runs['hindsight']:.2f} s "
                    f"(client CPU {cpu['hindsight']:.2f})",
                    flush=True,
                )
    finally:
        if drop is not None:
            drop()
    paired = [h / p for h, p in zip(times["hindsight"], times["postgres"], strict=True)]
    return [
        {
            "shape": f"N={args.n} M={args.m} ({args.n * args.m * 6} coroutines per store "
            "per round, as two halves)",
            "postgres_s": round(statistics.median(times["postgres"]), 2),
            "hindsight_s": round(statistics.median(times["hindsight"]), 2),
            "ratio": round(statistics.median(paired), 3),
            "ratio_rounds": [round(x, 3) for x in paired],
            "client_cpu_s_postgres": round(statistics.median(cpus["postgres"]), 2),
            "client_cpu_s_hindsight": round(statistics.median(cpus["hindsight"]), 2),
        }
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--m", type=int, default=10)
    args = ap.parse_args()
    rows = asyncio.run(amain(args))
    for row in rows:
        print(
            f"{row['shape']}: AsyncPostgresStore {row['postgres_s']} s, HindsightStore "
            f"{row['hindsight_s']} s, ratio {row['ratio']} (target <= 1.0); client CPU "
            f"{row['client_cpu_s_postgres']} / {row['client_cpu_s_hindsight']} s"
        )
    write_results("store_async_batches", args, rows)


if __name__ == "__main__":
    main()
