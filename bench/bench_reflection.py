"""Reflection quality: does the distiller write grounded lessons, and nothing when there
is nothing to learn?

40 hand-written runs (``bench/data/reflection_trajectories.json``; English and
Chinese; failures fixed by a later call, user corrections, runs with nothing to
learn, long noisy runs), each with what a good answer contains: the facts a lesson
must mention, or "none". Every run goes through the whole path (``Reflector.reflect``:
prompt, model, parser, screen, write) into its own namespace of a fresh database on
the embedded server, against the rule-based distiller and/or any OpenAI-compatible
chat endpoint::

    python bench/bench_reflection.py                         # rule-based only
    python bench/bench_reflection.py --base-url http://127.0.0.1:8080/v1 --model qwen2.5-1.5b
    python bench/bench_reflection.py --base-url ... --model ... --no-rule-based --only zh-
    python bench/bench_reflection.py --replay good --replay bad    # the screen, offline

``--replay`` answers from the hand-written model answers in the data file: ``good``
(a grounded lesson citing its steps, for each run with something to learn) shows
what the screen lets through, ``bad`` (what small models answered: confident
lessons for runs with nothing to learn, the old prompt's example lesson, the
opposite of the run) what it stops.

Reported per distiller: lessons written per run; share grounded (a written lesson
mentions a fact its run calls for); facts covered; copies of prompt text among the
written lessons (must be 0) and among the model's proposals; "nothing new" precision
and recall (a run with no lesson written is a positive); length and language
compliance of what was written, and how often a lesson was sent back for them;
why candidates were dropped; tokens and seconds per run. Results go to
``bench/results/reflection_<distiller>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from collections import Counter
from itertools import zip_longest
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

from hindsight_core import Memory, Settings
from hindsight_core.reflection import (
    LLMResponse,
    OpenAICompatibleLLM,
    Reflector,
    Trajectory,
)
from hindsight_core.reflection.check import restates
from hindsight_core.reflection.distiller import distill_messages
from hindsight_core.reflection.evidence import is_chinese
from hindsight_core.reflection.screen import (
    copies_prompt,
    language_problem,
    prompt_fragments,
)

DATA = Path(__file__).parent / "data" / "reflection_trajectories.json"
HARD = Path(__file__).parent / "data" / "reflection_hard.json"
RESULTS = Path(__file__).parent / "results"
DB = "hindsight_bench_reflection"


class CountingLLM:
    """Passes calls to a model and adds up the tokens it reports."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.model_name = llm.model_name
        self.prompt_tokens = self.completion_tokens = self.calls = 0

    def _count(self, reply: LLMResponse) -> LLMResponse:
        self.calls += 1
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        return reply

    def complete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        return self._count(self.llm.complete(messages, json_schema=json_schema))

    async def acomplete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        return self._count(await self.llm.acomplete(messages, json_schema=json_schema))


class ReplayLLM:
    """Answers each run with its hand-written ``answers[kind]``: for "Evidence i of n",
    the i-th answer (the same again when asked again; none: an empty answer)."""

    def __init__(self, runs: list[dict[str, Any]], kind: str) -> None:
        self.model_name = f"replay-{kind}"
        self.answers = {r["id"]: r.get("answers", {}).get(kind, []) for r in runs}
        self.run = ""

    def complete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        m = re.match(r"Evidence (\d+) of", messages[-1]["content"])
        answers = self.answers[self.run]
        i = int(m.group(1)) - 1 if m else 0
        answer = answers[i] if i < len(answers) else {}
        return LLMResponse(text=json.dumps(answer, ensure_ascii=False), model=self.model_name)

    async def acomplete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        return self.complete(messages, json_schema=json_schema)


def mentions(lesson: str, alternatives: list[str]) -> bool:
    low = lesson.lower()
    return any(a.lower() in low for a in alternatives)


