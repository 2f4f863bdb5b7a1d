"""HindsightStore beyond PostgresStore parity: TTL, hybrid ranking, embedder kinds.

Internals: BM25's constants (``storage.fulltext_sql``) for an expected score, and the
item search statement (``storage.items_search_sql``, ``runtime.cursors``) for its plan."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import PutOp

from hindsight_adapters.langgraph import HindsightSearchItem, HindsightStore, LangChainEmbedder
from hindsight_core import EmbeddingError, Memory, Settings
from hindsight_core.storage.fulltext_sql import K1, B
from tests._clock import Clock
from tests._lg_store_util import DIMS, char_embed
from tests._stats import analyze


@pytest.fixture
def ns() -> tuple[str, str]:
    return ("feat", uuid.uuid4().hex[:10])


# ---------------------------------------------------------------------- TTL


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``check`` until it holds (the sweeper runs on its own thread or task)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def _aeventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _clocked_store(settings: Settings, ttl: dict) -> tuple[HindsightStore, Clock]:
    """A store whose expiry reads a test clock (the sweeper's interval is real time)."""
    clock = Clock()
    return HindsightStore(memory=Memory(settings=settings, clock=clock), ttl=ttl), clock


def test_fractional_ttl_refresh_on_read_and_sweeper(settings: Settings, ns) -> None:
    # sweep every 30 ms of real time; expiry follows the test clock
    ttl = {"default_ttl": 0.02, "refresh_on_read": True, "sweep_interval_minutes": 0.0005}
    store, clock = _clocked_store(settings, ttl)
    store.start_ttl_sweeper()
    store.put(ns, "refreshed", {"v": 1})  # default_ttl: 1.2 s
    store.put(ns, "idle", {"v": 2})
    store.put(ns, "forever", {"v": 3}, ttl=None)
    store.put(ns, "short", {"v": 4}, ttl=0.005)  # 0.3 s, not rounded to whole minutes
    for _ in range(4):
        clock.now += timedelta(seconds=0.45)
        assert store.get(ns, "refreshed") is not None  # each read extends it
    # expired and swept (a get without refresh returns unswept items, see below)
    assert _eventually(lambda: store.get(ns, "idle", refresh_ttl=False) is None)
    assert _eventually(lambda: store.get(ns, "short", refresh_ttl=False) is None)
    assert store.get(ns, "forever") is not None
    hits = store.search(ns, refresh_ttl=False)
    assert sorted(h.key for h in hits) == ["forever", "refreshed"]
    clock.now += timedelta(seconds=1.6)  # no more reads: it expires too
    assert _eventually(lambda: [h.key for h in store.search(ns, refresh_ttl=False)] == ["forever"])
    assert store.stop_ttl_sweeper(timeout=5)
    store.close()


def test_omit_expired_hides_unswept_items_and_sweep_ttl(settings: Settings, ns) -> None:
    store, clock = _clocked_store(settings, {"omit_expired": True})
    store.put(ns, "gone", {"v": 1}, ttl=0.001)
    store.put(ns, "kept", {"v": 2})
    clock.now += timedelta(seconds=0.2)
    assert store.get(ns, "gone") is None
    assert [h.key for h in store.search(ns)] == ["kept"]
    store.ttl_config = {"omit_expired": False}
    assert store.get(ns, "gone", refresh_ttl=True) is not None  # unswept, and not revived
    assert store.sweep_ttl() >= 1
    assert store.get(ns, "gone") is None
    store.close()


async def test_async_sweeper_and_ttl(settings: Settings, ns) -> None:
    store, clock = _clocked_store(
        settings, {"default_ttl": 0.003, "sweep_interval_minutes": 0.0005}
    )
    task = await store.astart_ttl_sweeper()
    await store.aput(ns, "a", {"v": 1})
    assert (await store.aget(ns, "a")) is not None
    clock.now += timedelta(seconds=0.6)  # past the 0.18 s TTL

    async def swept() -> bool:
        return (await store.aget(ns, "a", refresh_ttl=False)) is None

    assert await _aeventually(swept)
    assert await store.astop_ttl_sweeper()
    assert task.done()
    with pytest.raises(ValueError, match="ttl"):
        await store.aput(ns, "b", {"v": 1}, ttl=-1)
    await store.aclose()


# ---------------------------------------------------------------------- hybrid ranking


def test_hybrid_ranking_fuses_keyword_semantic_and_recency(
    settings: Settings, embedder, ns
) -> None:
    # The session's shared table: it holds many "rotate the API keys" items of other
    # tests, so ANALYZE finds those terms common in the table; their document frequency
    # here is still this namespace's own (fulltext_sql.bm25_ctes; checked against
    # rank_bm25 in tests/test_core_keyword.py).
    now = datetime.now(UTC)
    clock = [now - timedelta(days=400)]
    memory = Memory(settings=settings, embedder=embedder, clock=lambda: clock[0])
    store = HindsightStore(
        memory=memory, index={"dims": embedder.dim, "embed": embedder, "fields": ["text"]}
    )
    assert store.ranking == "hybrid"
    store.put(ns, "old", {"text": "Rotate the API keys of the billing service"})
    clock[0] = now
    store.put(ns, "new", {"text": "Rotate the API keys of the billing service"})
    store.put(ns, "kw", {"text": "zx81 cartridge firmware checksum"})
    store.put(ns, "other", {"text": "Water the office plants on Fridays"})
    analyze(settings.database_url or "", "hindsight_item_vectors")  # tests/_stats

    hits = store.search(ns, query="rotate billing API keys")
    assert [h.key for h in hits[:2]] == ["new", "old"]  # same text: recency decides
    for h in hits:
        assert isinstance(h, HindsightSearchItem)
        b = h.breakdown
        assert h.score == pytest.approx(b.final)
        assert b.relevance == pytest.approx(0.7 * b.semantic + 0.3 * b.keyword)
        assert b.final == pytest.approx(b.relevance * b.decay**settings.score_weight)
    # it holds every query word: the whole of the query's IDF (Lucene's: positive for a
    # word in half the items), scaled by BM25's length normalisation only (5 distinct
    # terms against the namespace's mean of 4.5), not to the best candidate's score
    length_norm = 1 + K1 * (1 - B + B * 5 / ((5 + 5 + 4 + 4) / 4))
    assert hits[0].breakdown.keyword == pytest.approx((K1 + 1) / length_norm)
    assert hits[0].breakdown.keyword == max(h.breakdown.keyword for h in hits)
    assert hits[1].breakdown.decay < 0.3 < hits[0].breakdown.decay
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    kw = store.search(ns, query="zx81")  # a rare token: the full keyword score
    assert kw[0].key == "kw" and kw[0].breakdown.keyword == pytest.approx(1.0)
    # vector ranking on the same store: plain cosine similarity, no breakdown
    vec = store.items.search(ns, query="rotate billing API keys", ranking="vector")
    assert vec[0].breakdown is None
    assert vec[0].score == pytest.approx(hits[0].breakdown.semantic, abs=1e-4)
    store.close()


async def test_hybrid_async_with_langchain_embeddings(settings: Settings, ns) -> None:
    class Chars(Embeddings):
        def __init__(self) -> None:
            self.calls = 0
            self.queries: list[str] = []

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise AssertionError("the async path must use aembed_documents")

        async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
            self.calls += 1
            return char_embed(texts)

        def embed_query(self, text: str) -> list[float]:
            raise AssertionError("the async path must use aembed_query")

        async def aembed_query(self, text: str) -> list[float]:
            self.queries.append(text)
            return char_embed([text])[0]

    emb = Chars()
    store = HindsightStore(settings=settings, index={"dims": DIMS, "embed": emb})
    assert isinstance(store.items.embedder, LangChainEmbedder)
    assert store.index_config["embed"] is emb and store.embeddings is emb
    await store.abatch(
        [PutOp(ns, "a", {"text": "hello world"}), PutOp(ns, "b", {"text": "goodbye moon"})]
    )
    hits = await store.asearch(ns, query="hello")
    assert hits[0].key == "a" and hits[0].breakdown.keyword > 0
    assert emb.calls == 1 and emb.queries == ["hello"]  # stored texts, then the query
    await store.aclose()


def test_embed_function_and_wrong_dims(settings: Settings, ns) -> None:
    store = HindsightStore(settings=settings, index={"dims": DIMS + 1, "embed": char_embed})
    with pytest.raises(EmbeddingError, match="dimension"):
        store.put(ns, "a", {"text": "x"})
    assert store.get(ns, "a") is None  # nothing written
    store.close()


def test_no_argument_constructor_uses_the_configured_database(database_url: str, ns) -> None:
    """``HindsightStore()``: HINDSIGHT_DATABASE_URL (set by conftest), else embedded."""
    store = HindsightStore()
    store.put(ns, "k", {"v": 1})
    assert store.get(ns, "k").value == {"v": 1}
    assert store.memory.engine.url.database == "postgres"
    assert store.search(ns, query="ignored without an index")[0].score is None
    store.close()


async def test_async_side_of_a_store_on_a_given_memory_uses_its_database(
    settings: Settings, fresh_db: str, ns
) -> None:
    """A store built on a ``Memory`` with a database URL of its own: the async side
    opened the configured database instead (sync writes were not there), and built a
    second embedder instead of sharing the memory's."""
    memory = Memory(settings=settings, database_url=fresh_db)
    store = HindsightStore(memory=memory)
    try:
        store.put(ns, "k", {"v": 1})
        assert store.amemory.database_url == fresh_db != settings.database_url
        assert store.amemory.embedder is memory.embedder
        item = await store.aget(ns, "k")
        assert item is not None and item.value == {"v": 1}
    finally:
        await store.aclose()
        store.close()
        memory.close()


def test_hybrid_search_exact_scan_and_index_scan_agree(settings: Settings, embedder, ns) -> None:
    """Hybrid item search finds semantic candidates by an exact scan in small namespace
    prefixes and through the HNSW index elsewhere (decided per prefix, cached); both
    statements rank the same items the same way."""
    topics = ["billing", "deploys", "backups", "on-call", "invoices", "search", "caching"]
    index = {"dims": embedder.dim, "embed": embedder, "fields": ["text"]}
    results = []
    for scan in ("exact", "index"):  # HINDSIGHT_SEMANTIC_SCAN pins the choice
        memory = Memory(
            settings=settings.model_copy(update={"semantic_scan": scan}), embedder=embedder
        )
        store = HindsightStore(memory=memory, index=index)
        try:
            if scan == "exact":
                store.batch(
                    [
                        PutOp(ns, f"k{i}", {"text": f"Note {i} about {topics[i % 7]} and step {i}"})
                        for i in range(70)
                    ]
                )
                analyze(settings.database_url or "", "hindsight_item_vectors")  # tests/_stats
            hits = store.search(ns, query="how do we handle invoices", limit=5)
        finally:
            store.close()
            memory.close()
        assert {h.breakdown.scan for h in hits} == {scan}  # type: ignore[attr-defined]
        results.append([(h.key, round(h.score, 6)) for h in hits])
    assert len(results[0]) == 5
    assert results[0] == results[1]


def test_hybrid_search_full_text_scans_do_not_read_the_prefix_range(fresh_db: str) -> None:
    """In the generic plan (the one a prepared search keeps), the keyword candidates'
    and the document-frequency counts' full-text scans filter the prefix instead of
    ANDing their bitmap with the prefix's whole primary-key range, whose cost grows
    with the prefix (hybrid search at 20k items: 4.2-5.2 -> 2.3-2.8 ms of backend CPU).
    Before, the plan held a ``BitmapAnd`` of the full-text index and the primary key."""
    import sqlalchemy as sa

    from hindsight_core.runtime.cursors import positional
    from hindsight_core.storage import items_search_sql

    store = HindsightStore(
        settings=Settings(database_url=fresh_db),
        index={"dims": DIMS, "embed": char_embed, "fields": ["text"]},
    )
    words = ["invoice", "deploy", "backup", "retry", "cache", "token", "header", "limit"]
    store.batch(
        [
            PutOp(("plans", f"u{i % 20}"), f"k{i}", {"text": f"note {i} {words[i % 8]} {i % 97}"})
            for i in range(2000)
        ]
    )
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        conn.execute(sa.text("ANALYZE"))
        conn.commit()
    spec = store.items.index.spec
    stmt = items_search_sql.hybrid_search_sql(spec, 1, (), False, True, True, 1000, False)
    sql, _ = positional(stmt)
    with engine.connect() as conn:
        plan = (
            conn.exec_driver_sql("EXPLAIN (GENERIC_PLAN, COSTS OFF) " + sql.decode())
            .scalars()
            .all()
        )
    engine.dispose()
    store.close()
    text = "\n".join(plan)
    assert "hindsight_item_vectors_tsv" in text  # the full-text index serves the scans
    assert "BitmapAnd" not in text, text
