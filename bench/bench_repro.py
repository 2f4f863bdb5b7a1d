"""Same data, same results: do fresh loads of LoCoMo dev rank alike, ANALYZE or not?

Run (the vectors are bench_locomo's cache; a load is ~10 s of writes)::

    nice python bench/bench_repro.py                      # 2 loads, semantic_scan auto
    nice python bench/bench_repro.py --scans auto,exact   # also pinned to the exact scan

Each load goes into a fresh database (``HindsightStore``, default ranking, the items of
bench_locomo.py) and is ranked before and after ``ANALYZE`` for every scan mode. Every
pair of (load, scan, analyzed) is compared by how many questions' top 10s differ, and
each ranking's R@5 / R@10 is printed with the scan each conversation took (the
index's approximation shows as ``auto`` against ``exact`` on one load).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common as c
import bench_locomo as lc

Ranking = list[list[str]]


def rank(url: str, data: list[lc.Conv], emb: lc.CachedEmbedder, scan: str) -> tuple[Ranking, Any]:
    """Every question's top 10 keys, and how many of each conversation's took which scan."""
    from hindsight_adapters.langgraph import HindsightStore
    from hindsight_core import Settings

    settings = Settings.model_validate({"database_url": url, "semantic_scan": scan})
    store = HindsightStore(url, index=lc.index_config(emb), settings=settings)
    out: Ranking = []
    scans: Counter[str] = Counter()
    for sid, _, qs in data:
        for q in qs:
            hits = store.search(("locomo", sid), query=q["question"], limit=10)
            out.append([h.key for h in hits])
            if hits:
                scans[f"{sid}:{hits[0].breakdown.scan}"] += 1
    store.memory.close()
    return out, dict(scans)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=2)
    ap.add_argument("--scans", default="auto", help="semantic_scan modes, comma-separated")
    args = ap.parse_args()
    from hindsight_adapters.langgraph import HindsightStore
    from hindsight_core import Settings

    data: list[lc.Conv] = []
    for conv in lc.conversations():
        ts = lc.turns(conv)
        data.append((conv["sample_id"], ts, lc.questions(conv, {t["dia_id"] for t in ts})))
    questions = [q for _, _, qs in data for q in qs]
    emb = lc.CachedEmbedder()
    runs: dict[tuple[int, str, str], Ranking] = {}
    for load in range(args.loads):
        url, drop = c.fresh_database(f"hindsight_bench_repro_{load}")
        try:
            loader = HindsightStore(
                url, index=lc.index_config(emb), settings=Settings(database_url=url)
            )
            loader.setup()
            lc.load_store(loader, data)
            loader.memory.close()
            for state in ("not analyzed", "analyzed"):
                if state == "analyzed":
                    c.analyze(url)
                for scan in args.scans.split(","):
                    ranked, scans = rank(url, data, emb, scan)
                    runs[(load, scan, state)] = ranked
                    figures = lc.score(list(zip(questions, ranked, strict=True)))
                    print(load + 1, scan, state, json.dumps(figures), scans, flush=True)
        finally:
            emb.save()
            drop()
    print("| compared | top-10s that differ |\n|---|---:|")
    for a, b in itertools.combinations(runs, 2):
        n = sum(x != y for x, y in zip(runs[a], runs[b], strict=True))
        pair = f"load {a[0] + 1} {a[1]} {a[2]} vs load {b[0] + 1} {b[1]} {b[2]}"
        print(f"| {pair} | {n} of {len(questions)} |")


if __name__ == "__main__":
    main()
