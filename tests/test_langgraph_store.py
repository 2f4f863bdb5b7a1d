"""HindsightStore against LangGraph's own PostgresStore, side by side on one server.

In ``ranking="vector"`` mode the same op sequences must give the same results, order
and scores as PostgresStore; where PostgresStore compares numbers as text, our
numeric behaviour is asserted instead. Embeddings are a cheap deterministic function
(character random projections) so that both stores see identical vectors.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.postgres import PostgresStore

from hindsight_adapters.langgraph import HindsightStore
from hindsight_core import Settings
from tests._lg_store_util import DIMS, char_embed, pg_url


def index(
    distance: str = "cosine",
    vector_type: str = "vector",
    kind: str = "hnsw",
    fields: list[str] | None = None,
) -> dict[str, Any]:
    ann: dict[str, Any] = {"kind": kind, "vector_type": vector_type}
    if kind == "hnsw" and vector_type == "halfvec":
        ann.update(m=8, ef_construction=32)
    return {
        "dims": DIMS,
        "embed": char_embed,
        "fields": fields,
        "distance_type": distance,
        "ann_index_config": ann,
    }


@pytest.fixture
def pair(
    request: pytest.FixtureRequest, fresh_db: str
) -> Iterator[tuple[HindsightStore, PostgresStore]]:
    """(ours in vector mode, PostgresStore) on one fresh database, same index config.

    PostgresStore's ivfflat scans probe every list (pgvector's default of 100): the
    reference must be exact, and with one probe a plan through its index (built empty,
    random centers) would return only the rows of the query's nearest list."""
    cfg = getattr(request, "param", None)
    idx = index(*cfg) if cfg else None
    with (
        PostgresStore.from_conn_string(
            pg_url(fresh_db, "-c ivfflat.probes=100"), index=idx
        ) as theirs,
        HindsightStore.from_conn_string(
            fresh_db, index=idx, ranking="vector", settings=Settings(database_url=fresh_db)
        ) as ours,
    ):
        theirs.setup()
        ours.setup()
        yield ours, theirs


def norm(result: Any) -> Any:
    """Comparable form: no timestamps; search hits with equal rounded scores sorted."""
    if isinstance(result, SearchItem):
        score = None if result.score is None else round(result.score, 4)
        return (score, result.namespace, result.key, result.value)
    if isinstance(result, Item):
        return (result.namespace, result.key, result.value)
    if isinstance(result, list):
        rows = [norm(r) for r in result]
        if result and all(isinstance(r, SearchItem) and r.score is not None for r in result):
            rows.sort(key=lambda r: (-r[0], r[1], r[2]))
        return rows
    return result


def both(pair: tuple[HindsightStore, PostgresStore], fn: Any) -> Any:
    ours, theirs = pair
    a, b = fn(ours), fn(theirs)
    assert norm(a) == norm(b)
    return a


# ---------------------------------------------------------------------- batch semantics


def test_batch_results_in_input_order_and_reads_see_pre_batch_state(pair) -> None:
    def run(store: Any) -> Any:
        store.put(("t", "foo"), "k1", {"data": "v1"})
        store.put(("t", "bar"), "k2", {"data": "v2"})
        return store.batch(
            [
                GetOp(("t", "foo"), "k1"),
                PutOp(("t", "new"), "k3", {"data": "v3"}),
                GetOp(("t", "new"), "k3"),  # the put above is not visible yet
                SearchOp(("t",), {"data": "v1"}, 10, 0),
                ListNamespacesOp(None, None, 10, 0),
                GetOp(("t",), "missing"),
            ]
        )

    res = both(pair, run)
    assert [type(r).__name__ for r in res] == [
        "Item",
        "NoneType",
        "NoneType",
        "list",
        "list",
        "NoneType",
    ]
    assert [norm(x) for x in res[4]] == [("t", "bar"), ("t", "foo")]
    assert norm(both(pair, lambda s: s.get(("t", "new"), "k3"))) == (
        ("t", "new"),
        "k3",
        {"data": "v3"},
    )


