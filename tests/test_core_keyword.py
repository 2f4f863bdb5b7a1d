"""Keyword scoring: BM25 that agrees with rank_bm25, per-namespace counters kept exact
under concurrent writes, merges, archiving and deletes, and fusion that one common
word cannot tip.

Internals: ``storage.fulltext_sql``'s BM25 constants and statements, to compare the
scores with rank_bm25's."""

from __future__ import annotations

import hashlib
import math
import threading
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import sqlalchemy as sa

from hindsight_core import CallableEmbedder, Memory, Settings
from hindsight_core.items import ItemIndex, Items, PutItem
from hindsight_core.models import ns_key
from hindsight_core.storage.fulltext_sql import K1, B, common_terms_sql
from hindsight_core.text import search_document, tokens, word_forms
from tests._stats import analyze

rank_bm25 = pytest.importorskip("rank_bm25", reason="rank_bm25 is in the dev extra")

DIM = 16


def _hash_vectors(texts: list[str]) -> np.ndarray:
    seeds = [int(hashlib.sha1(t.encode()).hexdigest()[:8], 16) for t in texts]
    return np.stack([np.random.default_rng(s).standard_normal(DIM) for s in seeds])


EMB = CallableEmbedder(_hash_vectors, dim=DIM, model_name="hash-16")

# Words that no other test writes, so the table's statistics hold none of them.
TAG = uuid.uuid4().hex[:6]
W = {
    w: f"{w}{TAG}"
    for w in (
        "amber",
        "birch",
        "cedar",
        "delta",
        "ember",
        "fjord",
        "gale",
        "heron",
        "iris",
        "jade",
        "kelp",
        "lumen",
    )
}
DOCS = [
    "{amber} {birch} {cedar} {ember}",
    "{amber} {delta} {ember} {fjord} {gale} {heron}",
    "{birch} {iris}",
    "{cedar} {jade} {kelp}",
    "{delta} {lumen} {amber} {kelp} {iris} {heron} {gale}",
    "{ember} {fjord}",
    "{gale} {heron} {iris} {jade} {kelp} {lumen} {amber} {birch} {cedar}",
    "{jade}",
    "{lumen} {fjord} {gale}",
    "{heron} {ember} {delta}",
]
# No document repeats a term (the store counts a term once: ``fulltext_sql.bm25_sql``).
QUERY = "{amber} {birch} {cedar} {jade}"


def _fill(s: str) -> str:
    return s.format(**W)


@pytest.fixture
def keyword_only(fresh_db: str) -> Iterator[Settings]:
    yield Settings(
        database_url=fresh_db,
        semantic_weight=0.0,
        keyword_weight=1.0,
        lesson_max_chars=500,
        dedup_threshold=1.0,
    )


class _LuceneIdfBM25(rank_bm25.BM25Okapi):  # type: ignore[misc]
    """rank_bm25's BM25Okapi with Lucene's IDF, ln(1 + (N - df + 0.5) / (df + 0.5)), as
    the store computes it (``fulltext_sql``): no floor, positive for every term."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        n = self.corpus_size
        self.idf = {w: math.log(1 + (n - df + 0.5) / (df + 0.5)) for w, df in nd.items()}


def _reference(docs: list[list[str]], query: str) -> list[float]:
    bm = _LuceneIdfBM25(docs, k1=K1, b=B)
    return [float(x) for x in bm.get_scores(tokens(query))]


def _assert_agrees(found: list[tuple[int, float]], expected: list[float]) -> None:
    """Same order as rank_bm25, and keyword scores proportional to its scores."""
    order = [i for i in np.argsort(-np.asarray(expected), kind="stable") if expected[i] > 0]
    positive = [round(x, 9) for x in expected if x > 0]
    assert len(set(positive)) == len(positive), "the corpus must have no ties"
    assert [i for i, _ in found] == order
    assert all(0 < k < 1 for _, k in found), found  # none capped
    ratio = [k / expected[i] for i, k in found]
    assert max(ratio) == pytest.approx(min(ratio), rel=1e-6)


RECORDS = [{"scene": "s", "trigger": "t", "lesson": _fill(d)} for d in DOCS]


def _assert_records_agree(mem: Memory, ids: list[str]) -> None:
    """``mem``'s namespace holds RECORDS (with ``ids``): its ranking is rank_bm25's."""
    docs = [tokens(search_document(r["lesson"], r["trigger"], r["scene"])) for r in RECORDS]
    hits = mem.search(_fill(QUERY), top_k=10)
    found = [
        (ids.index(str(h.record.id)), h.breakdown.keyword) for h in hits if h.breakdown.keyword > 0
    ]
    _assert_agrees(found, _reference(docs, _fill(QUERY)))


def _assert_items_agree(items: Items, ns: tuple[str, ...]) -> None:
    """``ns`` holds DOCS as items keyed by position: its ranking is rank_bm25's."""
    hits = items.search(ns, query=_fill(QUERY), limit=10)
    found = [(int(h.item.key), h.breakdown.keyword) for h in hits if h.breakdown.keyword > 0]
    _assert_agrees(found, _reference([tokens(_fill(d)) for d in DOCS], _fill(QUERY)))


