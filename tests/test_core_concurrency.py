"""Dedup holds when many processes write near-duplicates at the same moment."""

from __future__ import annotations

import multiprocessing as mp

import workers

from hindsight_core import Memory
from hindsight_core.memory.inputs import embedding_text
from hindsight_core.models import ExperienceIn

PARAPHRASES = [
    "Check the extension before deleting files",
    "Check file extensions before deleting files",
    "Check the file extension before deleting files",
    "Check extensions before deleting the files",
]


def test_eight_processes_writing_near_duplicates_end_with_one_record(
    memory: Memory,
    embedder,
    database_url: str,  # type: ignore[no-untyped-def]
) -> None:
    texts = {
        embedding_text(
            ExperienceIn(scene="s", trigger="cleaning the downloads folder", lesson=p)
        ): p
        for p in PARAPHRASES
    }
    vectors = dict(zip(texts, embedder.embed(list(texts)), strict=True))
    ctx = mp.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    per_process = 3
    procs = [
        ctx.Process(
            target=workers.write_near_duplicates,
            args=(
                database_url,
                memory.namespace,
                vectors,
                [PARAPHRASES[(i + j) % len(PARAPHRASES)] for j in range(per_process)],
                start,
                results,
            ),
        )
        for i in range(8)
    ]
    for p in procs:
        p.start()
    start.set()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    flat = [o for out in outcomes for o in out]
    assert len(flat) == 8 * per_process
    assert sum(1 for status, _ in flat if status == "inserted") == 1
    assert len({rid for _, rid in flat}) == 1
    stats = memory.stats(namespace=memory.namespace)
    assert stats.records == 1
    assert memory.get(flat[0][1]).occurrences == 8 * per_process
