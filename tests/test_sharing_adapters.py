"""Shared reads through the adapters (docs/sharing.md): LangGraph's store under a
namespace prefix, the LangGraph memory tools' ``read=``, LlamaIndex's
``read_namespaces=``; against the real database."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from hindsight_adapters.langgraph import HindsightStore, create_memory_tools
from hindsight_core import AsyncMemory, Memory, NotFoundError, Settings
from tests._lg_store_util import DIMS, char_embed
from tests.test_langgraph_store_tools import graph, outputs

LESSON = {
    "scene": "file-cleanup",
    "trigger": "deleting files in the downloads folder",
    "lesson": "Check the file extension before deleting",
}
QUESTION = "Please clean up my downloads folder"


def test_store_search_under_a_prefix_spans_its_namespaces(fresh_db: str) -> None:
    """LangGraph's ``namespace_prefix``: every namespace starting with it, each hit
    with its own namespace, keyword statistics of all of them together."""
    index = {"dims": DIMS, "embed": char_embed, "fields": ["text"]}
    a = ["timeout raise uploads", "timeout lower polls", "timeout double networks"]
    b = ["timeout check proxy", "cache every download", "pin each compiler"]
    with HindsightStore.from_conn_string(fresh_db, index=index) as store:
        for i, text in enumerate(a):
            store.put(("acme", "a"), f"a{i}", {"text": text})
            store.put(("both",), f"a{i}", {"text": text})
        for i, text in enumerate(b):
            store.put(("acme", "b", "c"), f"b{i}", {"text": text})
            store.put(("both",), f"b{i}", {"text": text})
        store.put(("acmex", "a"), "x", {"text": "timeout uploads proxy"})
        hits = store.search(("acme",), query="timeout uploads", limit=20)
        assert {(h.namespace, h.key) for h in hits} == {
            *((("acme", "a"), f"a{i}") for i in range(3)),
            *((("acme", "b", "c"), f"b{i}") for i in range(3)),
        }
        merged = {
            h.key: h.breakdown.keyword
            for h in store.search(("both",), query="timeout uploads", limit=20)
        }
        assert {h.key: h.breakdown.keyword for h in hits} == pytest.approx(merged, abs=1e-9)
        alone = {
            h.key: h.breakdown.keyword
            for h in store.search(("acme", "b"), query="timeout uploads", limit=20)
        }
        assert alone["b0"] > merged["b0"] + 0.05  # "timeout" is rare in b alone


@pytest.fixture
async def store(settings: Settings, embedder: Any) -> Any:
    s = HindsightStore(
        settings=settings, embedder=embedder, index={"dims": DIMS, "embed": char_embed}
    )
    yield s
    await s.aclose()


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_memory_tools_read_shared_namespaces(store: Any, kind: str) -> None:
    team = uuid.uuid4().hex[:8]
    shared = ("lessons", team, "shared")
    theirs = store.memory.write(LESSON, namespace=shared)
    tools = create_memory_tools(
        ("lessons", "{team}", "{user_id}"), read=[("lessons", "{team}", "*")], versions=True
    )
    cfg = {"configurable": {"team": team, "user_id": "alice"}}

    async def arun(*calls: tuple[str, dict[str, Any]]) -> list[Any]:
        g = graph(store, tools, list(calls))
        if kind == "sync":
            return outputs(g.invoke({"messages": [HumanMessage("go")]}, cfg))
        return outputs(await g.ainvoke({"messages": [HumanMessage("go")]}, cfg))

    (found,) = await arun(("search_memory", {"query": "delete old downloads"}))
    assert [(x["id"], x["namespace"]) for x in found["lessons"]] == [
        (str(theirs.id), "/".join(shared))
    ]
    (used,) = await arun(("update_memory_usage", {"id": str(theirs.id), "helpful": True}))
    assert used["use_count"] == 1
    (given,) = store.memory.feedback(theirs.id, namespace=shared)
    assert given.by == f"lessons/{team}/alice"
    # reading is not writing: a correction of a shared lesson finds no record
    (fixed,) = await arun(
        ("supersede_memory", {"id": str(theirs.id), "lesson": "Ask first", "reason": "x"})
    )
    assert "no record" in fixed["error"]
    (unknown,) = await arun(("update_memory_usage", {"id": str(uuid.uuid4())}))
    assert "no record" in unknown["error"]


async def test_llamaindex_memory_reads_shared_namespaces(
    settings: Settings, embedder: Any, namespace: tuple[str, str]
) -> None:
    from llama_index.core.llms import ChatMessage

    from hindsight_adapters.llamaindex import HindsightMemory, HindsightMemoryBlock
    from tests.test_llamaindex_memory import _ListMemory

    shared = (*namespace, "team", "shared")
    with Memory(namespace, settings=settings, embedder=embedder) as memory:
        theirs = memory.write(LESSON, namespace=shared)
        # without read_namespaces the own namespace only
        plain = HindsightMemory(memory=memory, short_term=_ListMemory(messages=[]))
        plain.put(ChatMessage(role="user", content=QUESTION))
        assert "Check the file extension" not in (plain.get()[0].content or "")
        mem = HindsightMemory(
            memory=memory,
            short_term=_ListMemory(messages=[]),
            read_namespaces=["/".join(namespace) + "/team/*"],
        )
        mem.put(ChatMessage(role="user", content=QUESTION))
        assert "Check the file extension" in (mem.get()[0].content or "")
        assert [h.namespace for h in mem.last_hits] == [shared]
        assert mem.feedback(theirs.id).use_count == 1
        (given,) = memory.feedback(theirs.id, namespace=shared)
        assert given.by == "/".join(namespace)
        with pytest.raises(NotFoundError):
            mem.feedback(uuid.uuid4())
    async with AsyncMemory(namespace, settings=settings, embedder=embedder) as amemory:
        amem = HindsightMemory(
            memory=amemory, short_term=_ListMemory(messages=[]), read_namespaces=[shared]
        )
        await amem.aput(ChatMessage(role="user", content=QUESTION))
        assert "Check the file extension" in ((await amem.aget())[0].content or "")
        await amem.afeedback(theirs.id, helpful=False)
        latest = (await amemory.feedback(theirs.id, namespace=shared))[0]
        assert (latest.helpful, latest.by) == (False, "/".join(namespace))
        block = HindsightMemoryBlock(memory=amemory, read_namespaces=[shared])
        text = await block.aget([ChatMessage(role="user", content=QUESTION)])
        assert "Check the file extension" in text and block.last_hits[0].namespace == shared
    with pytest.raises(Exception, match="name a prefix"):
        HindsightMemory(memory=memory, read_namespaces=["*"])
