"""The write path: validation, coercion, dedup and its guard, batches.

Internals: ``storage.scan_sql.DEDUP_VECTORS`` run by hand, to check its choice between
an exact scan and the index."""

from __future__ import annotations

import math
import uuid
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from _pool import backends, tagged

from hindsight_core import AsyncMemory, CallableEmbedder, Memory, Settings, ValidationError
from hindsight_core.memory import write_flows
from hindsight_core.storage import scan_sql

GOOD = {
    "scene": "file-cleanup",
    "trigger": "cleaning the downloads folder",
    "lesson": "Check the extension before deleting files",
}


def count_rows(memory: Memory) -> int:
    return (
        memory.stats(namespace=memory.namespace).records
        + memory.stats(namespace=memory.namespace).archived
    )


def test_numbers_as_strings_are_coerced_and_timestamps_normalised(memory: Memory) -> None:
    res = memory.write(
        {
            **GOOD,
            "confidence": "0.8",
            "importance": "0.5",
            "created_at": "2026-01-02T10:00:00+02:00",
        }
    )
    rec = memory.get(res.id)
    assert rec.confidence == pytest.approx(0.8)
    assert rec.importance == pytest.approx(0.5)
    assert rec.created_at.utcoffset().total_seconds() == 0
    assert rec.created_at.hour == 8


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({**GOOD, "lesson": "x" * 51}, "lesson"),
        ({**GOOD, "lesson": "检" * 51}, "lesson"),
        ({**GOOD, "lesson": ""}, "lesson"),
        ({k: v for k, v in GOOD.items() if k != "lesson"}, "lesson"),
        ({**GOOD, "confidence": "high"}, "confidence"),
        ({**GOOD, "confidence": float("nan")}, "confidence"),
        ({**GOOD, "confidence": math.inf}, "confidence"),
        ({**GOOD, "confidence": 1.5}, "confidence"),
        ({**GOOD, "importance": [1]}, "importance"),
        ({**GOOD, "critical": "maybe"}, "critical"),
        ({**GOOD, "colour": "red"}, "colour"),
        ({**GOOD, "trigger": "nul\x00byte"}, "trigger"),
        ({**GOOD, "created_at": "yesterday"}, "created_at"),
        ({**GOOD, "scene": 42}, "scene"),
    ],
)
def test_bad_records_are_rejected_naming_the_field(
    memory: Memory, record: dict, field: str
) -> None:
    memory.write(GOOD)
    before = count_rows(memory)
    with pytest.raises(ValidationError) as info:
        memory.write(record)
    assert field in str(info.value)
    assert count_rows(memory) == before


def test_cjk_lesson_counts_characters(memory: Memory) -> None:
    assert memory.write({**GOOD, "lesson": "检" * 50}).status == "inserted"


@pytest.mark.parametrize("bad_ns", [(), ("",), ("a", 3), "", ("a\x00b",), ("x" * 201,)])
def test_bad_namespaces_are_rejected(memory: Memory, bad_ns: object) -> None:
    with pytest.raises(ValidationError, match="namespace"):
        memory.write(GOOD, namespace=bad_ns)  # type: ignore[arg-type]


def test_sql_metacharacters_and_unicode_are_stored_verbatim(memory: Memory) -> None:
    lesson = "Quote ' and \"; DROP TABLE x; -- ok 🙂"
    res = memory.write({**GOOD, "lesson": lesson, "scene": "'; DELETE --"})
    assert memory.get(res.id).lesson == lesson
    hits = memory.search("DROP TABLE quote '; --", scene="'; DELETE --")
    assert [h.record.id for h in hits] == [res.id]


def test_paraphrase_merges_and_different_lesson_does_not(memory: Memory) -> None:
    first = memory.write(GOOD)
    same = memory.write({**GOOD, "lesson": "Check file extensions before deleting files."})
    other = memory.write({**GOOD, "lesson": "Back up the folder before deleting files"})
    assert same.status == "merged" and same.id == first.id and same.similarity >= 0.92
    assert other.status == "inserted"
    rec = memory.get(first.id)
    assert rec.occurrences == 2 and rec.last_used_at is not None
    assert count_rows(memory) == 2


