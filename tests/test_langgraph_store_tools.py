"""Agent tools and LangMem's memory tools on HindsightStore, inside real LangGraph graphs."""

from __future__ import annotations

import json
import uuid
import warnings
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from hindsight_adapters.langgraph import HindsightStore, create_memory_tools
from hindsight_core import Settings
from tests._lg_store_util import DIMS, char_embed

with warnings.catch_warnings():  # langmem -> trustcall imports Send from its old place
    warnings.simplefilter("ignore")
    from langmem import create_manage_memory_tool, create_search_memory_tool


@pytest.fixture
async def store(settings: Settings, embedder: Any) -> Any:
    s = HindsightStore(
        settings=settings, embedder=embedder, index={"dims": DIMS, "embed": char_embed}
    )
    yield s
    await s.aclose()  # closes the async pool too


def graph(store: Any, tools: list[Any], calls: list[tuple[str, dict[str, Any]]]) -> Any:
    """START -> agent (emits the scripted tool calls) -> ToolNode -> END."""

    def agent(state: MessagesState) -> dict[str, Any]:
        return {
            "messages": [
                AIMessage(
                    content="",
                    tool_calls=[
                        {"name": name, "args": args, "id": f"call{i}"}
                        for i, (name, args) in enumerate(calls)
                    ],
                )
            ]
        }

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_edge("agent", "tools")
    g.add_edge("tools", END)
    return g.compile(store=store)


def outputs(state: dict[str, Any]) -> list[Any]:
    return [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]


