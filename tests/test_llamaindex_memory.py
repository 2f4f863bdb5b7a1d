"""HindsightMemory with FunctionAgent and SimpleChatEngine; Context round trip; providers."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

pytest.importorskip("llama_index.core", reason="needs the llamaindex extra")

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context

from hindsight_adapters.llamaindex import (
    HindsightMemory,
    LlamaIndexEmbedder,
    LlamaIndexLLM,
)
from hindsight_adapters.llamaindex.testing import (
    ScriptedChatLLM,
    prompt_text,
    tool_call,
)
from hindsight_core import AsyncMemory, Memory

# Building or running any Workflow (FunctionAgent) makes llama-index-workflows call
# inspect.getmembers on pydantic models, which touches deprecated pydantic attributes.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect")

LESSON = {
    "scene": "file-cleanup",
    "trigger": "deleting files in the downloads folder",
    "lesson": "Check the file extension before deleting",
}
QUESTION = "Please clean up my downloads folder"
FILES = "report.pdf, setup.exe, notes.txt"


def list_files(folder: str) -> str:
    """List the files in a folder."""
    return FILES


def agent_script(messages: list[ChatMessage]) -> ChatMessage | str:
    """List the folder first; then act on the lesson only if it was in the prompt."""
    if not any(m.role.value == "tool" for m in messages):
        return tool_call("list_files", folder="downloads")
    if "Check the file extension" in prompt_text(messages):
        return "Deleted only setup.exe after checking extensions."
    return "Deleted report.pdf, setup.exe and notes.txt."


@pytest.fixture
async def hmem(amemory: AsyncMemory) -> AsyncIterator[HindsightMemory]:
    mem = HindsightMemory(
        memory=amemory, system_prompt="You clean up files.", tokenizer_fn=str.split
    )
    yield mem
    await mem.aclose()


def roles(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.role.value for m in messages]


async def test_function_agent_acts_on_lesson(amemory: AsyncMemory, hmem: HindsightMemory) -> None:
    written = await amemory.write(LESSON)
    llm = ScriptedChatLLM(agent_script)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(list_files)], llm=llm)

    result = await agent.run(user_msg=QUESTION, memory=hmem)

    assert str(result.response.content) == "Deleted only setup.exe after checking extensions."
    for call in llm.calls:  # one system message, holding prompt and lesson, every time
        assert roles(call).count("system") == 1 and roles(call)[0] == "system"
        assert call[0].content.startswith("You clean up files.")
        assert "Check the file extension before deleting" in call[0].content
    assert hmem.shown_ids == [str(written.id)]
    history = await hmem.aget_all()
    assert roles(history) == ["user", "assistant", "tool", "assistant"]
    assert all("Check the file extension" not in (m.content or "") for m in history)


async def test_lessons_merge_into_existing_system_message(
    amemory: AsyncMemory, hmem: HindsightMemory
) -> None:
    await amemory.write(LESSON)
    await hmem.aset(
        [
            ChatMessage(role="system", content="House rules: be brief."),
            ChatMessage(role="user", content=QUESTION),
        ]
    )
    first = await hmem.aget()
    second = await hmem.aget()
    assert roles(first) == ["system", "user"] and roles(second) == roles(first)
    text = first[0].content or ""
    assert "House rules: be brief." in text and text.count("Check the file extension") == 1
    assert (await hmem.aget_all())[0].content == "House rules: be brief."  # not persisted


async def test_simple_chat_engine_sync_and_async(
    amemory: AsyncMemory, hmem: HindsightMemory
) -> None:
    await amemory.write(LESSON)
    seen: list[str] = []

    def respond(messages: list[ChatMessage]) -> str:
        seen.append(prompt_text(messages))
        return "checked" if "Check the file extension" in seen[-1] else "deleted"

    engine = SimpleChatEngine.from_defaults(llm=ScriptedChatLLM(respond), memory=hmem)
    assert (await engine.achat(QUESTION)).response == "checked"
    assert engine.chat(QUESTION + " please").response == "checked"  # sync, other thread
    assert len(hmem.chat_history) == 4


async def test_context_round_trip(amemory: AsyncMemory, hmem: HindsightMemory) -> None:
    await amemory.write(LESSON)
    llm = ScriptedChatLLM(agent_script)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(list_files)], llm=llm)
    ctx = Context(agent)
    await agent.run(user_msg=QUESTION, memory=hmem, ctx=ctx)

    data = json.loads(json.dumps(ctx.to_dict()))  # warnings are errors: nothing skipped
    restored_ctx = Context.from_dict(agent, data)
    restored: HindsightMemory = await restored_ctx.store.get("memory")
    try:
        assert isinstance(restored, HindsightMemory) and restored is not hmem
        assert restored.shown_ids == hmem.shown_ids
        assert restored.bridge is hmem.bridge  # found its core memory again
        llm2 = ScriptedChatLLM(["Nothing else to do."])
        agent2 = FunctionAgent(tools=[FunctionTool.from_defaults(list_files)], llm=llm2)
        ctx2 = Context.from_dict(agent2, data)
        await agent2.run(user_msg="Anything left?", ctx=ctx2)
        await (await ctx2.store.get("memory")).aclose()
        sent = llm2.calls[0]
        assert QUESTION in prompt_text(sent) and "Anything left?" in prompt_text(sent)
        assert "Check the file extension" in sent[0].content
    finally:
        await restored.aclose()


CORRECTION = "No, don't delete the PDFs, keep report.pdf."


async def test_end_task_reflects_with_a_llamaindex_llm(amemory: AsyncMemory) -> None:
    reply = json.dumps(
        {
            "records": [
                {
                    "scene": "file-cleanup",
                    "trigger": "clearing out a downloads folder",
                    "lesson": "Keep PDFs when cleaning downloads",
                    "confidence": 0.9,
                    "steps": [3],
                    "evidence": "report.pdf",
                }
            ]
        }
    )  # step 3: list_files' result
    reflection_llm = ScriptedChatLLM([reply])
    mem = HindsightMemory(memory=amemory, reflection_llm=reflection_llm, tokenizer_fn=str.split)
    try:
        old = (await amemory.write(LESSON)).id
        llm = ScriptedChatLLM(agent_script)
        agent = FunctionAgent(tools=[FunctionTool.from_defaults(list_files)], llm=llm)
        await agent.run(user_msg=QUESTION, memory=mem)
        # The evidence: the user's correction (a run with none asks no model).
        await mem.aput(ChatMessage(role="user", content=CORRECTION))
        record = await mem.afeedback(old, helpful=True)
        assert record.use_count == 1 and mem.used_ids == [str(old)]
        before = await amemory.stats()

        result = await mem.aend_task(outcome="success")

        assert result.error is None and [w.status for w in result.written] == ["inserted"]
        assert result.distiller == "llm:scripted"
        prompt = prompt_text(reflection_llm.calls[0])
        # the correction is the evidence; the goal is not sent (small models repeat it)
        assert CORRECTION in prompt and QUESTION not in prompt
        hits = (await amemory.recall("cleaning the downloads folder", top_k=5)).hits
        assert "Keep PDFs when cleaning downloads" in [h.record.lesson for h in hits]
        assert (await amemory.stats()).llm_prompt_tokens > before.llm_prompt_tokens
        assert mem.shown_ids == [] and mem.task_start == 5  # a new task begins
    finally:
        await mem.aclose()


def test_end_task_and_feedback_sync(memory: Memory) -> None:
    old = memory.write(LESSON).id
    mem = HindsightMemory(memory=memory, short_term=_ListMemory(), namespace=memory.namespace)
    mem.put(ChatMessage(role="user", content=QUESTION))
    assert "Check the file extension" in (mem.get()[0].content or "")
    mem.put(ChatMessage(role="assistant", content="Deleted only setup.exe."))
    assert mem.feedback(old).use_count == 1
    result = mem.end_task(outcome="success")  # rule-based distiller (no LLM)
    assert result.distiller == "rule-based" and result.error is None


async def test_namespaces_isolated(amemory: AsyncMemory, settings: Any, embedder: Any) -> None:
    await amemory.write(LESSON)
    async with AsyncMemory(
        ("test", uuid.uuid4().hex[:8]), settings=settings, embedder=embedder
    ) as other:
        mem = HindsightMemory(memory=other, short_term=_ListMemory())
        await mem.aput(ChatMessage(role="user", content=QUESTION))
        assert roles(await mem.aget()) == ["user"] and mem.shown_ids == []
        await mem.aclose()


async def test_recall_failure_keeps_the_agent_running(
    embedder: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from hindsight_core import Settings

    bad = Settings(database_url="postgresql+psycopg://u@127.0.0.1:1/x", connect_timeout=1)
    async with AsyncMemory(("test", "down"), settings=bad, embedder=embedder) as down:
        mem = HindsightMemory(
            memory=down, system_prompt="You clean up files.", short_term=_ListMemory()
        )
        llm = ScriptedChatLLM(agent_script)
        agent = FunctionAgent(tools=[FunctionTool.from_defaults(list_files)], llm=llm)
        with caplog.at_level("WARNING", logger="hindsight"):
            result = await agent.run(user_msg=QUESTION, memory=mem)
        assert str(result.response.content).startswith("Deleted report.pdf")
        assert llm.calls[0][0].content == "You clean up files."
        assert any("recall degraded" in r.getMessage() for r in caplog.records)
        await mem.aclose()


# --------------------------------------------------------------------------- providers


class _STEmbedding(BaseEmbedding):
    """Our real local model behind LlamaIndex's BaseEmbedding interface."""

    _inner: Any = PrivateAttr()
    queries: list[str] = []  # pydantic copies the default per instance

    def __init__(self, inner: Any) -> None:
        super().__init__(model_name="all-MiniLM-L6-v2")
        self._inner = inner

    def _get_query_embedding(self, query: str) -> list[float]:
        self.queries.append(query)
        return self._inner.embed([query])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._inner.embed([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._inner.embed(texts)


async def test_llamaindex_embedder_round_trip(
    settings: Any, embedder: Any, namespace: tuple[str, str]
) -> None:
    wrapped = LlamaIndexEmbedder(
        _STEmbedding(embedder), model_name="all-MiniLM-L6-v2", languages=frozenset({"en"})
    )
    assert wrapped.dim == 384
    vec = wrapped.embed(["hello world"])[0]
    assert vec == pytest.approx(embedder.embed(["hello world"])[0], abs=1e-5)
    assert (await wrapped.aembed(["hello world"]))[0] == pytest.approx(vec, abs=1e-5)
    async with AsyncMemory(namespace, settings=settings, embedder=wrapped) as mem:
        await mem.write(LESSON)
        hits = (await mem.recall(QUESTION)).hits
        assert hits and hits[0].record.lesson == LESSON["lesson"]
    # the query went to the query side (a model's query instruction applies there)
    assert wrapped.embed_model.queries == [QUESTION]
    with pytest.raises(TypeError):
        LlamaIndexEmbedder(object())  # type: ignore[arg-type]


async def test_llamaindex_llm_protocol_and_usage() -> None:
    from hindsight_core.reflection import LLM

    llm = LlamaIndexLLM(ScriptedChatLLM(["one two three", "four"]))
    assert isinstance(llm, LLM) and llm.model_name == "scripted"
    first = llm.complete(
        [{"role": "system", "content": "be terse"}, {"role": "user", "content": "count to three"}]
    )
    assert first.text == "one two three"
    assert (first.prompt_tokens, first.completion_tokens) == (5, 3)
    second = await llm.acomplete([{"role": "user", "content": "next"}])
    assert second.text == "four" and second.model == "scripted"


# --------------------------------------------------------------------------- helpers


from llama_index.core.memory import BaseMemory  # noqa: E402


class _ListMemory(BaseMemory):
    """A plain in-process short-term memory (no aiosqlite to dispose)."""

    messages: list[ChatMessage] = []

    @classmethod
    def class_name(cls) -> str:
        return "_ListMemory"

    @classmethod
    def from_defaults(cls, **kwargs: Any) -> _ListMemory:
        return cls(**kwargs)

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return [m.model_copy(deep=True) for m in self.messages]

    def get_all(self) -> list[ChatMessage]:
        return list(self.messages)

    def put(self, message: ChatMessage) -> None:
        self.messages.append(message)

    def set(self, messages: list[ChatMessage]) -> None:
        self.messages = list(messages)

    def reset(self) -> None:
        self.messages = []

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        return self.get(input, **kwargs)

    async def aget_all(self) -> list[ChatMessage]:
        return self.get_all()

    async def aput(self, message: ChatMessage) -> None:
        self.put(message)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        self.messages.extend(messages)

    async def aset(self, messages: list[ChatMessage]) -> None:
        self.set(messages)

    async def areset(self) -> None:
        self.reset()