def test_record_ranking_agrees_with_rank_bm25(keyword_only: Settings) -> None:
    mem = Memory(("kw", "records"), settings=keyword_only, embedder=EMB)
    _assert_records_agree(mem, [str(r.id) for r in mem.write_many(RECORDS)])
    mem.close()


def test_item_ranking_agrees_with_rank_bm25(keyword_only: Settings) -> None:
    mem = Memory(("kw",), settings=keyword_only, embedder=EMB)
    items = Items(mem, index=ItemIndex(dims=DIM, fields=("text",)))
    ns = ("kw", "items")
    items.batch([PutItem(ns, str(i), {"text": _fill(d)}) for i, d in enumerate(DOCS)])
    # another namespace's documents must not count
    items.batch(
        [PutItem(("kw", "other"), str(i), {"text": _fill("{amber} {birch}")}) for i in range(20)]
    )
    _assert_items_agree(items, ns)
    mem.close()


# A big namespace beside the small one: every one of its documents holds {jade} (3 of
# the small namespace's 10 hold it), 8 of its 200 hold {amber} (4 of the 10): both are
# common in the table (ANALYZE: more than COMMON_TERM_SHARE of its rows), one much more,
# one much less than in the small namespace.
BIG = ["{jade} " + ("{amber} " if k % 25 == 0 else "") + f"bulk{k} filler" for k in range(200)]


def _assert_common(url: str, table: str, limit: int) -> None:
    analyze(url, table)  # the statistics that make the two terms common (tests/_stats)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        common = {r[0] for r in conn.execute(common_terms_sql(table), {"limit": limit})}
    engine.dispose()
    assert {W["jade"], W["amber"]} <= common, "the test needs both terms common in the table"


def test_record_ranking_ignores_other_namespaces_common_terms(keyword_only: Settings) -> None:
    """Terms common in the table take the small namespace's own document frequencies
    (they took the table's share scaled to the namespace: other tenants' data moved
    this one's ranking)."""
    big = Memory(("kw", "big"), settings=keyword_only, embedder=EMB)
    big.write_many([{"scene": "s", "trigger": "t", "lesson": _fill(d)} for d in BIG])
    ids = [str(r.id) for r in big.write_many(RECORDS, namespace=("kw", "small"))]
    _assert_common(keyword_only.database_url or "", "hindsight_experiences", 200)
    mem = Memory(("kw", "small"), settings=keyword_only, embedder=EMB)
    _assert_records_agree(mem, ids)
    mem.close()
    big.close()


def test_item_ranking_ignores_other_namespaces_common_terms(keyword_only: Settings) -> None:
    mem = Memory(("kw",), settings=keyword_only, embedder=EMB)
    index = ItemIndex(dims=DIM, fields=("text",))
    items = Items(mem, index=index)
    items.batch([PutItem(("kw", "big"), str(i), {"text": _fill(d)}) for i, d in enumerate(BIG)])
    ns = ("kw", "small")
    items.batch([PutItem(ns, str(i), {"text": _fill(d)}) for i, d in enumerate(DOCS)])
    _assert_common(keyword_only.database_url or "", "hindsight_item_vectors", 200)
    items = Items(mem, index=index)  # a new cache of common terms
    _assert_items_agree(items, ns)
    mem.close()


# ---------------------------------------------------------------------- counters

_COUNTERS = sa.text(
    "SELECT docs, total_len FROM hindsight_keyword_stats WHERE tbl = :tbl AND ns = :ns"
)
_RECOUNT = {
    "e": sa.text(
        "SELECT count(*) AS docs, COALESCE(sum(length(search_tsv)), 0) "
        "AS total_len FROM hindsight_experiences WHERE ns = :ns "
        "AND archived_at IS NULL"
    ),
    "i": sa.text(
        "SELECT count(*) AS docs, COALESCE(sum(length(search_tsv)), 0) "
        "AS total_len FROM hindsight_item_vectors WHERE ns = :ns"
    ),
}