def test_puts_to_one_key_in_a_batch_last_wins(pair) -> None:
    ns = ("dedup",)
    both(
        pair,
        lambda s: s.batch(
            [
                PutOp(ns, "a", {"v": 1}),
                PutOp(ns, "a", {"v": 2}),
                PutOp(ns, "b", {"v": 1}),
                PutOp(ns, "b", None),
                PutOp(ns, "c", None),
                PutOp(ns, "c", {"v": 3}),
            ]
        ),
    )
    got = both(pair, lambda s: s.batch([GetOp(ns, "a"), GetOp(ns, "b"), GetOp(ns, "c")]))
    assert [g and g.value for g in got] == [{"v": 2}, None, {"v": 3}]


def test_put_update_delete_roundtrip(pair) -> None:
    ns = ("docs", "x")
    for store in pair:
        store.put(ns, "d", {"title": "a"})
        first = store.get(ns, "d")
        store.put(ns, "d", {"title": "b"})
        second = store.get(ns, "d")
        assert second.value == {"title": "b"}
        assert second.created_at == first.created_at
        assert second.updated_at > first.updated_at
        assert store.get(("docs", "y"), "d") is None
        store.put(ns, 5, {"n": 5})  # keys are str()-ed
        assert store.get(ns, "5").key == "5"
        store.delete(ns, "d")
        assert store.get(ns, "d") is None


def test_search_without_query_filters_and_pages_like_postgres_store(pair) -> None:
    data = [
        (("t", "docs"), "d1", {"author": "Alice", "n": 1, "meta": {"lang": "en"}}),
        (("t", "docs"), "d2", {"author": "Bob", "n": 2}),
        (("t", "img"), "i1", {"author": "Alice", "n": 3}),
        (("tx",), "x1", {"author": "Alice"}),
        (("t", "docs", "deep"), "d3", {"author": "Carol", "n": 2.0}),
    ]
    for store in pair:
        for ns, key, value in data:
            store.put(ns, key, value)
    for kwargs in [
        {},
        {"limit": 2},
        {"offset": 2},
        {"filter": {"author": "Alice"}},
        {"filter": {"n": 2}},
        {"filter": {"author": {"$ne": "Alice"}}},
        {"filter": {"author": "Alice", "n": {"$eq": 3}}},
        {"filter": {"meta": {"$eq": {"lang": "en"}}}},
        {"filter": {"n": {"$gte": 2}}},
    ]:
        both(pair, lambda s, kw=kwargs: s.search(("t",), **kw))
    both(pair, lambda s: s.search(("t", "docs")))
    assert len(both(pair, lambda s: s.search(()))) == 5


def test_namespace_prefix_matches_whole_labels_and_literal_wildcards(pair) -> None:
    for store in pair:
        for ns in [
            ("foo",),
            ("foo", "a"),
            ("foobar",),
            ("foo2",),
            ("user_1",),
            ("userX1",),
            ("a%b",),
            ("axb",),
            ("alice\n",),
            ("alice",),
        ]:
            store.put(ns, "k", {"ns": list(ns)})
    for prefix in [("foo",), ("fo",), ("user_1",), ("a%b",), ("alice",), ("alice\n",)]:
        both(pair, lambda s, p=prefix: sorted(i.namespace for i in s.search(p)))
    assert sorted(i.namespace for i in pair[0].search(("foo",))) == [("foo",), ("foo", "a")]


