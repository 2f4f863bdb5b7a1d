"""A candidate that says what a recalled lesson says reinforces it instead of adding one.

The agent was shown its recalled lessons; a model asked to reflect often writes
one of them back in other words. Write-time dedup compares lesson *and* trigger, so
a reworded lesson with a new trigger can slip under its threshold. Here each
candidate's lesson is compared with the lessons recalled during the run alone: at
or above the dedup threshold (``memory.dedup_threshold``), and past the dedup
guard's lexical veto (``WriteFlows.same_meaning``), the recalled record gets
``occurrences + 1`` and a ``merged`` event (and the candidate's scene, as a
write-time merge would), and the candidate is not written.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..embeddings import as_matrix
from ..models import Namespace, WriteResult
from ..runtime.flow import Embed, Flow, Sql
from ..runtime.host import RecordContext
from ..storage import batch_sql
from ..storage import experiences_sql as q


def _text(lesson: str) -> str:
    return lesson.rstrip(" .。!！;；")


def reinforce_flow(
    memory: RecordContext,
    namespace: Namespace | str | None,
    recalled: list[uuid.UUID],
    records: list[dict[str, Any]],
) -> Flow[dict[int, WriteResult]]:
    """Reinforce the recalled records that candidates repeat; returns index -> result."""
    ns = memory.namespace_key(namespace)
    yield from memory.ready_flow()
    rows = yield from Sql(
        q.GET, {"ns": ns, "ids": list(dict.fromkeys(recalled)), **memory.decay_params(memory.now())}
    )
    live = [r for r in rows if r["archived_at"] is None]
    if not live or not records:
        return {}
    vectors = yield from Embed(
        [_text(r["lesson"]) for r in records] + [_text(r["lesson"]) for r in live]
    )
    matrix = as_matrix(vectors)
    sims = matrix[: len(records)] @ matrix[len(records) :].T
    out: dict[int, WriteResult] = {}
    for i, rec in enumerate(records):
        for j in sims[i].argsort()[::-1]:
            sim = float(sims[i, j])
            if memory.same_meaning(rec["lesson"], live[j]["lesson"], sim):
                out[i] = WriteResult(id=live[j]["id"], status="merged", similarity=round(sim, 4))
                break
            if sim < memory.dedup_threshold:
                break
    if out:
        now = memory.now()
        ids = [r.id for r in out.values()]
        scenes: dict[uuid.UUID, list[str]] = {}
        for i, res in out.items():  # the record now also belongs to the candidate's scene
            scenes.setdefault(res.id, [])
            if records[i]["scene"] not in scenes[res.id]:
                scenes[res.id].append(records[i]["scene"])
        yield Sql(
            batch_sql.MERGE_ROWS,
            batch_sql.merge_rows(
                [
                    {
                        "ns": ns,
                        "id": rid,
                        "now": now,
                        "added": ids.count(rid),
                        "critical": False,
                        "importance": None,
                        "scenes": scenes[rid],
                    }
                    for rid in scenes
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
                        "detail": json.dumps({"added": ids.count(rid), "by": "reflection"}),
                    }
                    for rid in dict.fromkeys(ids)
                ]
            ),
            fetch="none",
        )
    return out
