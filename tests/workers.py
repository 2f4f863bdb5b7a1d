"""Functions run in child processes by the concurrency tests (importable by spawn)."""

from __future__ import annotations

from typing import Any


def write_near_duplicates(
    url: str,
    namespace: tuple[str, ...],
    vectors: dict[str, list[float]],
    lessons: list[str],
    start: Any,
    results: Any,
) -> None:
    """Wait for the start signal, then write each lesson (one per call)."""
    from hindsight_core import CallableEmbedder, Memory, Settings

    # Vectors were computed by the real model in the parent; looking them up here
    # keeps eight processes from each loading the model.
    embedder = CallableEmbedder(
        lambda texts: [vectors[t] for t in texts], dim=384, model_name="all-MiniLM-L6-v2"
    )
    mem = Memory(namespace, settings=Settings(database_url=url), embedder=embedder)
    mem.setup()
    start.wait(timeout=60)
    out = [
        mem.write({"scene": "s", "trigger": "cleaning the downloads folder", "lesson": lesson})
        for lesson in lessons
    ]
    results.put([(r.status, str(r.id)) for r in out])
    mem.close()