def _assert_counters_exact(url: str, tbl: str, ns: str) -> tuple[int, int]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        kept = conn.execute(_COUNTERS, {"tbl": tbl, "ns": ns}).first()
        real = conn.execute(_RECOUNT[tbl], {"ns": ns}).first()
    engine.dispose()
    assert real is not None
    assert (tuple(kept) if kept else (0, 0)) == tuple(real)
    return int(real[0]), int(real[1])


def test_record_counters_follow_writes_merges_archiving_and_deletes(fresh_db: str) -> None:
    settings = Settings(database_url=fresh_db, lesson_max_chars=500)
    ns = ("kw", "lifecycle")
    mem = Memory(ns, settings=settings, embedder=EMB)
    key = ns_key(ns)
    written = mem.write_many(
        [{"trigger": f"case {i}", "lesson": f"lesson {W['amber']} {i}"} for i in range(30)]
    )
    assert _assert_counters_exact(fresh_db, "e", key)[0] == 30
    mem.write({"trigger": "case 3", "lesson": f"lesson {W['amber']} 3"})  # a duplicate: merged
    mem.mark_used(written[0].id)
    mem.archive(written[1].id)
    assert _assert_counters_exact(fresh_db, "e", key)[0] == 29
    mem.restore(written[1].id)
    mem.edit(written[2].id, lesson=f"a much longer lesson {W['birch']} now {W['cedar']}")
    mem.merge(
        [written[4].id, written[5].id], {"trigger": "cases 4 and 5", "lesson": "one general lesson"}
    )
    mem.forget(written[6].id)
    # (the edit is a new version: the version it superseded stays, not recalled)
    assert _assert_counters_exact(fresh_db, "e", key)[0] == 30 - 2 + 1 + 1 - 1

    def writer(n: int) -> None:
        w = Memory(ns, settings=settings, embedder=EMB)
        for j in range(5):
            w.write_many(
                [{"trigger": f"thread {n}", "lesson": f"{W['gale']} {n} {j} {k}"} for k in range(4)]
            )
        w.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _assert_counters_exact(fresh_db, "e", key)[0] == 29 + 4 * 5 * 4
    mem.close()


def test_item_counters_follow_concurrent_puts_overwrites_and_deletes(fresh_db: str) -> None:
    settings = Settings(database_url=fresh_db)
    mem = Memory(("kw",), settings=settings, embedder=EMB)
    index = ItemIndex(dims=DIM, fields=("text", "title"))
    ns = ("kw", "items", "busy")
    Items(mem, index=index).batch([PutItem(ns, "seed", {"text": "seed", "title": "t"})])

    def worker(n: int) -> None:
        m = Memory(("kw",), settings=settings, embedder=EMB)
        items = Items(m, index=index)
        for j in range(8):
            ops = [
                PutItem(
                    ns,
                    f"k{(n + j + k) % 12}",
                    {
                        "text": f"{W['iris']} {n} {j} " * (k + 1),
                        **({"title": "x y"} if k % 2 else {}),
                    },
                )
                for k in range(3)
            ]
            if j % 3 == 2:
                ops.append(PutItem(ns, f"k{(n * j) % 12}", None))  # delete
            items.batch(ops)
        m.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    docs, _ = _assert_counters_exact(fresh_db, "i", ns_key(ns))
    assert docs > 0
    mem.close()


# ---------------------------------------------------------------------- fusion


def test_one_common_word_cannot_tip_the_fusion(keyword_only: Settings) -> None:
    """The only query word in the collection is in most records: matching it is worth
    little, not the full keyword weight (it was: the best match always scored 1)."""
    mem = Memory(("kw", "common"), settings=keyword_only, embedder=EMB)
    common = W["kelp"]
    mem.write_many(
        [{"trigger": "t", "lesson": f"{common} note {i} {W['heron']}"} for i in range(9)]
        + [{"trigger": "t", "lesson": f"unrelated {W['iris']}"}]
    )
    hits = mem.search(f"{common} {uuid.uuid4().hex[:8]}x", top_k=10)
    assert hits and all(h.breakdown.keyword < 0.1 for h in hits), [
        h.breakdown.keyword for h in hits
    ]
    rare = mem.search(f"{W['iris']} {common}", top_k=1)
    assert rare[0].record.lesson.startswith("unrelated")
    assert rare[0].breakdown.keyword > 0.9
    mem.close()