def test_list_namespaces_conditions_depth_and_paging(pair) -> None:
    spaces = [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
        ("users", "123"),
        ("users", "456", "settings"),
        ("admin", "users", "789"),
        ("malice",),
        ("alice", "x"),
        ("user_%", "child"),
    ]
    for store in pair:
        for ns in spaces:
            store.put(ns, "k", {"v": 1})
    cases: list[dict[str, Any]] = [
        {},
        {"prefix": ("a", "b")},
        {"prefix": ("a", "b"), "max_depth": 3},
        {"suffix": ("f",)},
        {"prefix": ("a", "*", "f")},
        {"prefix": ("a",), "suffix": ("f",)},
        {"max_depth": 1},
        {"max_depth": 2, "limit": 3, "offset": 1},
        {"suffix": ("alice",)},
        {"prefix": ("users", "*")},
        {"prefix": ("*", "users")},
        {"limit": 3},
        {"prefix": ("user_%", "*")},
    ]
    for kwargs in cases:
        both(pair, lambda s, kw=kwargs: s.list_namespaces(**kw))
    assert pair[0].list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    both(
        pair,
        lambda s: s.batch(
            [ListNamespacesOp((MatchCondition("suffix", ("f",)), MatchCondition("prefix", ("a",))))]
        ),
    )


# ---------------------------------------------------------------------- vector search

CONFIGS = [
    ("cosine", "vector"),
    ("inner_product", "vector"),
    ("l2", "vector"),
    ("cosine", "halfvec", "hnsw"),
    ("l2", "halfvec", "ivfflat"),
    ("inner_product", "vector", "flat"),
]


@pytest.mark.parametrize("pair", CONFIGS, indirect=True, ids=lambda c: "-".join(c))
def test_vector_search_identical_scores_and_order(pair, fresh_db: str) -> None:
    engine = sa.create_engine(fresh_db)
    with engine.connect() as conn:
        ours_idx = (
            conn.execute(
                sa.text(
                    "SELECT indexdef FROM pg_indexes"
                    " WHERE indexname LIKE 'hindsight_item_vectors_%'"
                    " AND indexname NOT LIKE '%pkey' AND indexname NOT LIKE '%tsv'"
                )
            )
            .scalars()
            .all()
        )
    engine.dispose()
    spec = pair[0].items.index.spec
    assert len(ours_idx) == (0 if spec.kind == "flat" else 1)
    if ours_idx:
        assert f"USING {spec.kind}" in ours_idx[0] and spec.vector_type in ours_idx[0]
        assert ("m='8'" in ours_idx[0]) == (spec.kind == "hnsw" and spec.vector_type == "halfvec")
    docs = {
        "d1": {"text": "red apple", "color": "red", "score": 4.5},
        "d2": {"text": "red car", "color": "red", "score": 3.0},
        "d3": {"text": "green apple pie", "color": "green", "score": 4.0},
        "d4": {"text": "blue car", "color": "blue", "score": 3.5},
        "d5": {"text": "the long text about apples and cars", "color": "red"},
        "d6": {"other": "no text field here"},
    }
    for store in pair:
        for key, value in docs.items():
            store.put(("v",), key, value)
    for kwargs in [
        {"query": "apple"},
        {"query": "car", "filter": {"color": "red"}},
        {"query": "bbbluuu", "filter": {"score": {"$gt": 3.2}}},
        {"query": "apple", "filter": {"score": {"$gte": 4.0}, "color": "green"}},
        {"query": "apple", "limit": 2},
        {"query": "apple", "limit": 2, "offset": 2},
        {"query": "这是中文 and more"},
        {"query": ""},
        {"query": "test!@#$%^&*()"},
    ]:
        res = both(pair, lambda s, kw=kwargs: s.search(("v",), **kw))
        if kwargs["query"]:
            assert all(r.score is not None for r in res)
    # re-put re-embeds; per-op index overrides fields; index=False is not vector-searchable
    for store in pair:
        store.put(("v",), "d1", {"text": "zany zebra Xerxes"})
        store.put(("v",), "d7", {"a": "aaa", "b": "bbb"}, index=["a", "b"])
        store.put(("v",), "d8", {"text": "zany zebra Xerxes"}, index=False)
    for q in ["Zany Xerxes", "bbb", "aaa"]:
        res = both(pair, lambda s, q=q: s.search(("v",), query=q, limit=20))
        assert "d8" not in [r.key for r in res]
    assert "d8" in [r.key for r in pair[0].search(("v",), limit=20)]  # no query: listed


