"""Review's "supersede": does it correct the lessons a run proved wrong, and only those?

14 runs made for it (``bench/data/versions_runs.json``; English and Chinese): a lesson
is written, recalled and followed, and the run then shows it wrong (a user's
correction; a failed, then fixed, tool call) or does not (controls: success, thanks,
an unrelated remark, a failure with no fix in it). Each run reviews
(``Reflector.review``: evidence, model or rules, screen, ``supersede``) in its own
namespace of a fresh database on the embedded server, rule-based and/or with any
OpenAI-compatible chat endpoint::

    python bench/bench_versions.py                                   # rule-based only
    python bench/bench_versions.py --base-url "$(cat /tmp/llm/addr)/v1" --model qwen05

Reported per reviewer: supersede precision and recall (a run whose lesson must be
corrected is a positive), the share of corrections that say what the run showed
(``mentions``), recall after review (the run's query finds the new version first and
never the old one), tokens and seconds per run. Results go to
``bench/results/versions_<reviewer>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

from hindsight_core import Memory, Settings
from hindsight_core.reflection import OpenAICompatibleLLM, Reflector, Trajectory

DATA = Path(__file__).parent / "data" / "versions_runs.json"
RESULTS = Path(__file__).parent / "results"
DB = "hindsight_bench_versions"


def review_run(
    memory: Memory, reflector: Reflector, run: dict[str, Any], name: str
) -> dict[str, Any]:
    ns = ("bench-versions", name, run["id"])
    old = memory.write(run["lesson"], namespace=ns).id
    trajectory = Trajectory(
        goal=run["goal"],
        scene=run["lesson"]["scene"],
        outcome=run["outcome"],
        steps=run["steps"],
        recalled=[old],
        used=[old],
    )
    t0 = time.perf_counter()
    result = reflector.review(trajectory, namespace=ns)
    seconds = time.perf_counter() - t0
    new = result.superseded.get(old)
    lesson = memory.get(new, namespace=ns).lesson if new else None
    hits = [h.record.id for h in memory.search(run["query"], namespace=ns, top_k=5)]
    want = run["expect"]
    return {
        "id": run["id"],
        "kind": run["kind"],
        "expected": want["supersede"],
        "superseded": new is not None,
        "lesson": lesson,
        "says_it": lesson is not None
        and any(m.lower() in lesson.lower() for m in want.get("mentions", [])),
        "recall_ok": (hits[:1] == [new] and old not in hits) if new else hits[:1] == [old],
        "source": memory.get(new, namespace=ns).source.get("distiller") if new else None,
        "errors": result.errors,
        "decisions": [f"{d.action}: {d.reason}" for d in result.decisions],
        "seconds": round(seconds, 3),
    }


def summarise(name: str, rows: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    tp = sum(r["expected"] and r["superseded"] for r in rows)
    fp = sum(not r["expected"] and r["superseded"] for r in rows)
    pos = sum(r["expected"] for r in rows)
    done = [r for r in rows if r["superseded"] and r["expected"]]
    return {
        "reviewer": name,
        "runs": len(rows),
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "recall": round(tp / pos, 3) if pos else None,
        "says_what_the_run_showed": round(sum(r["says_it"] for r in done) / len(done), 3)
        if done
        else None,
        "recall_after_review": round(sum(r["recall_ok"] for r in rows) / len(rows), 3),
        "by_model": sum(bool(r["source"]) and r["source"] != "rules" for r in rows),
        "tokens_per_run": round(tokens / len(rows), 1),
        "seconds_per_run": round(sum(r["seconds"] for r in rows) / len(rows), 3),
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", help="an OpenAI-compatible endpoint (llama.cpp, Ollama)")
    ap.add_argument("--model", help="the model name the endpoint knows")
    ap.add_argument("--api-key", default=os.environ.get("HINDSIGHT_LLM_API_KEY"))
    ap.add_argument("--timeout", type=float, default=180, help="seconds per model call")
    ap.add_argument("--no-rule-based", action="store_true", help="skip the rule-based reviewer")
    args = ap.parse_args()
    if bool(args.base_url) != bool(args.model):
        ap.error("--base-url and --model go together")
    runs = json.loads(DATA.read_text("utf-8"))["runs"]
    url, drop = c.fresh_database(DB)
    memory = Memory(("bench-versions",), settings=Settings(database_url=url))
    memory.setup()
    memory.embedder.embed_documents(["warm up"])
    reviewers: list[tuple[str, Any]] = [] if args.no_rule_based else [("rule-based", None)]
    if args.base_url:
        llm = OpenAICompatibleLLM(
            args.base_url, args.model, api_key=args.api_key, timeout=args.timeout
        )
        reviewers.append((f"llm:{args.model}", llm))
    results = []
    try:
        for name, llm in reviewers:
            print(f"{name}:")
            reflector = Reflector(memory, llm)
            before = memory.stats().llm_prompt_tokens + memory.stats().llm_completion_tokens
            rows = []
            for run in runs:
                row = review_run(memory, reflector, run, name)
                rows.append(row)
                print(
                    f"  {row['id']:<24} {'superseded' if row['superseded'] else 'kept':<10} "
                    f"{row['seconds']:6.2f} s  {row['lesson'] or ''}",
                    flush=True,
                )
            after = memory.stats().llm_prompt_tokens + memory.stats().llm_completion_tokens
            results.append(summarise(name, rows, after - before))
    finally:
        memory.close()
        drop()
    RESULTS.mkdir(exist_ok=True)
    print()
    head = "reviewer | precision | recall | says what the run showed | recall after review"
    print(f"| {head} | tokens/run | s/run |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        slug = r["reviewer"].replace(":", "_").replace("/", "_")
        (RESULTS / f"versions_{slug}.json").write_text(
            json.dumps({"machine": c.machine(), **r}, ensure_ascii=False, indent=1) + "\n"
        )
        print(
            f"| {r['reviewer']} | {r['precision']} | {r['recall']} | "
            f"{r['says_what_the_run_showed']} | {r['recall_after_review']} | "
            f"{r['tokens_per_run']} | {r['seconds_per_run']} |"
        )


if __name__ == "__main__":
    main()
