"""Recall: paraphrased queries in English and Chinese, scene filter, score breakdown,
namespace isolation, degrading on failure; sync and async agree.

Internals: the recall statement (``storage.recall_sql``, ``fulltext_sql``, ``vectors``)
run by hand, to check the plan it keeps once prepared."""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pytest
import sqlalchemy as sa

from hindsight_core import (
    AsyncMemory,
    CallableEmbedder,
    Memory,
    NotFoundError,
    Settings,
    ValidationError,
)
from tests._stats import analyze

LESSONS = [
    {
        "scene": "file-cleanup",
        "trigger": "deleting files whose names contain dates",
        "lesson": "Check the extension before deleting dated files",
    },
    {
        "scene": "api",
        "trigger": "a third-party API returns 429 or times out",
        "lesson": "Retry with exponential backoff, at most 3 times",
    },
    {
        "scene": "deploy",
        "trigger": "shipping a release to production",
        "lesson": "Run the database migration before the deploy",
    },
    {
        "scene": "数据抓取",
        "trigger": "抓取网站数据之前",
        "lesson": "先读取robots协议，遵守抓取频率限制",
    },
    {
        "scene": "报税",
        "trigger": "每年个人所得税汇算清缴时",
        "lesson": "提交前核对发票金额和专项扣除",
        "critical": True,
    },
]


@pytest.fixture
def stocked(memory: Memory) -> Memory:
    memory.write_many(LESSONS)
    return memory


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("tidy up the downloads folder and remove old installers", "Check the extension"),
        ("the payment API keeps failing with rate limit errors", "Retry with exponential"),
        ("release the new version to prod", "Run the database migration"),
        ("爬取一个网站的商品信息", "先读取robots协议"),
        ("今年的个税汇算要注意什么", "提交前核对发票金额"),
    ],
)
def test_paraphrased_query_finds_the_lesson(stocked: Memory, query: str, expected: str) -> None:
    hits = stocked.search(query, top_k=3)
    assert hits[0].record.lesson.startswith(expected), [h.record.lesson for h in hits]


def test_scene_is_a_hard_filter(stocked: Memory) -> None:
    hits = stocked.search("remove old installers", scene="api", top_k=5)
    assert hits and all(h.record.scene == "api" for h in hits)
    assert stocked.search("remove old installers", scene="no-such-scene") == []


def test_breakdown_is_consistent(stocked: Memory) -> None:
    s = stocked.settings
    hits = stocked.search("retry when the API rate limits us", top_k=5)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for h in hits:
        b = h.breakdown
        assert 0 <= b.semantic <= 1 and 0 <= b.keyword <= 1
        assert b.relevance == pytest.approx(
            s.semantic_weight * b.semantic + s.keyword_weight * b.keyword
        )
        assert b.final == pytest.approx(b.relevance * b.decay**s.score_weight)
        assert h.score == b.final
    compact = hits[0].compact()
    assert list(compact)[:2] == ["lesson", "trigger"] and {"id", "score", "scene"} <= set(compact)