def test_dedup_threshold_is_configurable(settings, embedder, namespace) -> None:  # type: ignore[no-untyped-def]
    strict = Memory(
        namespace,
        settings=settings.model_copy(update={"dedup_threshold": 0.999}),
        embedder=embedder,
    )
    strict.write(GOOD)
    assert (
        strict.write({**GOOD, "lesson": "Check file extensions before deleting files"}).status
        == "inserted"
    )
    strict.close()


def test_write_many_dedups_within_the_batch_and_against_stored(memory: Memory) -> None:
    memory.write(GOOD)
    results = memory.write_many(
        [
            {**GOOD, "lesson": "Check file extensions before deleting files"},
            {**GOOD, "lesson": "Retry flaky API calls with backoff", "trigger": "API errors"},
            {**GOOD, "lesson": "Retry flaky API calls using backoff", "trigger": "API errors"},
            {**GOOD, "lesson": "Increase the timeout when the API is slow", "trigger": "API"},
            {**GOOD, "lesson": "Decrease the timeout when the API is slow", "trigger": "API"},
        ]
    )
    assert [r.status for r in results] == ["merged", "inserted", "merged", "inserted", "inserted"]
    assert results[2].id == results[1].id
    assert memory.get(results[1].id).occurrences == 2
    assert count_rows(memory) == 4


def test_write_many_is_all_or_nothing(memory: Memory) -> None:
    with pytest.raises(ValidationError, match=r"records\[1\]"):
        memory.write_many([GOOD, {**GOOD, "lesson": ""}])
    assert count_rows(memory) == 0


def test_write_many_is_faster_per_record_than_single_writes(memory: Memory, embedder) -> None:  # type: ignore[no-untyped-def]
    """Not a timing assertion: the batch uses a constant number of statements."""
    statements: list[str] = []

    def count(conn, cursor, statement, *args):  # type: ignore[no-untyped-def]
        statements.append(statement)

    memory.setup()
    sa.event.listen(memory.engine, "before_cursor_execute", count)
    try:
        memory.write_many(
            [
                {**GOOD, "lesson": f"Lesson number {i} about topic {i * 7}", "trigger": f"case {i}"}
                for i in range(40)
            ]
        )
    finally:
        sa.event.remove(memory.engine, "before_cursor_execute", count)
    # lock + nearest-neighbour + one executemany insert (+ possibly pre-ping)
    assert len([s for s in statements if "INSERT" in s or "nearest" in s or "SELECT" in s]) <= 6


@pytest.mark.parametrize(
    ("a", "b", "merge"),
    [
        # English paraphrases merge
        (
            "Check the extension before deleting files",
            "Check file extensions before deleting files",
            True,
        ),
        (
            "Retry flaky API calls with exponential backoff",
            "Retry flaky API calls using exponential backoff",
            True,
        ),
        (
            "Restart the worker after changing its config",
            "Restart the worker after its config changes",
            True,
        ),
        # English lessons that differ in meaning never merge, however close the vectors
        (
            "Increase the timeout when the API is slow",
            "Decrease the timeout when the API is slow",
            False,
        ),
        ("Back up the database before migrating", "Back up the database after migrating", False),
        (
            "Check the extension before deleting files",
            "Do not check the extension before deleting files",
            False,
        ),
        (
            "Retry 3 times when the upload times out",
            "Retry 5 times when the upload times out",
            False,
        ),
        (
            "Run the full test suite before deploying",
            "Check monitoring alerts after deploying",
            False,
        ),
        # Chinese rewordings merge
        ("调用接口失败时使用指数退避重试", "接口调用失败时用指数退避重试", True),
        ("删除文件前先检查扩展名", "删除文件之前先检查扩展名", True),
        # Different Chinese lessons never merge (the English-only model scores them high)
        ("删除文件前先检查扩展名", "删除文件前先备份数据库", False),
        ("报税前先核对发票金额", "报税前先核对发票日期", False),
        ("部署前先运行全部测试", "部署后先运行全部测试", False),
        ("调用接口失败时使用指数退避重试", "调用接口前先检查令牌是否过期", False),
        ("删除文件前先检查扩展名", "删除文件前不检查扩展名", False),
    ],
)
def test_labelled_pairs(memory: Memory, a: str, b: str, merge: bool) -> None:
    first = memory.write({"scene": "s", "trigger": "t", "lesson": a})
    second = memory.write({"scene": "s", "trigger": "t", "lesson": b})
    assert (second.status == "merged") is merge, (a, b, second)
    if merge:
        assert second.id == first.id


