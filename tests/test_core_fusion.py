"""Fusion and the embedding model: an incidental bigram cannot tip a query the model
covers, and the keyword weight follows the model's spread of cosines."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from hindsight_core import CallableEmbedder, Memory, Settings
from hindsight_core.embeddings.profiles import covers, hub_correction, keyword_weight, profile_for
from hindsight_core.items import ItemIndex, Items, PutItem

DIM = 8
# The query shares no word with the lesson it means; with another lesson it shares one
# bigram (价格), an incidental one.
QUERY = "采集论坛帖子里的价格"
MEANT = {
    "scene": "抓取",
    "trigger": "抓取网站数据之前",
    "lesson": "先读取robots协议，遵守抓取频率限制",
}
OTHER = {"scene": "下单", "trigger": "提交订单之前", "lesson": "核对商品价格和收货地址"}
REST = [
    {"scene": "报税", "trigger": "每年汇算清缴时", "lesson": "提交前核对发票金额和专项扣除"},
    {"scene": "部署", "trigger": "发布新版本到生产环境", "lesson": "先在预发环境跑一遍回归测试"},
    {"scene": "日志", "trigger": "磁盘快满时", "lesson": "保留最近七天，压缩归档更早的"},
]
# Cosines with the query: the meant lesson 0.90, the one sharing the bigram 0.80, the
# rest 0 (each on an axis of its own).
COSINES = {MEANT["lesson"]: 0.90, OTHER["lesson"]: 0.80}


def _vectors(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), DIM))
    for i, text in enumerate(texts):
        if text == QUERY:
            out[i, 0] = 1.0
            continue
        lessons = [r["lesson"] for r in (MEANT, OTHER, *REST)]
        k = next(j for j, les in enumerate(lessons) if les in text)
        cos = COSINES.get(lessons[k], 0.0)
        out[i, 0], out[i, k + 1] = cos, math.sqrt(1 - cos * cos)
    return out


def _embedder(languages: frozenset[str] | None, model_name: str = "lookup-8") -> CallableEmbedder:
    return CallableEmbedder(_vectors, dim=DIM, model_name=model_name, languages=languages)


@pytest.fixture
def settings(fresh_db: str) -> Iterator[Settings]:
    yield Settings(database_url=fresh_db, dedup_threshold=1.0)


def test_an_incidental_bigram_cannot_tip_a_query_the_model_covers(settings: Settings) -> None:
    """With a model that reads Chinese, the keyword score is the share of the whole
    query's IDF a lesson matches: one shared bigram of nine is worth little. (It was the
    share of the terms found in the namespace: that one bigram, a full 1.0, and the
    lesson sharing it came first.)"""
    mem = Memory(("fusion", "zh"), settings=settings, embedder=_embedder(None))
    mem.write_many([MEANT, OTHER, *REST])
    hits = mem.search(QUERY, top_k=2)
    assert [h.record.lesson for h in hits] == [MEANT["lesson"], OTHER["lesson"]]
    assert hits[0].breakdown.keyword == 0
    assert 0 < hits[1].breakdown.keyword < 0.2, hits[1].breakdown
    mem.close()


def test_without_the_language_a_partial_match_counts_fully(settings: Settings) -> None:
    """With an English-only model the keyword side is the only judge of a Chinese
    query: its one shared bigram scores as the share of the terms found (all of them)."""
    mem = Memory(("fusion", "en"), settings=settings, embedder=_embedder(frozenset({"en"})))
    mem.write_many([MEANT, OTHER, *REST])
    hits = mem.search(QUERY, top_k=1)
    assert hits[0].record.lesson == OTHER["lesson"]
    assert hits[0].breakdown.keyword > 0.9, hits[0].breakdown
    mem.close()


def test_item_search_scores_the_whole_query_when_covered(settings: Settings) -> None:
    mem = Memory(("fusion",), settings=settings, embedder=_embedder(None))
    items = Items(mem, index=ItemIndex(dims=DIM, fields=("lesson",)))
    ns = ("fusion", "items")
    items.batch(
        [PutItem(ns, str(i), {"lesson": r["lesson"]}) for i, r in enumerate([MEANT, OTHER, *REST])]
    )
    hits = items.search(ns, query=QUERY, limit=2)
    assert [h.item.key for h in hits] == ["0", "1"]
    assert hits[1].breakdown is not None and 0 < hits[1].breakdown.keyword < 0.2
    mem.close()


@pytest.mark.parametrize(
    ("model", "floor"), [("intfloat/multilingual-e5-small", 0.7), ("lookup-8", 0.0)]
)
def test_keyword_weight_follows_the_models_cosine_floor(
    settings: Settings, model: str, floor: float
) -> None:
    """e5's cosines lie in 0.7-1.0 (its model card): the keyword weight is scaled by
    0.3, and every hit's breakdown adds up with the weight used."""
    emb = _embedder(None, model_name=model)
    assert profile_for(model).cosine_floor == floor
    assert keyword_weight(settings, emb) == pytest.approx(0.3 * (1 - floor))
    mem = Memory(("fusion", "floor", model), settings=settings, embedder=emb)
    assert mem.keyword_weight == pytest.approx(0.3 * (1 - floor))
    mem.write_many([MEANT, OTHER, *REST])
    for h in mem.search(QUERY, top_k=5):
        b = h.breakdown
        assert b.relevance == pytest.approx(0.7 * b.semantic + 0.3 * (1 - floor) * b.keyword)
    mem.close()


