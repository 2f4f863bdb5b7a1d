"""Load: 16 concurrent writers and readers (12 threads + 4 processes) on one namespace.

Every worker writes the same set of distinct lessons (so nearly every write races
another writer of the same lesson), searches, and marks hits used. Afterwards:
no errors, exactly one live record per lesson (the dedup guard held under
concurrency), each record's ``occurrences`` equals the number of times its lesson
was written, each ``use_count`` equals the number of marks, and no two live
records are close enough for the guard to merge them.

Processes get the database from ``HINDSIGHT_DATABASE_URL`` and embed with the real
model's vectors, computed once here and handed over in a file (loading the model
in four more processes would take longer than the test).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from hindsight_core import Memory, Settings
from hindsight_core.memory.inputs import embedding_text
from hindsight_core.models import ExperienceIn

LESSONS = [
    "Check file extensions before deleting",
    "Retry HTTP 429 responses with backoff",
    "Quote SQL identifiers from user input",
    "Pin docker image tags in production",
    "Convert timezones to UTC before comparing",
    "Paginate API results past the first page",
    "Validate the CSV header before importing",
    "Close database connections after each job",
    "Escape HTML in user comments",
    "Back up the database before a migration",
    "Compress images over 5 MB before upload",
    "Rotate API keys every ninety days",
    "Read invoice totals from the PDF footer",
    "Use the sitemap to find product pages",
    "Set a timeout on every outbound request",
    "Hash passwords with a slow algorithm",
]
QUERIES = [
    "cleaning up old downloads",
    "the API says too many requests",
    "building a SQL query",
    "deploying containers",
    "comparing dates from two systems",
    "fetching all records",
    "importing a spreadsheet",
    "scraping an online shop",
]
WORKER_OPS = 14
THREADS = 12
PROCESSES = 4

CHILD = r"""
import json, os, random, sys
import numpy as np
from hindsight_core import Memory
from hindsight_core.embeddings.callable import CallableEmbedder
spec = json.load(open(sys.argv[1]))
table = {t: np.asarray(v, dtype=np.float32) for t, v in spec["vectors"].items()}
emb = CallableEmbedder(lambda texts: np.stack([table[t] for t in texts]), dim=spec["dim"],
                       model_name=spec["model"])
mem = Memory(tuple(spec["namespace"]), embedder=emb)  # URL from HINDSIGHT_DATABASE_URL
rng = random.Random(int(sys.argv[2]))
written, marks, errors = [], {}, []
for op in range(spec["ops"]):
    kind = rng.choice(["write", "write_many", "recall"])
    try:
        if kind == "write":
            rec = rng.choice(spec["records"])
            mem.write(rec)
            written.append(rec["lesson"])
        elif kind == "write_many":
            recs = rng.sample(spec["records"], 3)
            mem.write_many(recs)
            written.extend(r["lesson"] for r in recs)
        else:
            hits = mem.search(rng.choice(spec["queries"]), top_k=3)
            if hits:
                mem.mark_used(hits[0].record.id)
                marks[str(hits[0].record.id)] = marks.get(str(hits[0].record.id), 0) + 1
    except Exception as exc:  # reported to the parent, which fails the test
        errors.append(f"{type(exc).__name__}: {exc}")
mem.close()
print(json.dumps({"written": written, "marks": marks, "errors": errors}))
"""


def _record(lesson: str) -> dict[str, Any]:
    return {
        "scene": "load",
        "trigger": f"when the task involves: {lesson.lower()}",
        "lesson": lesson,
        "source": {"agent": "load-test"},
    }


def _worker(mem: Memory, seed: int, out: dict[str, Any]) -> None:
    rng = random.Random(seed)
    written: list[str] = []
    marks: Counter[str] = Counter()
    errors: list[str] = []
    for _ in range(WORKER_OPS):
        kind = rng.choice(["write", "write_many", "recall"])
        try:
            if kind == "write":
                lesson = rng.choice(LESSONS)
                mem.write(_record(lesson))
                written.append(lesson)
            elif kind == "write_many":
                lessons = rng.sample(LESSONS, 3)
                mem.write_many([_record(x) for x in lessons])
                written.extend(lessons)
            else:
                hits = mem.search(rng.choice(QUERIES), top_k=3)
                if hits:
                    mem.mark_used(hits[0].record.id)
                    marks[str(hits[0].record.id)] += 1
        except Exception as exc:  # noqa: BLE001 - collected and asserted on below
            errors.append(f"{type(exc).__name__}: {exc}")
    out[f"thread-{seed}"] = {"written": written, "marks": dict(marks), "errors": errors}


def test_concurrent_writers_and_readers(
    settings: Settings, embedder: Any, namespace: tuple[str, str], tmp_path: Path
) -> None:
    records = [_record(x) for x in LESSONS]
    texts = [embedding_text(ExperienceIn(**r)) for r in records] + QUERIES
    vectors = dict(zip(texts, embedder.embed(texts), strict=True))
    spec = {
        "namespace": list(namespace),
        "records": records,
        "queries": QUERIES,
        "vectors": vectors,
        "dim": embedder.dim,
        "model": embedder.model_name,
        "ops": WORKER_OPS,
    }
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))

    mem = Memory(namespace, settings=settings, embedder=embedder)
    # Precondition: the lessons are distinct for the guard, so one record each is right.
    lesson_vecs = np.asarray([vectors[t] for t in texts[: len(LESSONS)]])
    sims = lesson_vecs @ lesson_vecs.T
    for i in range(len(LESSONS)):
        for j in range(i + 1, len(LESSONS)):
            assert not mem.same_meaning(LESSONS[i], LESSONS[j], float(sims[i, j]))

    env = dict(os.environ)  # HINDSIGHT_DATABASE_URL is set by the session fixture
    assert env.get("HINDSIGHT_DATABASE_URL")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(spec_path), str(100 + k)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for k in range(PROCESSES)
    ]
    results: dict[str, Any] = {}
    threads = [threading.Thread(target=_worker, args=(mem, k, results)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for k, p in enumerate(procs):
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr[-2000:]
        results[f"process-{k}"] = json.loads(stdout.strip().splitlines()[-1])

    assert len(results) == THREADS + PROCESSES
    errors = [e for r in results.values() for e in r["errors"]]
    assert errors == []
    written = Counter(x for r in results.values() for x in r["written"])
    marks: Counter[str] = Counter()
    for r in results.values():
        marks.update(r["marks"])
    assert sum(written.values()) > 0 and sum(marks.values()) > 0

    live = mem.list_records(limit=1000)
    by_lesson = Counter(r.lesson for r in live)
    assert all(n == 1 for n in by_lesson.values()), by_lesson  # no duplicate records
    assert set(by_lesson) == set(written)
    for rec in live:
        assert rec.occurrences == written[rec.lesson], rec.lesson  # no lost merges
        assert rec.use_count == marks.get(str(rec.id), 0), rec.lesson  # no lost usage updates
    assert sum(r.use_count for r in live) == sum(marks.values())

    # No two live records that the guard would merge.
    live_vecs = np.asarray(
        embedder.embed(
            [
                embedding_text(ExperienceIn(scene=r.scene, trigger=r.trigger, lesson=r.lesson))
                for r in live
            ]
        )
    )
    sims = live_vecs @ live_vecs.T
    for i in range(len(live)):
        for j in range(i + 1, len(live)):
            assert not mem.same_meaning(live[i].lesson, live[j].lesson, float(sims[i, j]))
    mem.close()
