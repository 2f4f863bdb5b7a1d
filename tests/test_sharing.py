"""Search across namespaces (docs/sharing.md): ``search(namespaces=[...])`` with
prefixes, each hit's namespace, BM25 statistics of the union, current versions only,
and the argument checks, against the real database; ``api`` runs each on both front
ends.

Internals: the recall and sharing statements (``storage.recall_sql``, ``sharing_sql``,
``runtime.cursors``), to check their query plans."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from _clock import Clock
from _front import Front
from conftest import MakeFront

from hindsight_core import Memory, NotFoundError, Settings, ValidationError
from hindsight_core.memory.scope import read_set
from hindsight_core.models import ns_key


def rec(lesson: str, trigger: str = "working on the build", **extra: Any) -> dict[str, Any]:
    return {"scene": "build", "trigger": trigger, "lesson": lesson, **extra}


def under(base: tuple[str, ...], *labels: str) -> tuple[str, ...]:
    return (*base, *labels)


async def test_a_prefix_reads_the_namespace_and_all_under_it(api: Front) -> None:
    base = api.namespace
    homes = {
        under(base): "Pin the compiler version in CI",
        under(base, "a"): "Cache the dependency downloads",
        under(base, "b", "c"): "Run the linter before the tests",
    }
    sibling = (base[0], base[1] + "x", "a")  # shares the text prefix, not the labels
    for ns, lesson in homes.items():
        await api.write(rec(lesson), namespace=ns)
    await api.write(rec("Never skip the build cache"), namespace=sibling)
    for prefix in (under(base, "*"), "/".join(base) + "/*"):
        hits = await api.search("build", namespaces=[prefix], top_k=10)
        assert {h.namespace: h.record.lesson for h in hits} == homes
        assert all(h.namespace == h.record.namespace for h in hits)
    # a prefix and a namespace under it: each record once
    hits = await api.search("build", namespaces=[under(base, "*"), under(base, "a")], top_k=10)
    assert sorted(h.namespace for h in hits) == sorted(homes)
    # exact namespaces only: nothing under them
    hits = await api.search("build", namespaces=[under(base, "a"), sibling], top_k=10)
    assert {h.namespace for h in hits} == {under(base, "a"), sibling}
    # a nested prefix
    hits = await api.search("build", namespaces=["/".join(base) + "/b/*"], top_k=10)
    assert [h.namespace for h in hits] == [under(base, "b", "c")]


async def test_a_single_namespace_search_says_its_namespace(api: Front) -> None:
    await api.write(rec("Pin the compiler version in CI"))
    hits = await api.search("compiler version")
    assert hits and all(h.namespace == api.namespace for h in hits)
    assert (await api.recall("compiler version")).hits[0].namespace == api.namespace


async def test_recall_spans_namespaces_too(api: Front) -> None:
    shared = under(api.namespace, "shared")
    await api.write(rec("Pin the compiler version in CI"), namespace=shared)
    result = await api.recall("compiler version", namespaces=[api.namespace, shared])
    assert [h.namespace for h in result.hits] == [shared]
    # the memory's own namespace alone does not hold it
    assert (await api.recall("compiler version")).hits == []


# Each lesson has five distinct terms, "timeout" among them where it appears, so that
# every record has the same length and a hit's keyword score is the IDF share of the
# query terms it holds: under the union's statistics, the same for A's and B's.
A_LESSONS = [
    "raise timeout for slow uploads",
    "raise timeout during image builds",
    "lower timeout when polling queues",
    "timeout retries need exponential backoff",
    "double timeout across flaky networks",
    "log the failing test name",
]
B_LESSONS = [
    "timeout means check proxy settings",
    "pin every compiler version explicitly",
    "cache dependency downloads between runs",
    "run linters before unit tests",
    "tag releases from clean trees",
]


async def test_keyword_statistics_are_those_of_the_namespaces_read(api: Front) -> None:
    """In A, "timeout" is in most records (a common word, low IDF); in B in one of five.
    Searched together, a B hit must not score by B's statistics (a rare word there):
    its keyword score is the one it gets in a namespace holding both A's and B's
    records, and a hit of A holding the same query terms scores the same."""
    a, b, both = (under(api.namespace, x) for x in ("a", "b", "both"))
    await api.write_many([rec(x) for x in A_LESSONS], namespace=a)
    await api.write_many([rec(x) for x in B_LESSONS], namespace=b)
    await api.write_many([rec(x) for x in A_LESSONS + B_LESSONS], namespace=both)
    # A hit's keyword score is its share of the query's summed IDF: with B's own
    # statistics "timeout" (in 1 of B's 5 records) outweighs "uploads" (in none of
    # them), with the union's (in 6 of 11, "uploads" in 1) it weighs little.
    query = "timeout uploads"

    def keyword(hits: list[Any]) -> dict[str, float]:
        return {h.record.lesson: h.breakdown.keyword for h in hits if h.breakdown.keyword > 0}

    union = await api.search(query, namespaces=[a, b], top_k=20)
    alone = keyword(await api.search(query, namespace=b, top_k=20))
    merged = keyword(await api.search(query, namespace=both, top_k=20))
    found = keyword(union)
    assert {h.namespace for h in union if h.breakdown.keyword > 0} == {a, b}
    assert found == pytest.approx(merged, abs=1e-9)
    b_lesson = B_LESSONS[0]
    # B's own statistics would score its lesson higher: "timeout" is rare there
    assert alone[b_lesson] > found[b_lesson] + 0.05
    # B's lesson and A's holding "timeout" alone (all of one length) score alike
    same = [found[x] for x in A_LESSONS[1:5]]
    assert same == pytest.approx([found[b_lesson]] * 4, abs=1e-9)
    assert found[A_LESSONS[0]] > found[b_lesson]  # holds both words


async def test_superseded_versions_stay_out_across_namespaces(api: Front) -> None:
    a, b = under(api.namespace, "a"), under(api.namespace, "b")
    old = await api.write(rec("Retry the upload three times"), namespace=b)
    new = await api.supersede(old.id, rec("Retry the upload with backoff"), namespace=b)
    await api.write(rec("Compress the upload first"), namespace=a)
    hits = await api.search("retry the upload", namespaces=[a, b], top_k=10)
    assert new.id in {h.record.id for h in hits} and old.id not in {h.record.id for h in hits}
    hits = await api.search(
        "retry the upload", namespaces=[a, b], top_k=10, include_superseded=True
    )
    assert {old.id, new.id} <= {h.record.id for h in hits}


async def test_archived_records_stay_out_across_namespaces(api: Front) -> None:
    a = under(api.namespace, "a")
    gone = await api.write(rec("Retry the upload three times"), namespace=a)
    await api.archive(gone.id, namespace=a)
    assert await api.search("retry the upload", namespaces=[under(api.namespace, "*")]) == []


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"namespaces": ["*"]}, "namespaces[0]", "name a prefix"),
        ({"namespaces": [("*",)]}, "namespaces[0]", "name a prefix"),
        ({"namespaces": ["acme", "*"]}, "namespaces[1]", "name a prefix"),
        ({"namespace": "acme", "namespaces": ["acme"]}, "namespaces", "namespace or namespaces"),
        ({"namespaces": []}, "namespaces", "non-empty"),
        ({"namespaces": ["acme/*/x"]}, "namespaces[0]", "last label"),
        ({"namespaces": ["acme//x"]}, "namespaces[0]", "empty"),
        ({"namespaces": [42]}, "namespaces[0]", "tuple of strings"),
    ],
)
async def test_bad_namespaces_are_refused_before_connecting(
    make_front: MakeFront, kwargs: dict[str, Any], field: str, words: str
) -> None:
    # an unreachable server: the check must come first
    settings = Settings(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none")
    for kind in ("sync", "async"):
        front = make_front(kind, ("t",), settings=settings)
        for call in (front.search, front.recall):
            with pytest.raises(ValidationError, match=words) as err:
                await call("build", **kwargs)
            assert err.value.field == field


def test_the_read_set_drops_what_a_prefix_covers() -> None:
    got = read_set(["acme/*", "acme/a", "acme/b/*", "acmex/a", ("other", "x")])
    assert got.prefixes == (ns_key(("acme",)),)
    assert got.exact == tuple(sorted([ns_key(("acmex", "a")), ns_key(("other", "x"))]))
    assert got.covers(ns_key(("acme",))) and got.covers(ns_key(("acme", "b", "c")))
    assert not got.covers(ns_key(("acmex", "b")))
    assert read_set("acme/a").exact == (ns_key(("acme", "a")),)


def test_search_over_namespaces_keeps_the_database_unchanged_on_error(memory: Memory) -> None:
    memory.write(rec("Pin the compiler version in CI"))
    with pytest.raises(ValidationError):
        memory.search("compiler", namespace=memory.namespace, namespaces=[memory.namespace])
    assert [h.record.lesson for h in memory.search("compiler")] == [
        "Pin the compiler version in CI"
    ]


# ------------------------------------------------------------------ feedback and locate


async def test_feedback_is_recorded_with_who_gave_it(api: Front, front_clock: Clock) -> None:
    shared = under(api.namespace, "shared")
    lesson = await api.write(rec("Pin the compiler version in CI"), namespace=shared)
    start = front_clock.now
    # an agent reading the shared namespace gives feedback on the record where it lives
    used = await api.mark_used(lesson.id, namespace=shared, by="mcp:acme/agent-b")
    assert used.use_count == 1 and used.namespace == shared
    front_clock.now += timedelta(hours=1)
    await api.mark_used(lesson.id, helpful=False, namespace=shared)
    got = await api.feedback(lesson.id, namespace=shared)
    assert [(f.at, f.helpful, f.by) for f in got] == [
        (front_clock.now, False, "/".join(shared)),  # default: the namespace called with
        (start, True, "mcp:acme/agent-b"),
    ]
    assert [f.by for f in await api.feedback(lesson.id, namespace=shared, limit=1)] == [
        "/".join(shared)
    ]
    # the record is where it was: feedback moved nothing into the caller's namespace
    assert await api.search("compiler version") == []


async def test_feedback_arguments_are_checked(api: Front) -> None:
    lesson = await api.write(rec("Pin the compiler version in CI"))
    for by in ("", "  ", 42, "x" * 201, "a\x00b"):
        with pytest.raises(ValidationError) as err:
            await api.mark_used(lesson.id, by=by)
        assert err.value.field == "by"
    assert await api.feedback(lesson.id) == []  # nothing was recorded
    assert (await api.get(lesson.id)).use_count == 0
    with pytest.raises(NotFoundError):
        await api.feedback(uuid.uuid4())
    with pytest.raises(NotFoundError):  # it lives elsewhere: ask its own namespace
        await api.feedback(lesson.id, namespace=under(api.namespace, "other"))
    with pytest.raises(ValidationError):
        await api.feedback(lesson.id, limit=0)


async def test_locate_finds_the_namespace_of_a_record_in_the_set(api: Front) -> None:
    base = api.namespace
    deep = under(base, "team", "b")
    lesson = await api.write(rec("Pin the compiler version in CI"), namespace=deep)
    assert await api.locate(lesson.id, namespaces=[under(base, "*")]) == deep
    assert await api.locate(str(lesson.id), namespaces=["/".join(base) + "/team/*"]) == deep
    assert await api.locate(lesson.id, namespaces=[deep, under(base, "x")]) == deep
    # not in the set, or no such record: None ("no record" to whoever asks)
    assert await api.locate(lesson.id, namespaces=[base, under(base, "team")]) is None
    assert await api.locate(lesson.id, namespaces=[(base[0], base[1] + "x", "*")]) is None
    assert await api.locate(uuid.uuid4(), namespaces=[under(base, "*")]) is None
    # an archived record is still there (get reads it)
    await api.archive(lesson.id, namespace=deep)
    assert await api.locate(lesson.id, namespaces=[under(base, "*")]) == deep
    with pytest.raises(ValidationError, match="name a prefix"):
        await api.locate(lesson.id, namespaces=["*"])
    with pytest.raises(ValidationError):
        await api.locate("not-an-id", namespaces=[base])


@pytest.mark.parametrize("scan", ["exact", "index"])
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_scene_and_filters_apply_across_namespaces(
    make_front: MakeFront, settings: Settings, namespace: tuple[str, str], scan: str, kind: str
) -> None:
    api = make_front(
        kind, namespace, settings=Settings(database_url=settings.database_url, semantic_scan=scan)
    )
    a, b = under(namespace, "a"), under(namespace, "b")
    await api.write(rec("Pin the compiler version in CI"), namespace=a)
    await api.write(rec("Pin the compiler version", critical=True), namespace=b)
    await api.write(
        {**rec("Pin the compiler version for releases"), "scene": "release"}, namespace=b
    )
    hits = await api.search("pin the compiler version", namespaces=[a, b], scene="build", top_k=10)
    assert sorted(h.namespace for h in hits) == [a, b]
    assert {h.breakdown.scan for h in hits} == {scan}
    hits = await api.search(
        "pin the compiler version", namespaces=[under(namespace, "*")], filters={"critical": True}
    )
    assert [(h.namespace, h.record.critical) for h in hits] == [(b, True)]


def _random_vectors(texts: list[str]) -> list[list[float]]:
    import hashlib

    import numpy as np

    out = []
    for text in texts:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
        out.append(np.random.default_rng(seed).standard_normal(16).tolist())
    return out


def test_an_exact_scan_of_a_read_set_reads_its_namespaces_by_index(fresh_db: str) -> None:
    """Beside a big tenant, the exact scan of a small read set must not read the whole
    table: with the set's keys as one array, ``e.ns = ANY(...)`` was planned as a
    sequential scan of every row (the generic plan a prepared search keeps)."""
    import sqlalchemy as sa

    from hindsight_core.embeddings.callable import CallableEmbedder
    from hindsight_core.runtime.cursors import positional
    from hindsight_core.storage import recall_sql, sharing_sql

    embedder = CallableEmbedder(_random_vectors, dim=16, model_name="random-16")
    with Memory(("big",), settings=Settings(database_url=fresh_db), embedder=embedder) as mem:
        mem.write_many([rec(f"lesson number {i}", f"trigger {i}") for i in range(3000)])
        for team in ("a", "b"):
            mem.write_many([rec(f"team lesson {i}") for i in range(10)], namespace=("t", team))
        with mem.engine.connect() as conn:
            conn.execute(sa.text("ANALYZE"))
            conn.commit()
            statements = [
                recall_sql.search_sql(
                    16, scene=False, keyword=True, filters=(), candidates=20, exact=True, many=True
                ),
                sharing_sql.many_exact_scan_sql(False),
            ]
            for stmt in statements:
                sql, _ = positional(stmt)
                plan = "\n".join(
                    conn.exec_driver_sql("EXPLAIN (GENERIC_PLAN, COSTS OFF) " + sql.decode())
                    .scalars()
                    .all()
                )
                assert "Seq Scan on hindsight_experiences" not in plan, plan
        hits = mem.search("team lesson", namespaces=["t/*"], top_k=20)
        assert len(hits) == 20 and {h.breakdown.scan for h in hits} == {"exact"}