def test_filters(stocked: Memory) -> None:
    hits = stocked.search("个税", filters={"critical": True})
    assert [h.record.lesson for h in hits] == ["提交前核对发票金额和专项扣除"]
    with pytest.raises(ValidationError, match="filters.colour"):
        stocked.search("x", filters={"colour": "red"})
    with pytest.raises(ValidationError, match="filters.critical"):
        stocked.search("x", filters={"critical": "yes"})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "a\x00b"}, "query"),
        ({"query": 42}, "query"),
        ({"query": "x" * 10_001}, "query"),
        ({"query": "x", "top_k": 0}, "top_k"),
        ({"query": "x", "top_k": "lots"}, "top_k"),
        ({"query": "x", "scene": ""}, "scene"),
    ],
)
def test_bad_search_arguments(stocked: Memory, kwargs: dict, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        stocked.search(**kwargs)
    assert info.value.field == field


def test_top_k_as_string_is_coerced(stocked: Memory) -> None:
    assert len(stocked.search("deploy", top_k="2")) == 2  # type: ignore[arg-type]


def test_namespace_isolation(settings: Settings, embedder, stocked: Memory) -> None:  # type: ignore[no-untyped-def]
    other = Memory(("other", stocked.namespace[1]), settings=settings, embedder=embedder)
    try:
        rid = stocked.search("deploy to production")[0].record.id
        assert other.search("deploy to production") == []
        for call in (other.get, other.forget, other.mark_used, other.archive):
            with pytest.raises(NotFoundError):
                call(rid)
        with pytest.raises(NotFoundError):
            other.edit(rid, lesson="hijacked")
        # a near-duplicate written in B is not merged into A's record
        assert other.write(LESSONS[2]).status == "inserted"
        rec = stocked.get(rid)
        assert rec.use_count == 0 and rec.archived_at is None and rec.occurrences == 1
    finally:
        other.close()


def test_recall_degrades_when_the_database_is_unreachable(
    embedder,
    caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    down = Memory(
        ("x",),
        embedder=embedder,
        settings=Settings(database_url="postgresql://nobody@127.0.0.1:1/none", connect_timeout=1),
    )
    with caplog.at_level(logging.WARNING, logger="hindsight"):
        result = down.recall("anything")
    assert result.hits == [] and result.degraded and "unavailable" in result.warning
    assert any("recall degraded" in r.getMessage() for r in caplog.records)
    down.close()


async def test_async_recall_degrades(embedder) -> None:  # type: ignore[no-untyped-def]
    down = AsyncMemory(
        ("x",),
        embedder=embedder,
        settings=Settings(database_url="postgresql://nobody@127.0.0.1:1/none", connect_timeout=1),
    )
    result = await down.recall("anything")
    assert result.degraded and result.hits == []
    await down.aclose()


async def test_sync_and_async_rank_identically(stocked: Memory, settings, embedder) -> None:  # type: ignore[no-untyped-def]
    # Both fresh, so that both read the table's common terms (which terms generate
    # keyword candidates, cached a minute per memory) from the same table state: a
    # memory made earlier in the session may hold an older set.
    mem = Memory(stocked.namespace, settings=settings, embedder=embedder, clock=stocked.clock)
    amem = AsyncMemory(stocked.namespace, settings=settings, embedder=embedder, clock=stocked.clock)
    try:
        for query in ("remove installers", "个税汇算", "API errors"):
            sync_hits = mem.search(query)
            async_hits = await amem.search(query)
            assert [h.record.id for h in sync_hits] == [h.record.id for h in async_hits]
            assert [round(h.score, 6) for h in sync_hits] == [round(h.score, 6) for h in async_hits]
        assert (await amem.recall("deploy")).hits
    finally:
        mem.close()
        await amem.aclose()


def test_min_relevance_floor_drops_weak_hits(
    stocked: Memory,
    settings: Settings,
    embedder,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hindsight_core.items import ItemIndex, Items, PutItem

    monkeypatch.setenv("HINDSIGHT_MIN_RELEVANCE", "0.25")
    assert Settings().min_relevance == 0.25
    query = "release the new version to prod"
    every = stocked.search(query, top_k=5)
    assert len(every) == 5  # default floor 0.0: nothing is dropped
    rel = sorted(h.breakdown.relevance for h in every)
    floor = (rel[0] + rel[-1]) / 2
    floored = Memory(
        stocked.namespace,
        embedder=embedder,
        clock=stocked.clock,
        settings=settings.model_copy(update={"min_relevance": floor}),
    )
    try:
        kept = floored.search(query, top_k=5)
        assert kept and len(kept) < len(every)
        assert all(h.breakdown.relevance >= floor for h in kept)
        assert [h.record.id for h in kept] == [
            h.record.id for h in every if h.breakdown.relevance >= floor
        ]
    finally:
        floored.close()
    # item hybrid search applies the floor to its fused relevance; vector ranking does not
    ns, q = ("floor", *stocked.namespace), "deploy the release with its migration"
    index = ItemIndex(dims=embedder.dim, fields=("text",))
    plain = Items(stocked, index=index)
    plain.batch(
        [
            PutItem(ns, "a", {"text": "run the migration before the deploy"}),
            PutItem(ns, "b", {"text": "a recipe for banana bread"}),
        ]
    )
    unfloored = plain.search(ns, query=q, limit=5)
    assert [h.item.key for h in unfloored] == ["a", "b"]
    item_floor = sum(h.breakdown.relevance for h in unfloored if h.breakdown) / 2
    mem = Memory(
        stocked.namespace,
        embedder=embedder,
        clock=stocked.clock,
        settings=settings.model_copy(update={"min_relevance": item_floor}),
    )
    items = Items(mem, index=index)
    try:
        hits = items.search(ns, query=q, limit=5)
        assert [h.item.key for h in hits] == ["a"]
        assert hits[0].breakdown is not None and hits[0].breakdown.relevance >= item_floor
        vector = items.search(ns, query=q, limit=5, ranking="vector")
        assert [h.item.key for h in vector] == ["a", "b"]
    finally:
        items.close()
        plain.close()
        mem.close()


def _scanning(mem: Memory, scan: str) -> Memory:
    """Another front end on ``mem``'s records whose recall always scans ``scan``
    (``HINDSIGHT_SEMANTIC_SCAN``)."""
    return Memory(
        mem.namespace,
        embedder=mem.embedder,
        clock=mem.clock,
        settings=mem.settings.model_copy(update={"semantic_scan": scan}),
    )


@pytest.mark.parametrize("scene", [None, "api"])
def test_exact_scan_and_index_scan_rank_alike(stocked: Memory, scene: str | None) -> None:
    """The two fixed-shape recall statements (exact scan for small namespaces, HNSW for
    the rest) return the same hits with the same scores."""
    stocked.write_many(
        [
            {
                "scene": "api",
                "trigger": f"calling endpoint number {i}",
                "lesson": f"Cache the response of endpoint {i} for a minute",
            }
            for i in range(60)
        ]
    )
    analyze(stocked.settings.database_url or "", "hindsight_experiences")  # see tests/_stats
    results = []
    for scan in ("exact", "index"):
        mem = _scanning(stocked, scan)
        try:
            hits = mem.search(
                "the payment API keeps failing with rate limit errors", top_k=5, scene=scene
            )
        finally:
            mem.close()
        assert {h.breakdown.scan for h in hits} == {scan}, "the setting chose the scan"
        results.append([(h.record.id, round(h.score, 6)) for h in hits])
    assert len(results[0]) == 5
    assert results[0] == results[1]


@pytest.mark.parametrize("scan", ["exact", "index"])
async def test_async_recall_takes_and_reports_the_pinned_scan(stocked: Memory, scan: str) -> None:
    amem = AsyncMemory(
        stocked.namespace,
        embedder=stocked.embedder,
        settings=stocked.settings.model_copy(update={"semantic_scan": scan}),
    )
    try:
        hits = await amem.search("the payment API keeps failing", top_k=3)
        recalled = await amem.recall("the payment API keeps failing", top_k=3)
    finally:
        await amem.aclose()
    assert hits and {h.breakdown.scan for h in hits} == {scan}
    assert {h.breakdown.scan for h in recalled.hits} == {scan}
    # the default decides: a namespace of a few records is scanned exactly
    assert {h.breakdown.scan for h in stocked.search("the payment API", top_k=3)} == {"exact"}


def test_scan_choice_is_exact_only_for_a_small_namespace_of_a_large_table(
    fresh_db: str,
) -> None:
    def by_first_line(texts: list[str]) -> np.ndarray:
        """A random vector per lesson (the first line of a record's embedding text)."""
        seeds = [int(hashlib.sha1(t.split("\n")[0].encode()).hexdigest()[:8], 16) for t in texts]
        return np.stack([np.random.default_rng(s).standard_normal(16) for s in seeds])

    emb = CallableEmbedder(by_first_line, dim=16, model_name="random-16")
    settings = Settings(database_url=fresh_db)
    big = Memory(("big",), settings=settings, embedder=emb)
    small = Memory(("small",), settings=settings, embedder=emb)
    big.write_many(
        [
            {"scene": "s", "trigger": f"case {i}", "lesson": f"Lesson number {i}"}
            for i in range(2100)
        ]
    )
    small.write_many(
        [{"scene": "s", "trigger": f"case {i}", "lesson": f"Lesson number {i}"} for i in range(60)]
    )
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE hindsight_experiences"))
        conn.commit()
    engine.dispose()

    def scans(mem: Memory) -> set[str | None]:
        return {h.breakdown.scan for h in mem.search("Lesson number 7", top_k=3)}

    assert scans(small) == {"exact"}
    assert scans(big) == {"index"}
    # each finds what it holds: the query "is" a record's lesson, so its vector is
    # the record's, and the record comes first
    for mem in (big, small):
        for target in mem.list_records(limit=5):
            hits = mem.search(target.lesson, top_k=3)
            assert hits[0].record.id == target.id
            assert hits[0].breakdown.semantic == pytest.approx(1.0, abs=1e-5)
        mem.close()


def test_terms_in_over_2_percent_of_records_generate_no_keyword_candidates(
    fresh_db: str,
) -> None:
    """A term in 5 % of 400 records (20, far below ``keyword_scan_limit``) counts as
    common; one in 1 % does not (``fulltext_sql.COMMON_TERM_SHARE``). Common terms
    still count in the keyword score; they only generate no keyword candidates."""

    def random_vectors(texts: list[str]) -> np.ndarray:
        return np.random.default_rng(len(texts)).standard_normal((len(texts), 16))

    emb = CallableEmbedder(random_vectors, dim=16, model_name="random-16")
    mem = Memory(("terms",), settings=Settings(database_url=fresh_db), embedder=emb)
    mem.write_many(
        [
            {
                "trigger": f"case {i}",
                "lesson": f"Lesson {i}"
                + (" zebra" if i % 20 == 0 else "")
                + (" quokka" if i % 100 == 0 else ""),
            }
            for i in range(400)
        ]
    )
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE hindsight_experiences"))
        conn.commit()
    engine.dispose()
    assert mem.settings.keyword_scan_limit > 20
    # Ranked by the keyword score alone (the vectors are random): a term that generates
    # keyword candidates brings every record that holds it to the top.
    by_keyword = Memory(
        ("terms",),
        settings=mem.settings.model_copy(update={"semantic_weight": 0.0, "keyword_weight": 1.0}),
        embedder=emb,
    )
    try:
        quokka = by_keyword.search("quokka", top_k=10)
        assert sum("quokka" in h.record.lesson for h in quokka) == 4
        assert all(h.breakdown.keyword > 0 for h in quokka[:4])
        zebra = by_keyword.search("zebra", top_k=10)
        # 20 records hold "zebra", but only those among the 40 random semantic
        # candidates come back (and score on it)
        matched = [h for h in zebra if "zebra" in h.record.lesson]
        assert len(matched) < 10
        assert all(h.breakdown.keyword > 0 for h in matched)
    finally:
        by_keyword.close()
        mem.close()


def test_nul_and_out_of_range_arguments_are_validation_errors(memory: Memory) -> None:
    """Refused before PostgreSQL sees them (it reported them as database failures)."""
    from hindsight_core.errors import ValidationError as VE

    memory.write({"scene": "deploy", "trigger": "deploying", "lesson": "Run migrations"})
    checks = [
        ("scene", lambda: memory.search("deploy", scene="de\x00ploy")),
        ("scene", lambda: memory.recall("deploy", scene="de\x00ploy")),
        ("scene", lambda: memory.list_records(scene="\x00")),
        ("scene", lambda: memory.count_records(scene="a\x00")),
        ("offset", lambda: memory.list_records(offset=10**20)),
        ("scene", lambda: memory.write({"scene": "a\x00", "trigger": "t", "lesson": "l"})),
    ]
    for field, call in checks:
        with pytest.raises(VE) as info:
            call()
        assert info.value.field == field and field in str(info.value), str(info.value)
    assert memory.count_records() == 1


def test_recall_statement_keeps_a_generic_plan(fresh_db: str) -> None:
    """Prepared (as the fast path prepares it), the recall statement with the BM25
    keyword side is planned once: PostgreSQL switches to its generic plan after five
    custom ones. Before, the term arrays' ``unnest`` was estimated from the values in
    a custom plan (4 terms) but at 10 rows in the generic one, which therefore looked
    costlier: every call was planned again (~1.4 ms per recall at any size)."""
    from hindsight_core.storage import fulltext_sql as fts
    from hindsight_core.storage import recall_sql
    from hindsight_core.storage.vectors import vector_param
    from hindsight_core.text import tsquery_terms

    def random_vectors(texts: list[str]) -> np.ndarray:
        return np.random.default_rng(len(texts)).standard_normal((len(texts), 16))

    emb = CallableEmbedder(random_vectors, dim=16, model_name="random-16")
    mem = Memory(("plans",), settings=Settings(database_url=fresh_db), embedder=emb)
    words = ["retry", "payment", "limits", "rate", "cache", "deploy", "tokens", "header"]
    mem.write_many(
        [{"trigger": f"case {i}", "lesson": f"Lesson {i} {words[i % 8]}"} for i in range(2000)]
    )
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE hindsight_experiences"))
        conn.commit()
    engine.dispose()
    terms = tsquery_terms("retry the payment when rate limits hit")
    assert len(terms) >= 4
    stmt = recall_sql.search_sql(
        16, scene=False, keyword=True, filters=(), candidates=20, keyword_candidates=True
    )
    s = mem.settings
    params = {
        "ns": mem.namespace_key(None),
        "scene": None,
        "tsq_cand": fts.tsquery_literal(terms),
        **fts.bm25_params(terms, {}),
        "qvec": vector_param(random_vectors(["q"])[0]),
        "top_k": 5,
        "w_sem": s.semantic_weight,
        "w_kw": s.keyword_weight,
        "score_weight": s.score_weight,
        "decay_factor": 0.9,
        "now": "2026-01-01T00:00:00Z",
        "decay_period_s": 2592000.0,
        "min_relevance": 0.0,
        "include_superseded": False,
    }
    sql = str(stmt.compile(dialect=mem.engine.dialect))
    raw = mem.engine.raw_connection()
    try:
        conn = raw.driver_connection
        conn.autocommit = True
        for _ in range(8):
            rows = conn.execute(sql, params, prepare=True).fetchall()
        assert len(rows) == 5
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%kw_idf%'"
        ).fetchall()
    finally:
        raw.close()
        mem.close()
    assert plans == [(3, 5)]


def test_a_record_found_by_both_arms_comes_back_once(fresh_db: str) -> None:
    """A record that is a semantic candidate and a keyword candidate at once comes out
    of both arms of the recall statement with the same scores; ``DISTINCT ON`` keeps
    one (``recall_sql.search_sql``), so the namespace's three records come back once
    each, and the one holding the query's rare word with its keyword score."""
    import uuid

    def hash_vectors(texts: list[str]) -> np.ndarray:
        seeds = [int(hashlib.sha1(t.encode()).hexdigest()[:8], 16) for t in texts]
        return np.stack([np.random.default_rng(s).standard_normal(16) for s in seeds])

    emb = CallableEmbedder(hash_vectors, dim=16, model_name="hash-16")
    word = "zq" + uuid.uuid4().hex[:8]
    mem = Memory(("both",), settings=Settings(database_url=fresh_db), embedder=emb)
    try:
        mem.write_many(
            [
                {"trigger": "rotating keys", "lesson": f"Rotate the {word} keys monthly"},
                {"trigger": "cache misses", "lesson": "Warm the cache before the release"},
                {"trigger": "slow queries", "lesson": "Add the missing index first"},
            ]
        )
        hits = mem.search(f"when to rotate {word}", top_k=5)
    finally:
        mem.close()
    assert len(hits) == 3
    assert len({h.record.id for h in hits}) == 3
    tagged = [h for h in hits if word in h.record.lesson]
    assert len(tagged) == 1 and tagged[0].breakdown.keyword > 0
