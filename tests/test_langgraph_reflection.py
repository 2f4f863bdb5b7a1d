"""Reflection after a LangGraph run, recall before one, and the LangChain LLM wrapper."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.prebuilt", reason="needs the langgraph extra")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from hindsight_adapters.langgraph import (
    MEMORY_HEADER,
    HindsightCheckpointer,
    LangChainLLM,
    areflect_thread,
    recall_node,
    reflect_thread,
    reflection_node,
    thread_trajectory,
)
from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.reflection import ScriptedLLM


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


@tool
def convert(path: str, fmt: str = "png") -> str:
    """Convert an image."""
    if fmt == "png":
        raise ValueError("unsupported format png for CMYK images")
    return f"converted {path} to {fmt}"


def _calls(*calls: dict[str, Any]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": "convert", "args": c, "id": uuid.uuid4().hex} for c in calls],
    )


def scripted_run() -> list[AIMessage]:
    return [
        _calls({"path": "a.tif"}),
        _calls({"path": "a.tif", "fmt": "jpg"}),
        AIMessage(content="Converted a.tif to jpg."),
    ]


def graph_for(checkpointer: Any, answers: list[AIMessage], *extra: tuple[str, Any]) -> Any:
    model = GenericFakeChatModel(messages=iter(answers))

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: State) -> str:
        return "tools" if state["messages"][-1].tool_calls else "end"

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([convert], handle_tool_errors=True))
    for name, node in extra:
        g.add_node(name, node)
    names = [n for n, _ in extra]
    g.add_edge(START, "recall" if "recall" in names else "agent")
    if "recall" in names:
        g.add_edge("recall", "agent")
    g.add_conditional_edges(
        "agent", route, {"tools": "tools", "end": "reflect" if "reflect" in names else END}
    )
    g.add_edge("tools", "agent")
    if "reflect" in names:
        g.add_edge("reflect", END)
    return g.compile(checkpointer=checkpointer)


@pytest.fixture
def saver(memory: Memory) -> Any:
    with HindsightCheckpointer(memory) as cp:
        yield cp


def test_reflect_thread_turns_history_into_a_lesson(saver: Any, memory: Memory) -> None:
    graph = graph_for(saver, scripted_run())
    tid = uuid.uuid4().hex
    graph.invoke(
        {"messages": [HumanMessage("convert a.tif for the web")]},
        {"configurable": {"thread_id": tid}},
    )

    trajectory = thread_trajectory(saver, tid, scene="images")
    assert trajectory.goal == "convert a.tif for the web"
    assert [s.kind for s in trajectory.steps] == [
        "message",
        "tool_call",
        "error",
        "tool_call",
        "tool_result",
        "message",
    ]
    assert (
        trajectory.steps[2].tool == "convert"
        and "unsupported format" in trajectory.steps[2].content
    )
    assert trajectory.steps[3].args == {"path": "a.tif", "fmt": "jpg"}
    assert trajectory.outcome == "success" and trajectory.final_state.startswith("Converted")
    assert trajectory.source == {"agent": "langgraph", "thread": tid}

    result = reflect_thread(saver, tid, memory=memory, scene="images")
    assert not result.skipped and result.distiller == "rule-based"
    assert len(result.written) == 1
    lesson = memory.get(result.written[0].id).lesson
    assert lesson == "When calling convert, always add fmt=jpg"


def test_recall_node_puts_lessons_first_and_reflection_node_learns(
    saver: Any, memory: Memory
) -> None:
    memory.write(
        {
            "scene": "images",
            "trigger": "converting CMYK images for the web",
            "lesson": "Convert CMYK images to jpg, not png",
            "confidence": 0.9,
        }
    )
    reflect = reflection_node(memory, scene="images")
    graph = graph_for(
        saver, scripted_run(), ("recall", recall_node(memory, top_k=2)), ("reflect", reflect)
    )
    out = graph.invoke(
        {"messages": [HumanMessage("convert a CMYK image for the web")]},
        {"configurable": {"thread_id": uuid.uuid4().hex}},
    )
    first = out["messages"][0]
    assert isinstance(first, SystemMessage) and first.content.startswith(MEMORY_HEADER)
    assert "Convert CMYK images to jpg, not png" in first.content
    assert isinstance(out["messages"][1], HumanMessage)
    results = reflect.reflection.wait(timeout=60)
    reflect.reflection.close()
    assert len(results) == 1 and not results[0].skipped
    lessons = {r.lesson for r in memory.list_records()}
    assert len(lessons) == 2  # the seeded one and the one just learned


def test_a_model_repeating_the_recalled_lesson_reinforces_it(saver: Any, memory: Memory) -> None:
    """The run's fix (convert, then the call with fmt=jpg) phrased by the model as the
    lesson that was recalled before the run: the recalled lesson is reinforced, not
    written again. The model is asked about that evidence alone (reflection's evidence
    first: one request per finding, not the whole run)."""
    shown = memory.write(
        {
            "scene": "images",
            "trigger": "converting CMYK images for the web",
            "lesson": "Convert CMYK images to jpg, not png",
        }
    )
    llm = ScriptedLLM([json.dumps({"lesson": "Convert CMYK images to jpg, not png."})])
    reflect = reflection_node(memory, llm=llm, scene="images")
    graph = graph_for(
        saver, scripted_run(), ("recall", recall_node(memory, top_k=2)), ("reflect", reflect)
    )
    graph.invoke(
        {"messages": [HumanMessage("convert a CMYK image for the web")]},
        {"configurable": {"thread_id": uuid.uuid4().hex}},
    )
    (result,) = reflect.reflection.wait(timeout=60)
    reflect.reflection.close()
    assert [r.id for r in result.reinforced] == [shown.id] and result.written == []
    (only,) = memory.list_records()
    assert only.id == shown.id and only.occurrences == 2
    assert len(llm.calls) == 1
    asked = llm.calls[0]["messages"][-1]["content"]
    assert "jpg" in asked and "convert a CMYK image for the web" not in asked


def test_recall_node_degrades_to_nothing(embedder: Any) -> None:
    broken = Memory(
        ("t",),
        settings=Settings(database_url="postgresql://x@127.0.0.1:9/x", connect_timeout=1),
        embedder=embedder,
    )
    node = recall_node(broken)
    state = {"messages": [HumanMessage("anything")]}
    assert node.invoke(state) == {}
    broken.close()


async def test_async_reflection_node_and_areflect_thread(
    settings: Settings, embedder: Any, namespace: tuple[str, str]
) -> None:
    amemory = AsyncMemory(namespace, settings=settings, embedder=embedder)
    async with HindsightCheckpointer(amemory) as saver:
        reflect = reflection_node(amemory, scene="images")
        graph = graph_for(saver, scripted_run(), ("reflect", reflect))
        tid = uuid.uuid4().hex
        await graph.ainvoke(
            {"messages": [HumanMessage("convert a.tif")]}, {"configurable": {"thread_id": tid}}
        )
        results = await reflect.reflection.await_all()
        assert len(results) == 1 and len(results[0].written) == 1
        again = await areflect_thread(saver, tid, memory=amemory, scene="images")
        assert [w.status for w in again.written] == ["merged"]  # the same lesson: deduplicated
    await amemory.aclose()


async def test_langchain_llm_wrapper() -> None:
    answer = AIMessage(
        content='{"records": []}',
        usage_metadata={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
    )
    llm = LangChainLLM(GenericFakeChatModel(messages=iter([answer, answer])), model_name="fake")
    got = llm.complete([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert (got.text, got.prompt_tokens, got.completion_tokens, got.model) == (
        '{"records": []}',
        12,
        5,
        "fake",
    )
    got = await llm.acomplete([{"role": "user", "content": "u"}])
    assert got.prompt_tokens == 12
    from hindsight_core.errors import LLMError

    with pytest.raises(LLMError):
        llm.complete([{"role": "user", "content": "no more answers"}])


def test_thread_trajectory_follows_the_current_branch_after_time_travel(saver: Any) -> None:
    """A run resumed from an earlier checkpoint leaves the abandoned branch in the
    thread's history; the trajectory holds only the current branch's messages."""
    model = GenericFakeChatModel(
        messages=iter([AIMessage("Book the 9:00 train."), AIMessage("Book two seats on the 9:00.")])
    )

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    graph = g.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    graph.invoke({"messages": [HumanMessage("plan the trip")]}, config)
    before_agent = next(s for s in graph.get_state_history(config) if s.next == ("agent",))
    graph.invoke({"messages": [HumanMessage("we are two")]}, before_agent.config)

    tid = config["configurable"]["thread_id"]
    contents = [s.content for s in thread_trajectory(saver, tid).steps]
    assert contents == ["plan the trip", "we are two", "Book two seats on the 9:00."]
    assert len(list(saver.list(config))) > 4  # the abandoned branch is still stored
