"""Load: 16 concurrent writers and readers (12 threads + 4 processes) on one namespace;
and a queue of merges, more writers than the pool has connections, behind one lock.

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

import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import sqlalchemy as sa
from _front import Front
from _locks import hold_namespace, wait_for_waiters

from hindsight_core import AsyncMemory, CallableEmbedder, Memory, Settings
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


# ---------------------------------------------------------------------------------
# A queue of merges behind one namespace lock, with a slow embedder (issue 26, item 1):
# more writers than the pool has connections, each holding one while it waits for the
# lock. The lock holder once asked the same pool for a connection of its own (the
# first ANALYZE of a new table) and waited for it while every connection was held by
# a writer queued behind its lock: all of them failed with "pool timeout".

QUEUED = 24  # more than a default pool's 2 * pool_size connections
QUEUE_LESSONS = LESSONS[:4]
QUEUE_DIM = 32


def _slow_vectors(texts: list[str]) -> list[list[float]]:
    """Distinct, stable vectors (a hash per text), after a pause like a remote model's."""
    time.sleep(0.2)
    out = []
    for text in texts:
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8]))
        out.append(rng.standard_normal(QUEUE_DIM).tolist())
    return out


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_queue_of_merges_with_a_slow_embedder_turns_no_write_away(
    fresh_db: str, admin: sa.Engine, kind: str
) -> None:
    embedder = CallableEmbedder(_slow_vectors, dim=QUEUE_DIM, model_name="slow-hash-32")
    settings = Settings(database_url=fresh_db)  # default pool: 5 + 5 connections
    ns = ("load", "queue")
    mem: Memory | AsyncMemory = (Memory if kind == "sync" else AsyncMemory)(
        ns, settings=settings, embedder=embedder
    )
    front = Front(mem)
    for lesson in QUEUE_LESSONS[:3]:  # a namespace past the exact-scan bound, new table
        await front.write(_record(lesson))
    errors: list[str] = []

    def failed(exc: Exception) -> None:
        errors.append(f"{type(exc).__name__}: {exc}")

    def one_sync(i: int) -> None:
        try:
            cast(Memory, mem).write(_record(QUEUE_LESSONS[i % len(QUEUE_LESSONS)]))
        except Exception as exc:  # noqa: BLE001 - collected and asserted on below
            failed(exc)

    async def one_async(i: int) -> None:
        try:
            await cast(AsyncMemory, mem).write(_record(QUEUE_LESSONS[i % len(QUEUE_LESSONS)]))
        except Exception as exc:  # noqa: BLE001 - collected and asserted on below
            failed(exc)

    lock = admin.connect()
    hold_namespace(lock, mem.namespace_key(None))
    try:
        if kind == "sync":
            threads = [threading.Thread(target=one_sync, args=(i,)) for i in range(QUEUED)]
            for t in threads:
                t.start()
            await asyncio.to_thread(wait_for_waiters, admin, 2 * settings.pool_size)
            lock.rollback()  # the lock goes; the queue drains
            for t in threads:
                await asyncio.to_thread(t.join)
        else:
            tasks = [asyncio.ensure_future(one_async(i)) for i in range(QUEUED)]
            await asyncio.to_thread(wait_for_waiters, admin, 2 * settings.pool_size)
            lock.rollback()  # the lock goes; the queue drains
            await asyncio.gather(*tasks)
    finally:
        lock.close()
    try:
        assert errors == []
        live = await front.list_records(limit=100)
        written = Counter(QUEUE_LESSONS[i % len(QUEUE_LESSONS)] for i in range(QUEUED))
        written.update(QUEUE_LESSONS[:3])
        assert sorted((r.lesson, r.occurrences) for r in live) == sorted(written.items())
    finally:
        await front.close()