def test_question_words_are_not_keyword_evidence(keyword_only: Settings) -> None:
    """A question "When did ...?" asks for a time: a record that says "when" does not answer it.
    Interrogatives and question auxiliaries are left out of the query's keyword terms
    (records and items alike); before, the record sharing only "when" (and "how") with
    the query got a keyword score, a high one among chat turns."""
    mem = Memory(("kw", "questions"), settings=keyword_only, embedder=EMB)
    festival = f"The {W['birch']} festival opened on a Sunday"
    aside = f"I called my sister when I got home, {W['lumen']} said how nice"
    mem.write_many([{"trigger": "t", "lesson": x} for x in (festival, aside)])
    query = f"When did the {W['birch']} festival open, and how would it go?"
    hits = {h.record.lesson: h.breakdown.keyword for h in mem.search(query, top_k=10)}
    assert hits[festival] > 0
    assert hits.get(aside, 0.0) == 0.0, hits

    items = Items(mem, index=ItemIndex(dims=DIM, fields=("text",)))
    ns = ("kw", "questions-items")
    items.batch(
        [PutItem(ns, "festival", {"text": festival}), PutItem(ns, "aside", {"text": aside})]
    )
    found = {h.item.key: h.breakdown.keyword for h in items.search(ns, query=query, limit=10)}
    assert found["festival"] > 0
    assert found.get("aside", 0.0) == 0.0, found
    # A query of question words only has no keyword terms: the semantic side alone ranks.
    assert all(h.breakdown.keyword == 0 for h in items.search(ns, query="Who? When?", limit=10))
    mem.close()


# ---------------------------------------------------------------------- word forms


@pytest.mark.parametrize(
    ("term", "forms"),
    [
        ("painted", {"paint", "paints", "painting"}),
        ("paint", {"paints", "painted", "painting"}),
        ("kids", {"kid"}),
        ("activities", {"activity"}),
        ("running", {"run", "runs"}),
        ("making", {"make", "makes"}),
        ("planned", {"plan", "planning"}),
        ("watches", {"watch", "watched", "watching"}),
    ],
)
def test_a_term_stands_for_its_inflections(term: str, forms: set[str]) -> None:
    got = word_forms(term)
    assert got[0] == term
    assert forms <= set(got), got


@pytest.mark.parametrize("term", ["价格", "2023", "v2", "go", "ip"])
def test_other_terms_stand_for_themselves(term: str) -> None:
    assert word_forms(term) == (term,)


def test_a_query_finds_another_form_of_its_word(keyword_only: Settings) -> None:
    """ "What did she paint?" of a record that says "painting": the query's term matches
    any inflection of it, records and items alike, counted as one term (one IDF). Before,
    only the record repeating the query's exact form scored."""
    mem = Memory(("kw", "forms"), settings=keyword_only, embedder=EMB)
    painting = f"We love painting {W['cedar']} landscapes together"
    other = f"The {W['jade']} kids went to the museum"
    rest = [f"note {i} about {W['kelp']}" for i in range(6)]
    mem.write_many([{"trigger": "t", "lesson": x} for x in (painting, other, *rest)])
    hits = mem.search(f"What was painted {W['cedar']}?", top_k=3)
    assert hits[0].record.lesson == painting
    # "painted" and "cedar" both match: the full share of the query's IDF, not half.
    assert hits[0].breakdown.keyword > 0.8, hits[0].breakdown
    kid = {h.record.lesson: h.breakdown.keyword for h in mem.search("a kid", top_k=3)}
    assert kid.get(other, 0.0) > 0, kid

    items = Items(mem, index=ItemIndex(dims=DIM, fields=("text",)))
    ns = ("kw", "forms-items")
    items.batch([PutItem(ns, str(i), {"text": x}) for i, x in enumerate((painting, other, *rest))])
    found = items.search(ns, query=f"What was painted {W['cedar']}?", limit=3)
    assert found[0].item.key == "0"
    assert found[0].breakdown is not None and found[0].breakdown.keyword > 0.8
    mem.close()


def test_a_term_is_common_when_one_of_its_forms_is() -> None:
    """A term whose form is frequent in the table generates no keyword candidates, and
    its share is that of its common forms (a bound for the group's document frequency)."""
    from hindsight_core.storage import fulltext_sql as fts

    common = {"painting": 0.05, "paints": 0.01, "the": 0.5}
    assert fts.common_share("painted", common) == pytest.approx(0.06)
    assert fts.common_share("cedar", common) is None
    assert fts.rare_terms(["painted", "cedar"], common) == ["cedar"]
    assert fts.term_query("kids").split(" | ")[:2] == ["'kids'", "'kid'"]
    assert fts.tsquery_literal(["2023", "价格"]) == "'2023' | '价格'"