def test_tools_in_a_tool_node_write_search_and_report_usage(store) -> None:
    team = uuid.uuid4().hex[:8]
    tools = create_memory_tools(("lessons", "{team}", "{user_id}"))
    cfg = {"configurable": {"team": team, "user_id": "alice", "thread_id": "t1"}}
    lesson = {
        "lesson": "Check the extension before deleting",
        "trigger": "cleaning up a downloads folder",
        "scene": "file-cleanup",
    }
    (written,) = outputs(
        graph(store, tools, [("write_memory", lesson)]).invoke(
            {"messages": [HumanMessage("remember")]}, cfg
        )
    )
    assert written["status"] == "inserted"

    (found,) = outputs(
        graph(store, tools, [("search_memory", {"query": "delete old files"})]).invoke(
            {"messages": [HumanMessage("recall")]}, cfg
        )
    )
    assert found["lessons"][0]["id"] == written["id"]
    assert list(found["lessons"][0])[:2] == ["lesson", "trigger"]  # compact, lesson first

    (used,) = outputs(
        graph(
            store, tools, [("update_memory_usage", {"id": written["id"], "helpful": True})]
        ).invoke({"messages": [HumanMessage("feedback")]}, cfg)
    )
    assert used["use_count"] == 1
    rec = store.memory.get(written["id"], namespace=("lessons", team, "alice"))
    assert rec.source == {"agent": "langgraph", "task": "t1"}

    # another user of the same team sees nothing: the namespace comes from the config
    other = {"configurable": {"team": team, "user_id": "bob"}}
    (none,) = outputs(
        graph(store, tools, [("search_memory", {"query": "delete old files"})]).invoke(
            {"messages": [HumanMessage("recall")]}, other
        )
    )
    assert none["lessons"] == []
    (err,) = outputs(
        graph(store, tools, [("update_memory_usage", {"id": written["id"]})]).invoke(
            {"messages": [HumanMessage("x")]}, other
        )
    )
    assert "no record" in err["error"]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_version_tools_correct_a_lesson_and_show_its_history(store, kind: str) -> None:
    """``versions=True``: supersede_memory and memory_history, in a real ToolNode."""
    user = uuid.uuid4().hex[:8]
    tools = create_memory_tools(versions=True)
    assert [t.name for t in tools][3:] == ["supersede_memory", "memory_history"]
    cfg = {"configurable": {"user_id": user}}

    async def run(calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        app = graph(store, tools, calls)
        inputs = {"messages": [HumanMessage("x")]}
        return outputs(
            await app.ainvoke(inputs, cfg) if kind == "async" else app.invoke(inputs, cfg)
        )

    lesson = {"lesson": "Pay invoices on receipt", "trigger": "an invoice arrives"}
    (written,) = await run([("write_memory", lesson)])
    fix = {"id": written["id"], "lesson": "Ask before paying invoices", "reason": "fraud"}
    (new,) = await run([("supersede_memory", fix)])
    assert new["supersedes"] == written["id"]
    (chain,) = await run([("memory_history", {"id": written["id"]})])
    assert [(v["id"], v["current"]) for v in chain["versions"]] == [
        (written["id"], False),
        (new["id"], True),
    ]
    assert chain["versions"][0]["superseded_reason"] == "fraud"
    (found,) = await run([("search_memory", {"query": "pay the invoice"})])
    assert [h["id"] for h in found["lessons"]] == [new["id"]]
    rec = store.memory.get(new["id"], namespace=("lessons", user))
    assert rec.trigger == "an invoice arrives" and rec.source["agent"] == "langgraph"
    (err,) = await run([("memory_history", {"id": str(uuid.uuid4())})])
    assert "no record" in err["error"]


async def test_tools_async_and_missing_config(store) -> None:
    user = uuid.uuid4().hex[:8]
    search, write, _ = create_memory_tools()
    app = graph(
        store,
        [search, write],
        [
            ("write_memory", {"lesson": "Ask before paying invoices", "trigger": "an invoice"}),
        ],
    )
    (res,) = outputs(
        await app.ainvoke({"messages": [HumanMessage("x")]}, {"configurable": {"user_id": user}})
    )
    assert res["status"] == "inserted"
    app = graph(store, [search], [("search_memory", {"query": "pay the invoice"})])
    (found,) = outputs(
        await app.ainvoke({"messages": [HumanMessage("x")]}, {"configurable": {"user_id": user}})
    )
    assert found["lessons"][0]["lesson"] == "Ask before paying invoices"
    (err,) = outputs(await app.ainvoke({"messages": [HumanMessage("x")]}))
    assert "user_id" in err["error"]


def test_tools_need_a_hindsight_store() -> None:
    from langgraph.store.memory import InMemoryStore

    (search, _, _) = create_memory_tools()
    app = graph(InMemoryStore(), [search], [("search_memory", {"query": "x"})])
    (err,) = outputs(
        app.invoke({"messages": [HumanMessage("x")]}, {"configurable": {"user_id": "u"}})
    )
    assert "HindsightStore" in err["error"]
    assert "lesson" in search.description and "BEFORE" in search.description


def test_langmem_tools_sync(store) -> None:
    user = uuid.uuid4().hex[:8]
    manage = create_manage_memory_tool(("memories", "{langgraph_user_id}"), store=store)
    search = create_search_memory_tool(("memories", "{langgraph_user_id}"), store=store)
    cfg = {"configurable": {"langgraph_user_id": user}}
    created = manage.invoke({"content": "User prefers dark mode", "action": "create"}, cfg)
    key = created.split()[-1]
    manage.invoke({"content": "User likes tea", "action": "create"}, cfg)
    item = store.get(("memories", user), key)
    assert item.value == {"content": "User prefers dark mode"}
    found = json.loads(search.invoke({"query": "dark mode"}, cfg))
    assert found[0]["key"] == key and found[0]["score"] > 0
    manage.invoke({"content": "User prefers light mode", "action": "update", "id": key}, cfg)
    assert store.get(("memories", user), key).value == {"content": "User prefers light mode"}
    manage.invoke({"action": "delete", "id": key}, cfg)
    assert store.get(("memories", user), key) is None
    other = json.loads(
        search.invoke({"query": "tea"}, {"configurable": {"langgraph_user_id": "someone-else"}})
    )
    assert other == []


async def test_langmem_tools_async_through_graph_store(store) -> None:
    user = uuid.uuid4().hex[:8]
    manage = create_manage_memory_tool(("memories", "{langgraph_user_id}"))  # get_store()
    search = create_search_memory_tool(("memories", "{langgraph_user_id}"))
    cfg = {"configurable": {"langgraph_user_id": user}}
    app = graph(store, [manage], [("manage_memory", {"content": "Meeting notes go to Notion"})])
    (created,) = [
        m.content
        for m in (await app.ainvoke({"messages": [HumanMessage("x")]}, cfg))["messages"]
        if isinstance(m, ToolMessage)
    ]
    assert created.startswith("created memory")
    app = graph(store, [search], [("search_memory", {"query": "where do notes go"})])
    (found,) = outputs(await app.ainvoke({"messages": [HumanMessage("x")]}, cfg))
    assert found[0]["value"] == {"content": "Meeting notes go to Notion"}
    assert found[0]["namespace"] == ["memories", user]
