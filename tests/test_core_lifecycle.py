"""Lifecycle: feedback, decay with a controllable clock, eviction, curation,
export/import, reindex and the embedding-model check."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from hindsight_core import (
    CallableEmbedder,
    EmbeddingModelMismatchError,
    ImportFormatError,
    Memory,
    NotFoundError,
    Settings,
    ValidationError,
)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, days: float) -> None:
        self.now += timedelta(days=days)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def mem(settings: Settings, embedder, namespace, clock: Clock):  # type: ignore[no-untyped-def]
    m = Memory(namespace, settings=settings, embedder=embedder, clock=clock)
    yield m
    m.close()


def rec(lesson: str, **extra: object) -> dict[str, object]:
    return {"scene": "s", "trigger": f"when {lesson.lower()}", "lesson": lesson, **extra}


def test_mark_used_reinforces_and_unhelpful_lowers(mem: Memory, clock: Clock) -> None:
    rid = mem.write(rec("Pin the numpy version")).id
    used = mem.mark_used(rid)
    assert used.score == pytest.approx(1.1) and used.use_count == 1
    assert used.last_used_at == clock.now
    down = mem.mark_used(rid, helpful=False)
    assert down.score == pytest.approx(1.0) and down.use_count == 2
    with pytest.raises(ValidationError, match="helpful"):
        mem.mark_used(rid, helpful="yes")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="id"):
        mem.mark_used("not-a-uuid")


def test_decay_every_30_days_and_critical_never_decays(mem: Memory, clock: Clock) -> None:
    normal = mem.write(rec("Pin the numpy version")).id
    critical = mem.write(rec("File the yearly tax return in March", critical=True)).id
    clock.advance(30)
    assert mem.get(normal).decayed_score == pytest.approx(0.9)
    clock.advance(30)
    assert mem.get(normal).decayed_score == pytest.approx(0.81)
    assert mem.get(critical).decayed_score == pytest.approx(1.0)
    # use folds the decay into the score and restarts the clock
    assert mem.mark_used(normal).score == pytest.approx(0.91)
    clock.advance(30)
    assert mem.get(normal).decayed_score == pytest.approx(0.819)


def test_decay_lowers_the_rank(mem: Memory, clock: Clock) -> None:
    old = mem.write(rec("Commit the lock file with dependency changes")).id
    before = mem.search("lock file for dependencies")[0]
    clock.advance(400)
    new = mem.write(rec("Review the lock file diff on dependency updates")).id
    hits = {h.record.id: h for h in mem.search("lock file for dependencies", top_k=2)}
    assert hits[old].breakdown.decay == pytest.approx(0.9 ** (400 / 30))
    # final = relevance x decay ^ 0.3; the relevance's keyword part moves with the
    # namespace's document frequencies (a record was added), its semantic part not.
    assert hits[old].breakdown.semantic == pytest.approx(before.breakdown.semantic)
    assert hits[old].score == pytest.approx(
        hits[old].breakdown.relevance * hits[old].breakdown.decay ** 0.3
    )
    assert hits[old].score < before.score * 0.7
    assert hits[new].breakdown.decay == pytest.approx(1.0)


def test_maintain_archives_decayed_records_but_not_critical(mem: Memory, clock: Clock) -> None:
    stale = mem.write(rec("Stale lesson about fax machines")).id
    fresh = mem.write(rec("Rotate the API keys monthly")).id
    critical = mem.write(rec("File the yearly tax return in March", critical=True)).id
    clock.advance(400)  # 0.9 ** (400/30) ~ 0.245 < 0.3
    mem.mark_used(fresh)
    report = mem.maintain(namespace=mem.namespace)
    assert report.archived == 1
    assert mem.get(stale).archived_at == clock.now
    assert mem.get(fresh).archived_at is None and mem.get(critical).archived_at is None
    assert all(h.record.id != stale for h in mem.search("fax machines", top_k=10))
    restored = mem.restore(stale)
    assert restored.archived_at is None and restored.decayed_score >= 0.3
    assert any(h.record.id == stale for h in mem.search("fax machines", top_k=10))
    with pytest.raises(ValidationError, match="already live"):
        mem.restore(stale)


def test_curation(mem: Memory) -> None:
    rid = mem.write(rec("Pin the numpy version")).id
    assert mem.set_critical(rid).critical is True
    edited = mem.edit(rid, lesson="Pin numpy below 2.0")  # a new version
    assert edited.lesson == "Pin numpy below 2.0" and edited.critical  # kept critical
    assert mem.search("numpy 2.0 pin")[0].record.id == edited.id
    rid = edited.id
    with pytest.raises(ValidationError, match="lesson"):
        mem.edit(rid, lesson="x" * 60)
    with pytest.raises(ValidationError, match="score"):
        mem.edit(rid, score=99)
    assert mem.get(rid).lesson == "Pin numpy below 2.0"
    mem.archive(rid)
    mem.forget(rid)
    with pytest.raises(NotFoundError):
        mem.get(rid)


def test_merge_keeps_links(mem: Memory) -> None:
    a = mem.write(rec("Retry uploads on timeout")).id
    b = mem.write(rec("Retry downloads on connection reset")).id
    merged = mem.merge(
        [a, b],
        {"scene": "s", "trigger": "network I/O fails", "lesson": "Retry network I/O with backoff"},
    )
    assert set(merged.merged_from) == {a, b}
    assert mem.get(a).merged_into == merged.id and mem.get(a).archived_at is not None
    with pytest.raises(NotFoundError):
        mem.merge([a, b], rec("again"))


def test_export_import_round_trip(
    mem: Memory,
    fresh_db: str,
    embedder,
    clock: Clock,  # type: ignore[no-untyped-def]
) -> None:
    ids = [
        r.id
        for r in mem.write_many(
            [
                rec("Pin the numpy version"),
                rec("检查扩展名再删除文件", source={"agent": "a1"}),
                rec("Rotate the keys", critical=True),
            ]
        )
    ]
    mem.mark_used(ids[0])
    mem.archive(ids[2])
    buf = io.StringIO()
    assert mem.export(buf) == 3
    lines = buf.getvalue().splitlines()
    # into another database: ids and namespaces are kept
    target = Memory(
        ("restored",), settings=Settings(database_url=fresh_db), embedder=embedder, clock=clock
    )
    try:
        # import keeps ids, namespaces and lifecycle state
        report = target.import_records(lines)
        assert report["imported"] == 3
        for rid in ids:
            assert (
                target.get(rid, namespace=mem.namespace).model_dump() == mem.get(rid).model_dump()
            )
        assert target.search("numpy", namespace=mem.namespace)[0].record.id == ids[0]
        # importing the same file again keeps what is stored and says so
        again = target.import_records(lines)
        assert again["imported"] == 0 and again["already_present"] == 3
    finally:
        target.close()


def test_import_reports_the_bad_line_and_imports_nothing(mem: Memory) -> None:
    good = json.dumps(
        {
            "id": "8d3f2c1e-8b9a-4a7e-9c1d-2f3e4a5b6c7d",
            "namespace": ["imp", "x"],
            "trigger": "t",
            "lesson": "A good line",
        }
    )
    bad = json.dumps(
        {"id": "not-an-id", "namespace": ["imp", "x"], "trigger": "t", "lesson": "Bad id"}
    )
    with pytest.raises(ImportFormatError) as info:
        mem.import_records([good, "{not json", bad])
    assert info.value.line == 2
    assert mem.stats(namespace=("imp", "x")).records == 0
    report = mem.import_records([good, "{not json", bad], skip_invalid=True)
    assert report["imported"] == 1 and report["skipped_lines"] == [2, 3]


def test_model_mismatch_and_reindex(fresh_db: str, embedder) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(database_url=fresh_db)
    mem = Memory(("r",), settings=settings, embedder=embedder)
    rid = mem.write(rec("Check the extension before deleting")).id
    mem.close()

    # another model: the real one, projected to 128 dimensions, under another name
    projection = np.random.default_rng(0).normal(size=(384, 128))
    other = CallableEmbedder(
        lambda texts: np.asarray(embedder.embed(texts)) @ projection,
        dim=128,
        model_name="minilm-projected-128",
    )
    mem2 = Memory(("r",), settings=settings, embedder=other)
    with pytest.raises(EmbeddingModelMismatchError, match="hindsight reindex"):
        mem2.search("delete files")
    seen: list[tuple[int, int]] = []
    assert mem2.reindex(progress=lambda done, total: seen.append((done, total))).reembedded == 1
    assert seen[-1] == (1, 1)
    assert mem2.search("check extension before deleting")[0].record.id == rid
    assert mem2.stats().embedding_model == "minilm-projected-128"
    mem2.close()