@pytest.mark.parametrize("distance", ["l2", "cosine"])
def test_ivfflat_on_few_rows_finds_the_exact_nearest(fresh_db: str, distance: str) -> None:
    """An ivfflat index built at setup, on an empty table, has random list centers: its
    (iterative, relaxed-order) scan returned the rows of the query's nearest lists first,
    so a search's ``limit * 2 + 1`` candidates often missed a nearer row of another list.
    A prefix this small is scanned exactly, as by PostgresStore without an ANN index."""
    ivf, flat = index(distance, "vector", "ivfflat"), index(distance, "vector", "flat")
    with (
        PostgresStore.from_conn_string(pg_url(fresh_db), index=flat) as theirs,
        HindsightStore.from_conn_string(
            fresh_db, index=ivf, ranking="vector", settings=Settings(database_url=fresh_db)
        ) as ours,
    ):
        theirs.setup()
        ours.setup()
        words = ["apple", "car", "river", "zebra", "music", "stone", "cloud", "paper"]
        for store in (ours, theirs):
            for i in range(40):
                text = f"{words[i % 8]} {words[(i * 3) % 8]} {i} {'xyz'[i % 3] * (i % 5)}"
                store.put(("f",), f"k{i}", {"text": text})
        for q in [*words, "12", "zz 7", "yyy", "apple music 3"]:
            both((ours, theirs), lambda s, q=q: s.search(("f",), query=q, limit=3))