def test_language_warning_is_logged_once(memory: Memory, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="hindsight"):
        memory.write({"scene": "s", "trigger": "抓取网页时", "lesson": "先检查robots协议再抓取"})
        memory.write({"scene": "s", "trigger": "报税时", "lesson": "报税前先核对发票金额"})
    warnings = [r for r in caplog.records if "multilingual" in r.getMessage()]
    assert len(warnings) == 1


RETRY = {**GOOD, "lesson": "Retry flaky API calls with backoff", "trigger": "API errors"}
SLOW = {**GOOD, "lesson": "Increase the timeout when the API is slow", "trigger": "API"}
STORED = [GOOD, RETRY, SLOW]
BATCH = [
    {**GOOD, "lesson": "Check file extensions before deleting files"},
    {**RETRY, "lesson": "Retry flaky API calls using backoff"},
    {**SLOW, "lesson": "Decrease the timeout when the API is slow"},  # vetoed
    {**GOOD, "lesson": "Back up the folder before deleting files"},
]


def _pin_lookup(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Force the dedup lookup's path: exact, the HNSW index, or the index a stage at a
    time (``stages``: of 1, 2 and 1 records, each stage's lookup on the side
    connection while the stage before inserts; ``exact stages``: compared exactly)."""
    if path.endswith("stages"):
        monkeypatch.setattr(write_flows, "FIRST_STAGE_RECORDS", 1)
        monkeypatch.setattr(write_flows, "STAGE_RECORDS", 2)
    if path.startswith("exact"):
        monkeypatch.setattr(write_flows, "EXACT_DEDUP_PER_RECORD", 1000)
        return
    monkeypatch.setattr(write_flows, "EXACT_DEDUP_PER_RECORD", 0)
    monkeypatch.setattr(write_flows, "EXACT_DEDUP_SMALL_PER_RECORD", 0)


def _merged_as_expected(stored: list, results: list) -> None:  # type: ignore[type-arg]
    assert [r.status for r in results] == ["merged", "merged", "inserted", "inserted"]
    assert [r.id for r in results[:2]] == [stored[0].id, stored[1].id]
    assert all(r.similarity is not None and r.similarity >= 0.92 for r in results[:2])


def _side_lookups(database_url: str, app: str) -> list[dict[str, Any]]:
    """The backends of the connections tagged ``app`` whose last statement was a dedup
    lookup in the HNSW index: the side connection's (in autocommit mode, where the
    flow's own connection's last statement is its COMMIT)."""
    return [b for b in backends(database_url, app) if b["state"] == "idle" and "<=>" in b["query"]]


@pytest.mark.parametrize("path", ["exact", "index", "stages", "exact stages"])
def test_dedup_lookup_paths_merge_alike(
    settings: Settings,
    embedder: Any,
    namespace: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """A batch's dedup lookup compares a namespace small next to the batch exactly and
    asks the HNSW index otherwise (``write_flows.EXACT_DEDUP_*``); a large batch is
    looked up, planned and inserted a stage at a time (``write_flows.*STAGE_RECORDS``),
    each stage's lookup on the side connection while the stage before inserts: all
    merge the same."""
    _pin_lookup(monkeypatch, path)
    app = "hs-side-" + uuid.uuid4().hex[:8]
    url = tagged(str(settings.database_url), app)
    memory = Memory(
        namespace, settings=settings.model_copy(update={"database_url": url}), embedder=embedder
    )
    try:
        stored = memory.write_many(STORED)
        _merged_as_expected(stored, memory.write_many(BATCH))
        side = _side_lookups(str(settings.database_url), app)
        # the stages' lookups ran on a side connection, only when stages have lookups
        assert len(side) == (1 if path == "stages" else 0)
        if path == "stages":
            memory.write_many(BATCH)
            again = _side_lookups(str(settings.database_url), app)
            # ... which went back to its pool: the next batch's lookups ran on it
            assert [b["pid"] for b in again] == [side[0]["pid"]]
            assert again[0]["query_start"] > side[0]["query_start"]
    finally:
        memory.close()


async def test_async_stages_merge_alike(
    settings: Settings,
    embedder: Any,
    namespace: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _pin_lookup(monkeypatch, "stages")
    app = "hs-side-" + uuid.uuid4().hex[:8]
    url = tagged(str(settings.database_url), app)
    amemory = AsyncMemory(
        namespace, settings=settings.model_copy(update={"database_url": url}), embedder=embedder
    )
    try:
        stored = await amemory.write_many(STORED)
        _merged_as_expected(stored, await amemory.write_many(BATCH))
        side = _side_lookups(str(settings.database_url), app)
        assert len(side) == 1
        await amemory.write_many(BATCH)
        again = _side_lookups(str(settings.database_url), app)
        assert [b["pid"] for b in again] == [side[0]["pid"]]
        assert again[0]["query_start"] > side[0]["query_start"]
    finally:
        await amemory.aclose()


def test_dedup_lookup_is_exact_for_a_small_namespace_of_a_large_table(fresh_db: str) -> None:
    """``scan_sql.DEDUP_VECTORS`` reads a namespace whole when it holds at most ``cap``
    records, or at most ``cap_small`` under a fifth of the table; else nothing."""

    def random_vectors(texts: list[str]) -> np.ndarray:
        return np.random.default_rng(len(texts)).standard_normal((len(texts), 16))

    emb = CallableEmbedder(random_vectors, dim=16, model_name="random-16")
    settings = Settings(database_url=fresh_db)
    big = Memory(("big",), settings=settings, embedder=emb)
    small = Memory(("small",), settings=settings, embedder=emb)
    big.write_many([{"trigger": f"case {i}", "lesson": f"Lesson {i}"} for i in range(60)])
    small.write_many([{"trigger": f"case {i}", "lesson": f"Lesson {i}"} for i in range(5)])
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE hindsight_experiences"))

        def choice(mem: Memory, cap: int, cap_small: int) -> tuple[bool, int]:
            row = (
                conn.execute(
                    scan_sql.DEDUP_VECTORS,
                    {
                        "ns": mem.namespace_key(None),
                        "cap": cap,
                        "cap_small": cap_small,
                        "triggers": False,
                    },
                )
                .mappings()
                .one()
            )
            return row["exact"], len(row["ids"] or [])

        assert choice(small, 2, 20) == (True, 5)  # 5 records, under a fifth of 65
        assert choice(big, 2, 100) == (False, 0)  # 60 records: most of the table
        assert choice(big, 60, 0) == (True, 60)  # small next to the batch
        assert choice(small, 2, 4) == (False, 0)
    engine.dispose()
    big.close()
    small.close()


def test_a_write_looked_up_in_the_index_gives_a_new_table_statistics(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before a table's first analyze, the planner put a namespace at 0.5 % of it and
    answered each dedup lookup by sorting the namespace (37 ms per lookup at 6,000
    records: a bulk load's 1,000-record batch ran into the statement timeout). A write
    whose lookups go to the index analyzes such a table first (``scan_sql.ANALYZE``)."""
    _pin_lookup(monkeypatch, "index")

    def random_vectors(texts: list[str]) -> np.ndarray:  # one vector per text
        seeds = [sum(t.encode()) * 7919 + len(t) for t in texts]
        return np.stack([np.random.default_rng(s).standard_normal(16) for s in seeds])

    emb = CallableEmbedder(random_vectors, dim=16, model_name="random-16")
    mem = Memory(("bulk",), settings=Settings(database_url=fresh_db), embedder=emb)
    engine = sa.create_engine(fresh_db)

    def reltuples() -> float:
        with engine.connect() as conn:
            return float(
                conn.execute(
                    sa.text(
                        "SELECT reltuples FROM pg_class WHERE relname = 'hindsight_experiences'"
                    )
                ).scalar_one()
            )

    mem.write_many([{"trigger": f"case {i}", "lesson": f"Lesson {i}"} for i in range(30)])
    assert reltuples() < 0, "an empty namespace is compared exactly: nothing to look up"
    res = mem.write_many([{"trigger": f"more {i}", "lesson": f"Other {i}"} for i in range(30)])
    assert [r.status for r in res] == ["inserted"] * 30
    assert reltuples() == 30, "analyzed before the lookups, which see the stored 30"
    engine.dispose()
    mem.close()