def test_the_cosine_floor_setting_wins() -> None:
    emb = _embedder(None, model_name="intfloat/multilingual-e5-small")
    assert keyword_weight(Settings(embedding_cosine_floor=0.5), emb) == pytest.approx(0.15)
    assert keyword_weight(Settings(embedding_cosine_floor=0.0), emb) == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("languages", "text", "expected"),
    [
        (None, "采集论坛帖子里的价格", True),
        (frozenset({"zh", "en"}), "采集论坛帖子", True),
        (frozenset({"en"}), "采集论坛帖子里的价格", False),
        (frozenset({"en"}), "crawl a shop", True),
        (frozenset({"en"}), "用 pandas 读取 CSV file", True),
    ],
)
def test_covers(languages: frozenset[str] | None, text: str, expected: bool) -> None:
    assert covers(languages, text) is expected


# Hub correction: every stored text shares one direction (axis 0), as with a model whose
# vectors lie in a narrow cone. The query is about topic 1. "hub" is a generic text on
# the cone's axis, a hair closer to the query than the text about topic 1 ("meant").
HUB_QUERY = "topic query"
HUB_VECTORS = {
    HUB_QUERY: (0.9, 0.436, 0, 0, 0, 0, 0, 0),
    "meant": (0.6, 0.8, 0, 0, 0, 0, 0, 0),
    "hub": (0.99, 0, 0.141, 0, 0, 0, 0, 0),
    **{
        f"filler {k}": tuple(0.9 if j == 0 else 0.436 if j == k else 0 for j in range(8))
        for k in range(3, 8)
    },
}


def _hub_vectors(texts: list[str]) -> np.ndarray:
    return np.array([HUB_VECTORS[t] for t in texts], dtype=float)


@pytest.mark.parametrize(("correction", "first"), [(None, "meant"), (0.0, "hub")])
def test_a_text_near_every_query_does_not_outrank_the_one_about_it(
    settings: Settings, correction: float | None, first: str
) -> None:
    """With an e5 model's hub correction (the default for e5), the text closest to the
    namespace's mean direction loses what every text shares, and the text about the
    query's topic comes first; off (0), raw cosine puts the generic text first. A field
    equal to the query still scores 1."""
    emb = CallableEmbedder(_hub_vectors, dim=DIM, model_name="intfloat/multilingual-e5-small")
    assert profile_for(emb.model_name).hub_correction == 0.75
    mem = Memory(
        ("fusion", "hub"),
        settings=settings.model_copy(update={"embedding_hub_correction": correction}),
        embedder=emb,
    )
    items = Items(mem, index=ItemIndex(dims=DIM, fields=("text",)))
    ns = ("fusion", "hub", str(correction))
    items.batch([PutItem(ns, t, {"text": t}) for t in HUB_VECTORS if t != HUB_QUERY])
    hits = items.search(ns, query=HUB_QUERY, limit=2)
    assert [h.item.key for h in hits][0] == first, [(h.item.key, h.breakdown) for h in hits]
    assert {h.item.key for h in hits} == {"meant", "hub"}
    items.batch([PutItem(ns, "same", {"text": HUB_QUERY})])
    top = items.search(ns, query=HUB_QUERY, limit=1)[0]
    assert top.item.key == "same" and top.score == pytest.approx(1.0)
    mem.close()


def _axes(**weights: float) -> tuple[float, ...]:
    v = np.zeros(DIM)
    for axis, w in weights.items():
        v[int(axis[1:])] = w
    return tuple(v / np.linalg.norm(v))


# A haystack with a topic cluster (LongMemEval's evidence session): the query asks a
# detail (axis 2) of a topic (axis 1) that 40 texts are about; "meant" has both, "other"
# the detail alone. The mean of the query's 40 nearest texts is the topic's direction:
# taken as the hub direction, it pushed "meant" (cosine 0.99) below "other" (0.84).
CLUSTER_QUERY = "a detail of the topic"
CLUSTER_VECTORS = {
    CLUSTER_QUERY: _axes(e0=0.7, e1=0.5, e2=0.5),
    "meant": _axes(e0=0.7, e1=0.6, e2=0.4),
    "other": _axes(e0=0.7, e1=0.05, e2=0.45, e3=0.3),
    **{
        f"topic {i}": _axes(e0=0.7, e1=0.7, **{f"e{3 + i % 5}": 0.15 * (1 + i % 3)})
        for i in range(39)
    },
    **{f"filler {i}": _axes(e0=0.7, **{f"e{3 + i % 5}": 0.5 + 0.05 * (i % 4)}) for i in range(60)},
}


def test_the_hub_direction_is_the_corpus_not_the_query_topic(settings: Settings) -> None:
    """With the e5 hub correction on, the text about the query's detail and topic stays
    first although 40 texts share its topic: the correction's mean direction is that of
    the searched texts, not of the query's neighbours (items_search_sql.SUMS)."""
    emb = CallableEmbedder(
        lambda texts: np.array([CLUSTER_VECTORS[t] for t in texts]),
        dim=DIM,
        model_name="intfloat/multilingual-e5-small",
    )
    mem = Memory(("fusion", "cluster"), settings=settings, embedder=emb)
    items = Items(mem, index=ItemIndex(dims=DIM, fields=("text",)))
    ns = ("fusion", "cluster")
    items.batch([PutItem(ns, t, {"text": t}) for t in CLUSTER_VECTORS if t != CLUSTER_QUERY])
    for ranking in ("hybrid", "vector"):
        hits = items.search(ns, query=CLUSTER_QUERY, limit=3, ranking=ranking)
        assert hits[0].item.key == "meant", [(h.item.key, h.breakdown) for h in hits]
    mem.close()


def test_the_hub_correction_setting_wins() -> None:
    emb = _embedder(None, model_name="intfloat/multilingual-e5-small")
    assert hub_correction(Settings(), emb) == 0.75
    assert hub_correction(Settings(embedding_hub_correction=0.0), emb) == 0.0
    assert hub_correction(Settings(), _embedder(None)) == 0.0