@pytest.mark.parametrize("pair", [("cosine", "vector")], indirect=True, ids=["cosine"])
def test_field_paths_and_per_item_best_field(pair) -> None:
    values = {
        "doc1": {"key1": "xxx", "key2": "yyy", "key3": "zzz"},
        "doc2": {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"},
        "doc3": {"items": [{"t": "alpha"}, {"t": "beta"}], "meta": {"title": "gamma"}},
    }
    for store in pair:
        for key, value in values.items():
            store.put(
                ("p",),
                key,
                value,
                index=["key0", "key1", "key3", "items[*].t", "{meta.title,key2}", "items[-1].t"],
            )
    for q in ["xxx", "uuu", "zzz", "www", "beta", "gamma", "alpha"]:
        both(pair, lambda s, q=q: s.search(("p",), query=q))


@pytest.mark.parametrize("pair", [("cosine", "vector")], indirect=True, ids=["cosine"])
async def test_async_api_matches_sync_results(pair) -> None:
    ours, theirs = pair
    for i in range(4):
        await ours.aput(("as",), f"k{i}", {"text": f"async document {i}"})
        theirs.put(("as",), f"k{i}", {"text": f"async document {i}"})
    assert norm(await ours.asearch(("as",), query="document 2")) == norm(
        theirs.search(("as",), query="document 2")
    )
    assert norm(await ours.aget(("as",), "k1")) == norm(theirs.get(("as",), "k1"))
    assert await ours.alist_namespaces() == theirs.list_namespaces()
    await ours.adelete(("as",), "k1")
    assert await ours.aget(("as",), "k1") is None
    await ours.aclose()


# ---------------------------------------------------------------------- our own semantics


def test_numeric_filters_compare_as_numbers(pair) -> None:
    """PostgresStore 3.2 compares ``$gt``... as text ("9" > "10"); we compare numbers."""
    ours, _ = pair
    for key, n in [("a", 2), ("b", 9), ("c", 10), ("d", 11), ("e", 9.5), ("s", "10")]:
        ours.put(("num",), key, {"n": n, "name": key, "nested": {"n": n}})

    def keys(flt: dict[str, Any]) -> list[str]:
        return sorted(i.key for i in ours.search(("num",), filter=flt))

    assert keys({"n": {"$gte": 10}}) == ["c", "d"]
    assert keys({"n": {"$gt": 9}}) == ["c", "d", "e"]
    assert keys({"n": {"$lt": 10}}) == ["a", "b", "e"]
    assert keys({"n": {"$lte": 9, "$gt": 2}}) == ["b"]
    assert keys({"n": {"$gt": "1"}}) == ["s"]  # strings compare with strings only
    assert keys({"name": {"$gt": "c"}}) == ["d", "e", "s"]
    assert keys({"nested.n": {"$gt": 9.5}}) == ["c", "d"]  # dotted keys reach nested values
    assert keys({"n": 10}) == ["c"]  # JSON equality: 10 is not "10"
    with pytest.raises(ValueError, match="Unsupported operator"):
        ours.search(("num",), filter={"n": {"$regex": "1"}})


@pytest.mark.parametrize("bad", [("foo.bar",), ("",), ("a", 1)])
async def test_namespace_validation_identical_to_base_store(pair, bad) -> None:
    ours, theirs = pair
    ok = PutOp(("valid",), "k", {"v": 1})
    for store in (ours, theirs):
        with pytest.raises(InvalidNamespaceError):
            store.batch([ok, PutOp(bad, "k", {"v": 1})])
        for op in (
            GetOp(bad, "k"),
            SearchOp(bad),
            ListNamespacesOp((MatchCondition("prefix", bad),)),
        ):
            with pytest.raises(InvalidNamespaceError):
                store.batch([ok, op])
        assert store.get(("valid",), "k") is None  # nothing in the failed batch was applied
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        await ours.abatch([ok, PutOp(bad, "k", {"v": 1})])
    for store in (ours, theirs):
        for ns in [(), ("langgraph", "x")]:
            with pytest.raises(InvalidNamespaceError):
                store.put(ns, "k", {"v": 1})
        with pytest.raises(InvalidNamespaceError):
            store.get(("foo.bar",), "k")
    await ours.aclose()


def test_concurrent_puts_to_one_key_and_overlapping_batches(settings: Settings) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ns = ("conc", uuid.uuid4().hex[:8])
    store = HindsightStore(index=index(), settings=settings)
    keys = [f"k{i}" for i in range(6)]

    def writer(i: int) -> None:
        for j in range(15):
            order = keys if (i + j) % 2 else list(reversed(keys))
            store.batch(
                [PutOp(ns, k, {"text": f"w{i} r{j}", "w": i}) for k in order]
                + [GetOp(ns, "same"), SearchOp(ns, query="w1", limit=3)]
            )
            store.put(ns, "same", {"text": f"writer {i} round {j}", "w": i}, ttl=5)

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(writer, range(6)))
    item = store.get(ns, "same")
    assert item is not None and item.value["text"].startswith("writer")
    assert len(store.search(ns, limit=50)) == 7
    # one vector per field per item, whatever the interleaving
    hits = store.search(ns, query=item.value["text"], limit=50)
    assert len(hits) == 7 and len({h.key for h in hits}) == 7
    store.close()


async def test_concurrent_async_puts_to_one_key(settings: Settings) -> None:
    ns = ("aconc", uuid.uuid4().hex[:8])
    store = HindsightStore(settings=settings)
    await asyncio.gather(
        *(store.aput(ns, "same", {"v": i}) for i in range(200)),
        *(store.aget(ns, "same") for _ in range(50)),
    )
    item = await store.aget(ns, "same")
    assert item is not None and item.value == {"v": 199}  # same tick: one batch, last wins
    results = await asyncio.gather(
        *(store.aput(ns, f"k{i}", {"v": i}) for i in range(50)),
        store.aput(ns, "bad", {"v": float("nan")}),
        return_exceptions=True,
    )
    assert isinstance(results[-1], ValueError)  # only the bad caller fails
    assert len(await store.asearch(ns, limit=100)) == 51
    await store.aclose()