def score_run(run: dict[str, Any], lessons: list[str]) -> dict[str, Any]:
    """How a run's written lessons compare with what a good answer contains."""
    expect = run["expect"]
    if expect == "none":
        return {"expected_none": True, "grounded": 0, "facts": 0, "covered": 0, "opposite": 0}
    facts = expect["facts"]
    against = run.get("against", [])
    return {
        "expected_none": False,
        "opposite": sum(
            mentions(le, against) and not any(mentions(le, f) for f in facts) for le in lessons
        ),
        "grounded": sum(any(mentions(le, f) for f in facts) for le in lessons),
        "facts": len(facts),
        "covered": sum(any(mentions(le, f) for le in lessons) for f in facts),
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def bench(
    name: str,
    runs: list[dict[str, Any]],
    memory: Memory,
    llm: CountingLLM | None,
    verbose: bool = False,
) -> dict[str, Any]:
    settings = memory.settings
    reflector = Reflector(memory, llm)
    rows: list[dict[str, Any]] = []
    for run in runs:
        trajectory = Trajectory.model_validate(run["trajectory"])
        if llm is not None and isinstance(llm.llm, ReplayLLM):
            llm.llm.run = run["id"]
        calls = llm.calls if llm else 0
        before = (llm.prompt_tokens + llm.completion_tokens) if llm else 0
        t0 = time.perf_counter()
        result = reflector.reflect(trajectory, namespace=("bench-reflect", name, run["id"]))
        seconds = time.perf_counter() - t0
        lessons = [r["lesson"] for r in result.records]
        fragments = prompt_fragments(distill_messages(trajectory, settings)[0]["content"])
        chinese = is_chinese(trajectory)
        users = [s.content for s in trajectory.steps if s.kind == "message" and s.role == "user"]
        row = {
            "id": run["id"],
            "lang": run["lang"],
            "kind": run["kind"],
            "lessons": lessons,
            "reinforced": len(result.reinforced),
            "skipped": result.skipped,
            "error": result.error,
            "asked_again": result.asked_again,
            "dropped": [d["reason"] for d in result.dropped],
            "dropped_lessons": [
                [str((d["record"] or {}).get("lesson", ""))[:120], d["reason"]]
                for d in result.dropped
                if isinstance(d["record"], dict)
            ],
            "calls": (llm.calls - calls) if llm else 0,
            "copies": sum(copies_prompt(le, fragments) is not None for le in lessons),
            "restated": sum(
                restates(le, trajectory.goal) or any(restates(le, u) for u in users)
                for le in lessons
            ),
            "too_long": sum(len(le) > settings.lesson_max_chars for le in lessons),
            "wrong_language": sum(language_problem(le, chinese) is not None for le in lessons),
            "seconds": round(seconds, 3),
            "tokens": ((llm.prompt_tokens + llm.completion_tokens) - before) if llm else 0,
            **score_run(run, lessons),
        }
        rows.append(row)
        print(
            f"  {run['id']:<22} {len(lessons)} lesson(s) {seconds:6.2f} s  "
            f"{' | '.join(lessons)[:90]}",
            flush=True,
        )
        if verbose:
            for lesson, reason in row["dropped_lessons"]:
                print(f"      dropped {lesson[:70]!r}: {reason[:80]}", flush=True)
    summary = summarise(name, rows)
    zh = [r for r in rows if r["lang"] == "zh"]
    if zh and len(zh) < len(rows):
        summary["zh"] = summarise(f"{name} (zh)", zh)
    return summary


def _reason_kind(reason: str) -> str:
    reason = reason.removeprefix("after being asked again: ")
    for key in (
        "copies the prompt",
        "restates",
        "does not name",
        "opposite",
        "another lesson",
        "rule-built",
        "generic advice",
        "cites no step",
        "cites step",
        "cites none",
        "nothing new",
        "shares no content",
        "its evidence",
        "recommends",
        "confidence",
        "characters",
        "write the lesson in",
        "more than",
    ):
        if key in reason:
            return key
    return reason.split(":")[0][:40]


def summarise(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    written = sum(len(r["lessons"]) for r in rows)
    none_pred = [r for r in rows if not r["lessons"] and not r["skipped"]]
    none_true = [r for r in rows if r["expected_none"]]
    tp = sum(r["expected_none"] for r in none_pred)
    fact_rows = [r for r in rows if not r["expected_none"]]
    secs = [r["seconds"] for r in rows]
    return {
        "distiller": name,
        "runs": n,
        "lessons_written": written,
        "lessons_per_run": round(written / n, 3) if n else None,
        "share_grounded": _ratio(sum(r["grounded"] for r in rows), written),
        "facts_covered": _ratio(
            sum(r["covered"] for r in fact_rows), sum(r["facts"] for r in fact_rows)
        ),
        "runs_fully_answered": _ratio(
            sum(r["covered"] == r["facts"] for r in fact_rows), len(fact_rows)
        ),
        "restated_goal_or_user": sum(r["restated"] for r in rows),
        "opposite_of_fix": sum(r["opposite"] for r in rows),
        "calls_on_nothing_runs": sum(r["calls"] for r in rows if r["expected_none"]),
        "prompt_copies_written": sum(r["copies"] for r in rows),
        "prompt_copies_proposed": sum(
            _reason_kind(d) == "copies the prompt" for r in rows for d in r["dropped"]
        ),
        "nothing_new_precision": _ratio(tp, len(none_pred)),
        "nothing_new_recall": _ratio(tp, len(none_true)),
        "length_compliance": _ratio(written - sum(r["too_long"] for r in rows), written),
        "language_compliance": _ratio(written - sum(r["wrong_language"] for r in rows), written),
        "asked_again": sum(r["asked_again"] for r in rows),
        "skipped_runs": sum(r["skipped"] for r in rows),
        "dropped": dict(Counter(_reason_kind(d) for r in rows for d in r["dropped"])),
        "tokens_per_run": round(statistics.fmean(r["tokens"] for r in rows), 1) if n else None,
        "seconds_per_run": {
            "mean": round(statistics.fmean(secs), 3),
            "p50": round(statistics.median(secs), 3),
        }
        if n
        else None,
        "by_kind": {
            k: {
                "runs": sum(r["kind"] == k for r in rows),
                "lessons": sum(len(r["lessons"]) for r in rows if r["kind"] == k),
            }
            for k in dict.fromkeys(r["kind"] for r in rows)
        },
        "rows": rows,
    }


def table(results: list[dict[str, Any]]) -> str:
    keys = [
        "lessons_per_run",
        "share_grounded",
        "facts_covered",
        "runs_fully_answered",
        "restated_goal_or_user",
        "opposite_of_fix",
        "calls_on_nothing_runs",
        "prompt_copies_written",
        "prompt_copies_proposed",
        "nothing_new_precision",
        "nothing_new_recall",
        "length_compliance",
        "language_compliance",
        "asked_again",
        "skipped_runs",
        "tokens_per_run",
    ]
    lines = [
        "| figure | " + " | ".join(r["distiller"] for r in results) + " |",
        "|---|" + "---:|" * len(results),
    ]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(str(r[k]) for r in results) + " |")
    lines.append(
        "| seconds_per_run (mean / p50) | "
        + " | ".join(
            f"{r['seconds_per_run']['mean']} / {r['seconds_per_run']['p50']}" for r in results
        )
        + " |"
    )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--base-url",
        help="an OpenAI-compatible endpoint, e.g. "
        "http://127.0.0.1:8080/v1 (llama.cpp), http://localhost:11434/v1 (Ollama)",
    )
    ap.add_argument("--model", help="the model name the endpoint knows")
    ap.add_argument(
        "--api-key",
        default=os.environ.get("HINDSIGHT_LLM_API_KEY"),
        help="bearer token (default: $HINDSIGHT_LLM_API_KEY)",
    )
    ap.add_argument("--timeout", type=float, default=120, help="seconds per model call")
    ap.add_argument("--no-rule-based", action="store_true", help="skip the rule-based distiller")
    ap.add_argument(
        "--replay",
        action="append",
        choices=["good", "bad"],
        default=[],
        help="also run a model that replays the data's hand-written answers",
    )
    ap.add_argument(
        "--interleave", action="store_true", help="run English and Chinese runs in turn"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print dropped lessons")
    ap.add_argument("--only", default="", help="run only the runs whose id starts with this")
    ap.add_argument("--data", type=Path, default=DATA, help="the trajectories file")
    ap.add_argument(
        "--hard",
        action="store_true",
        help="add the harder runs (bench/data/reflection_hard.json) to the 40",
    )
    args = ap.parse_args()
    if bool(args.base_url) != bool(args.model):
        ap.error("--base-url and --model go together")
    if not args.data.is_file():
        sys.exit(
            f"{args.data} not found: the trajectories ship with the repository "
            "(bench/data/reflection_trajectories.json)"
        )
    every = json.loads(args.data.read_text("utf-8"))["runs"]
    if args.hard:
        every += json.loads(HARD.read_text("utf-8"))["runs"]
    runs = [r for r in every if r["id"].startswith(args.only)]
    if args.interleave:  # English and Chinese runs in turn: a cut-short run stays balanced
        en = [r for r in runs if r["lang"] != "zh"]
        zh = [r for r in runs if r["lang"] == "zh"]
        runs = [r for pair in zip_longest(en, zh) for r in pair if r is not None]
    url, drop = c.fresh_database(DB)
    memory = Memory(("bench-reflect",), settings=Settings(database_url=url))
    memory.setup()  # schema and model loaded before the clock runs
    memory.embedder.embed_documents(["warm up"])
    results = []
    try:
        if not args.no_rule_based:
            print("rule-based:")
            results.append(bench("rule-based", runs, memory, None))
        for kind in args.replay:
            replay = CountingLLM(ReplayLLM(runs, kind))
            print(f"replay:{kind}:")
            results.append(bench(f"replay:{kind}", runs, memory, replay, args.verbose))
        if args.base_url:
            llm = CountingLLM(
                OpenAICompatibleLLM(
                    args.base_url, args.model, api_key=args.api_key, timeout=args.timeout
                )
            )
            print(f"llm:{args.model}:")
            results.append(bench(f"llm:{args.model}", runs, memory, llm, args.verbose))
    finally:
        memory.close()
        drop()
    RESULTS.mkdir(exist_ok=True)
    for r in results:
        slug = r["distiller"].replace(":", "_").replace("/", "_")
        (RESULTS / f"reflection_{slug}.json").write_text(
            json.dumps({"machine": c.machine(), **r}, ensure_ascii=False, indent=1) + "\n"
        )
    print()
    print(table([x for r in results for x in (r, r.get("zh")) if x]))
    for r in results:
        print(f"{r['distiller']} dropped: {r['dropped']}")


if __name__ == "__main__":
    main()
