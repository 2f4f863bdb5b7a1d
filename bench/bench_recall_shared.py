"""Recall across several namespaces (sharing) vs recall in one, same rows, one run.

The same records are stored twice: once in one namespace, once split in thirds across
an agent's own namespace and two shared ones (``team/own``, ``team/a``, ``team/b``).
``search(namespaces=[own, a, b])`` (and ``namespaces=["team/*"]``, a prefix) then
ranks exactly the rows ``search(namespace=one)`` ranks, with the same statistics, so
the ratio is what reading several namespaces costs. Interleaved, the order rotating
per query, so that all three see the same load. Run (a minute or two on 2 cores)::

    python bench/bench_recall_shared.py            # --sizes 1000,10000
    python bench/bench_recall_shared.py --sizes 1000 --other 20000   # beside a big tenant

Results go to ``bench/results/recall_shared.json``; each row also says how often the
three searches returned the same top 5 (identical statistics and candidates: 1.0 on
an exact scan; the HNSW index may differ on a filtered walk).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
import _common as c  # noqa: E402
from bench_recall import TABLE, Workload  # noqa: E402

from hindsight_core import Memory, Settings  # noqa: E402
from hindsight_core.embeddings.callable import CallableEmbedder  # noqa: E402


def measure(
    mem: Memory, work: Workload, base: tuple[str, ...], size: int, n: int
) -> dict[str, Any]:
    """Latency of the three searches over ``size`` rows each, ``n`` queries."""
    with mem.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"VACUUM ANALYZE {TABLE}"))
    mem._common_terms.clear()
    mem._scan_choice.clear()
    one = (*base, "one")
    team = [(*base, "team", x) for x in ("own", "a", "b")]
    texts = work.queries(n)
    calls = {
        "single": lambda q: mem.search(q, namespace=one, top_k=5),
        "several": lambda q: mem.search(q, namespaces=team, top_k=5),
        "prefix": lambda q: mem.search(q, namespaces=[(*base, "team", "*")], top_k=5),
    }
    for i in range(20):  # warm every path (and the query cache: embedding is not timed)
        for call in calls.values():
            call(texts[i % len(texts)])
    for t in texts:
        calls["single"](t)
    times: dict[str, list[float]] = {k: [] for k in calls}
    same = 0
    order = list(calls)
    for i, text in enumerate(texts):
        got = {}
        for name in order[i % 3 :] + order[: i % 3]:
            with c.timer() as t:
                hits = calls[name](text)
            times[name].append(t[0] * 1000)
            got[name] = [(h.record.lesson, h.record.trigger) for h in hits]
        same += got["single"] == got["several"] == got["prefix"]
    p = {k: c.percentiles(v) for k, v in times.items()}
    return {
        "size": size,
        "single_ms": p["single"],
        "several_ms": p["several"],
        "prefix_ms": p["prefix"],
        "several_ratio_p50": round(p["several"]["p50"] / p["single"]["p50"], 2),
        "prefix_ratio_p50": round(p["prefix"]["p50"] / p["single"]["p50"], 2),
        "same_top5": round(same / len(texts), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument(
        "--other",
        type=int,
        default=0,
        help="first store this many records in another tenant's namespace (a table "
        "the searched namespaces are a small part of)",
    )
    args = ap.parse_args()
    work = Workload(seed=13)
    emb = CallableEmbedder(work.lookup, dim=c.DIM, model_name=c.MODEL)
    db_url, drop = c.fresh_database("hindsight_bench_recall_shared")
    base = c.new_ns()
    mem = Memory(base, settings=Settings(database_url=db_url), embedder=emb)
    rows: list[dict[str, Any]] = []
    stored = 0
    try:
        for start in range(0, args.other, 1998):
            mem.write_many(work.records(min(1998, args.other - start)), namespace=("other",))
        for size in (int(s) for s in args.sizes.split(",")):
            while stored < size:
                batch = work.records(min(1998, size - stored))
                mem.write_many(batch, namespace=(*base, "one"))
                for k, name in enumerate(("own", "a", "b")):
                    mem.write_many(batch[k::3], namespace=(*base, "team", name))
                stored += len(batch)
            row = {**measure(mem, work, base, size, args.queries), "other": args.other}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        mem.close()
        drop()
    out = Path(__file__).parent / "results" / "recall_shared.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"machine": c.machine(), "nice": os.nice(0), "scales": rows}, indent=2)
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
