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


def _reinforce_flow(
    memory: RecordContext, ns: str, live: list[dict[str, Any]], records: list[dict[str, Any]]
) -> Flow[dict[int, WriteResult]]:
    # Embedded before the first statement: no connection (nor lock) while the model runs.
    vectors = yield from Embed(
        [_text(r["lesson"]) for r in records] + [_text(r["lesson"]) for r in live],
        query=memory.dedup_as_query,  # the side dedup compares (e5: a symmetric task)
    )
    matrix = as_matrix(vectors)
    sims = matrix[: len(records)] @ matrix[len(records) :].T
    found: dict[int, WriteResult] = {}
    for i, rec in enumerate(records):
        for j in sims[i].argsort()[::-1]:
            sim = float(sims[i, j])
            if memory.same_meaning(rec["lesson"], live[j]["lesson"], sim):
                found[i] = WriteResult(id=live[j]["id"], status="merged", similarity=round(sim, 4))
                break
            if sim < memory.dedup_threshold:
                break
    if not found:
        return {}
    yield Sql(q.LOCK_NAMESPACE, {"ns": ns})
    ids = sorted({r.id for r in found.values()})
    still = {r["id"] for r in (yield from Sql(q.LOCK_LIVE, {"ns": ns, "ids": ids}))}
    out = {i: res for i, res in found.items() if res.id in still}
    if not out:
        return out
    now = memory.now()
    added = [r.id for r in out.values()]
    scenes: dict[uuid.UUID, list[str]] = {rid: [] for rid in ids if rid in still}
    for i, res in out.items():  # the record now also belongs to the candidate's scene
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
                    "added": added.count(rid),
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
                    "detail": json.dumps({"added": added.count(rid), "by": "reflection"}),
                }
                for rid in scenes
            ]
        ),
        fetch="none",
    )
    return out
