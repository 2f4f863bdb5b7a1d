"""A candidate that says what a recalled lesson says reinforces it instead of adding one.

The agent was shown its recalled lessons; a model asked to reflect often writes
one of them back in other words. Write-time dedup compares lesson *and* trigger, so
a reworded lesson with a new trigger can slip under its threshold. Here each
candidate's lesson is compared with the lessons recalled during the run alone: at
or above the dedup threshold (``memory.dedup_threshold``), and past the dedup
guard's lexical veto (``WriteFlows.same_meaning``), the recalled record gets
``occurrences + 1`` and a ``merged`` event (and the candidate's scene, as a
write-time merge would), and the candidate is not written. The update takes the
namespace lock first and reinforces only records still live (:func:`reinforce`).

What is decided without I/O is written as pure functions, tested without a database
(``tests/test_reinforce_plan.py``): which candidate repeats which record
(:func:`repeats`) and what each reinforced record gains (:func:`reinforced`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..embeddings import as_matrix
from ..models import Namespace, WriteResult
from ..runtime.flow import Embed, Flow, Sql
from ..runtime.host import RecordContext
from ..storage import batch_sql
from ..storage import experiences_sql as q
from ._driver import RFlow, Store


def _text(lesson: str) -> str:
    return lesson.rstrip(" .。!！;；")


def reinforce(
    memory: RecordContext,
    namespace: Namespace | str | None,
    recalled: list[uuid.UUID],
    records: list[dict[str, Any]],
) -> RFlow[dict[int, WriteResult]]:
    """Reinforce the recalled records that candidates repeat; returns index -> result.

    Two transactions: the recalled records are read, then the candidates and their
    lessons embedded, and only then the namespace locked (as a write locks it, after
    embedding) and the records still live reinforced. A record archived in between
    (eviction holds the namespace lock while it archives) is not reinforced: its
    candidate is written as a record of its own (tests/test_lock_order.py).
    """
    ns = memory.namespace_key(namespace)
    live = yield from Store(_recalled_flow(memory, ns, recalled))
    if not live or not records:
        return {}
    return (yield from Store(_reinforce_flow(memory, ns, live, records)))


def _recalled_flow(
    memory: RecordContext, ns: str, recalled: list[uuid.UUID]
) -> Flow[list[dict[str, Any]]]:
    """The live records among ``recalled`` (a read: autocommit)."""
    yield from memory.ready_flow()
    params = {"ns": ns, "ids": list(dict.fromkeys(recalled)), **memory.decay_params(memory.now())}
    rows = yield from Sql(q.GET, params, autocommit=True)
    return [r for r in rows if r["archived_at"] is None]


def repeats(
    lessons: Sequence[str],
    live: Sequence[Mapping[str, Any]],
    vectors: Sequence[Sequence[float]],
    same_meaning: Callable[[str, str, float], bool],
    threshold: float,
) -> dict[int, WriteResult]:
    """Which candidate repeats which live recalled record (pure: no I/O).

    Args:
        lessons: the candidates' lessons.
        live: the live recalled records (``id``, ``lesson``).
        vectors: the embeddings of ``lessons`` and then of ``live``'s lessons.
        same_meaning: the dedup rule (``RecordContext.same_meaning``: threshold and veto).
        threshold: the dedup threshold; a candidate's records are looked at from the
            most similar down to it.

    Returns:
        Candidate index -> the ``merged`` write into the record it repeats.
    """
    matrix = as_matrix(vectors)
    sims = matrix[: len(lessons)] @ matrix[len(lessons) :].T
    found: dict[int, WriteResult] = {}
    for i, lesson in enumerate(lessons):
        for j in sims[i].argsort()[::-1]:
            sim = float(sims[i, j])
            if same_meaning(lesson, live[j]["lesson"], sim):
                found[i] = WriteResult(id=live[j]["id"], status="merged", similarity=round(sim, 4))
                break
            if sim < threshold:
                break
    return found


def reinforced(
    found: Mapping[int, WriteResult], records: Sequence[Mapping[str, Any]]
) -> dict[uuid.UUID, tuple[int, list[str]]]:
    """Per reinforced record, in id order: how many candidates repeat it, and its scenes
    to add (the candidates', as a write-time merge adds them; pure)."""
    out: dict[uuid.UUID, tuple[int, list[str]]] = {}
    for i, res in sorted(found.items(), key=lambda kv: kv[0]):
        added, scenes = out.get(res.id, (0, []))
        scene = records[i]["scene"]
        out[res.id] = (added + 1, scenes if scene in scenes else [*scenes, scene])
    return dict(sorted(out.items()))


def _reinforce_flow(
    memory: RecordContext, ns: str, live: list[dict[str, Any]], records: list[dict[str, Any]]
) -> Flow[dict[int, WriteResult]]:
    # Embedded before the first statement: no connection (nor lock) while the model runs.
    lessons = [r["lesson"] for r in records]
    vectors = yield from Embed(
        [_text(x) for x in lessons] + [_text(r["lesson"]) for r in live],
        query=memory.dedup_as_query,  # the side dedup compares (e5: a symmetric task)
    )
    found = repeats(lessons, live, vectors, memory.same_meaning, memory.dedup_threshold)
    if not found:
        return {}
    yield Sql(q.LOCK_NAMESPACE, {"ns": ns})
    ids = sorted({r.id for r in found.values()})
    still = {r["id"] for r in (yield from Sql(q.LOCK_LIVE, {"ns": ns, "ids": ids}))}
    out = {i: res for i, res in found.items() if res.id in still}
    if not out:
        return out
    now = memory.now()
    gains = reinforced(out, records)
    yield Sql(
        batch_sql.MERGE_ROWS,
        batch_sql.merge_rows(
            [
                {
                    "ns": ns,
                    "id": rid,
                    "now": now,
                    "added": added,
                    "critical": False,
                    "importance": None,
                    "scenes": scenes,
                }
                for rid, (added, scenes) in gains.items()
            ]
        ),
        fetch="none",
    )
    yield Sql(
        batch_sql.EVENT_ROWS,
        batch_sql.event_rows(
            [
                {
                    "ns": ns,
                    "record_id": rid,
                    "kind": "merged",
                    "now": now,
                    "detail": json.dumps({"added": added, "by": "reflection"}),
                }
                for rid, (added, _scenes) in gains.items()
            ]
        ),
        fetch="none",
    )
    return out
