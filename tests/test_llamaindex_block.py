"""HindsightMemoryBlock inside LlamaIndex's Memory, SimpleChatEngine (sync and async)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("llama_index.core", reason="needs the llamaindex extra")

from llama_index.core.async_utils import asyncio_run
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory as ChatMemory
from sqlalchemy.ext.asyncio import create_async_engine

from hindsight_adapters.llamaindex import HindsightMemoryBlock
from hindsight_adapters.llamaindex.testing import ScriptedChatLLM, prompt_text
from hindsight_core import AsyncMemory, Memory, Settings

LESSON = {
    "scene": "file-cleanup",
    "trigger": "deleting files in the downloads folder",
    "lesson": "Check the file extension before deleting",
}
QUESTION = "Please clean up my downloads folder"


def lesson_aware(messages: list[ChatMessage]) -> str:
    """The scripted model acts on the lesson only if it was in its prompt."""
    if "Check the file extension" in prompt_text(messages):
        return "I will check each file's extension before deleting anything."
    return "Deleting everything in downloads."


@pytest.fixture
def make_chat_memory() -> Iterator[Any]:
    """LlamaIndex Memory on an aiosqlite engine we dispose (else a ResourceWarning)."""
    engines = []

    def make(**kwargs: Any) -> ChatMemory:
        engine = create_async_engine("sqlite+aiosqlite:///:memory:")
        engines.append(engine)
        return ChatMemory.from_defaults(tokenizer_fn=str.split, async_engine=engine, **kwargs)

    yield make
    for engine in engines:
        asyncio_run(engine.dispose())


@pytest.fixture
def sync_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """For sync tests: LlamaIndex's asyncio_run would otherwise leave a loop unclosed."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()
    asyncio.set_event_loop(None)


async def test_block_renders_recalled_lessons_in_memory(
    amemory: AsyncMemory, make_chat_memory: Any
) -> None:
    written = await amemory.write(LESSON)
    block = HindsightMemoryBlock(memory=amemory)
    chat = make_chat_memory(memory_blocks=[block], session_id="s1")
    await chat.aput(ChatMessage(role="user", content=QUESTION))

    messages = await chat.aget()

    assert messages[0].role.value == "system"
    system = messages[0].content or ""
    assert "<hindsight_lessons>" in system
    line = next(li for li in system.splitlines() if "Check the file extension" in li)
    # compact: lesson first, then the trigger, then the id for feedback
    assert (
        line.index("Check the file") < line.index("downloads folder") < line.index(str(written.id))
    )
    assert block.shown_ids == [str(written.id)]
    assert block.last_warning is None


async def test_block_ignores_unknown_kwargs_and_empty_input(amemory: AsyncMemory) -> None:
    await amemory.write(LESSON)
    block = HindsightMemoryBlock(memory=amemory)
    text = await block.aget(
        [ChatMessage(role="user", content=QUESTION)],
        session_id="x",
        initial_token_count=12,
        something_new=True,
    )
    assert "Check the file extension" in text
    assert await block.aget([], session_id="x") == ""


async def test_simple_chat_engine_async_sees_lesson(
    amemory: AsyncMemory, make_chat_memory: Any
) -> None:
    await amemory.write(LESSON)
    llm = ScriptedChatLLM(lesson_aware)
    chat = make_chat_memory(memory_blocks=[HindsightMemoryBlock(memory=amemory)])
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=chat, system_prompt="Be careful.")

    reply = await engine.achat(QUESTION)

    assert reply.response.startswith("I will check each file's extension")
    assert "Check the file extension before deleting" in prompt_text(llm.calls[0])


def opened(memory: Memory) -> bool:
    """Whether ``memory`` has opened a connection (checked in or out of its pool)."""
    pool = memory.engine.pool
    return pool.checkedin() + pool.checkedout() > 0  # type: ignore[attr-defined]


async def test_sync_chat_inside_a_loop_uses_the_thread_path(
    amemory: AsyncMemory, make_chat_memory: Any
) -> None:
    """engine.chat() inside a running loop runs the block on a new loop in a new thread:
    the AsyncMemory's pool must not be touched there; a sync twin is used instead."""
    await amemory.write(LESSON)
    llm = ScriptedChatLLM(lesson_aware)
    block = HindsightMemoryBlock(memory=amemory)
    chat = make_chat_memory(memory_blocks=[block])
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=chat)
    try:
        first = engine.chat(QUESTION)
        second = engine.chat(QUESTION + " again")
        assert opened(block.bridge.sync_memory()), "the sync twin was not used"
        # and the AsyncMemory still works on its own loop afterwards
        assert (await amemory.recall(QUESTION)).hits
    finally:
        block.close()
    assert first.response.startswith("I will check") and second.response.startswith("I will")


def test_sync_chat_with_sync_memory(
    sync_loop: asyncio.AbstractEventLoop, memory: Memory, make_chat_memory: Any
) -> None:
    memory.write(LESSON)
    llm = ScriptedChatLLM(lesson_aware)
    engine = SimpleChatEngine.from_defaults(
        llm=llm, memory=make_chat_memory(memory_blocks=[HindsightMemoryBlock(memory=memory)])
    )
    assert engine.chat(QUESTION).response.startswith("I will check")
    assert len(llm.calls) == 1 and "Check the file extension" in prompt_text(llm.calls[0])


async def test_namespaces_stay_isolated(
    amemory: AsyncMemory, settings: Settings, embedder: Any, make_chat_memory: Any
) -> None:
    await amemory.write(LESSON)
    other_ns = ("test", "other-" + uuid.uuid4().hex[:8])
    async with AsyncMemory(other_ns, settings=settings, embedder=embedder) as other:
        foreign = HindsightMemoryBlock(memory=other)
        assert await foreign.aget([ChatMessage(role="user", content=QUESTION)]) == ""
        # an explicit namespace on the block overrides the memory's default
        pointed = HindsightMemoryBlock(memory=other, namespace=amemory.namespace)
        assert "Check the file" in await pointed.aget([ChatMessage(role="user", content=QUESTION)])
        llm = ScriptedChatLLM(lesson_aware)
        engine = SimpleChatEngine.from_defaults(
            llm=llm, memory=make_chat_memory(memory_blocks=[foreign])
        )
        assert (await engine.achat(QUESTION)).response.startswith("Deleting")


async def test_scene_filter(amemory: AsyncMemory) -> None:
    await amemory.write(LESSON)
    msgs = [ChatMessage(role="user", content=QUESTION)]
    assert await HindsightMemoryBlock(memory=amemory, scene="code-review").aget(msgs) == ""
    assert "Check" in await HindsightMemoryBlock(memory=amemory, scene="file-cleanup").aget(msgs)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_recall_failure_degrades_to_no_block(
    kind: str, embedder: Any, make_chat_memory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bad = Settings(database_url="postgresql+psycopg://u@127.0.0.1:1/x", connect_timeout=1)
    core: Memory | AsyncMemory = (Memory if kind == "sync" else AsyncMemory)(
        ("test", "down"), settings=bad, embedder=embedder
    )
    llm = ScriptedChatLLM(lesson_aware)
    block = HindsightMemoryBlock(memory=core)
    engine = SimpleChatEngine.from_defaults(
        llm=llm, memory=make_chat_memory(memory_blocks=[block]), system_prompt="Be careful."
    )
    with caplog.at_level(logging.WARNING, logger="hindsight"):
        reply = await engine.achat(QUESTION)
    assert reply.response == "Deleting everything in downloads."
    assert [m.content for m in llm.calls[0]] == ["Be careful.", QUESTION]  # no block at all
    assert block.last_warning and "memory unavailable" in block.last_warning
    assert any("recall degraded" in r.getMessage() for r in caplog.records)
    block.close()
    if isinstance(core, AsyncMemory):
        await core.aclose()
    else:
        core.close()


async def test_atruncate_drops_lowest_ranked_first(
    amemory: AsyncMemory, make_chat_memory: Any
) -> None:
    await amemory.write_many(
        [
            LESSON,
            {
                "scene": "file-cleanup",
                "trigger": "removing old downloads",
                "lesson": "Move files to the trash, do not rm them",
            },
            {"scene": "cooking", "trigger": "baking bread", "lesson": "Let the dough rest an hour"},
        ]
    )
    block = HindsightMemoryBlock(memory=amemory, top_k=3)
    content = await block.aget([ChatMessage(role="user", content=QUESTION)])
    lines = content.splitlines()
    assert len(lines) == 4 and "dough" in lines[-1]  # header + 3 lessons, worst last
    cut = await block.atruncate(content, 5)
    assert cut is not None and cut.splitlines() == lines[:-1]
    assert await block.atruncate(content, 10_000) is None

    # inside Memory: over budget, the block (priority 1) is truncated, the history kept
    over = len(content.split()) + len(QUESTION.split()) - 3  # 3 tokens over budget
    chat = make_chat_memory(memory_blocks=[block], token_limit=over)
    await chat.aput(ChatMessage(role="user", content=QUESTION))
    system = (await chat.aget())[0].content or ""
    assert "Check the file extension" in system and "dough" not in system


async def test_flush_reaches_aput_and_submits_reflection(
    amemory: AsyncMemory, make_chat_memory: Any
) -> None:
    block = HindsightMemoryBlock(memory=amemory, reflect_on_flush=True)
    chat = make_chat_memory(
        memory_blocks=[block],
        session_id="flushy",
        token_limit=40,
        chat_history_token_ratio=0.5,
        token_flush_size=10,
    )
    for i in range(4):
        await chat.aput_messages(
            [
                ChatMessage(role="user", content=f"step {i}: list the files in downloads now"),
                ChatMessage(role="assistant", content=f"done {i}: there are {i + 3} old files"),
            ]
        )
    assert block.bridge.submitted >= 1
    job = block.last_reflection
    assert isinstance(job, asyncio.Task)  # on the home loop: AsyncReflector.submit
    await block.await_reflections(timeout=30)
    result = job.result()
    assert result.error is None


async def test_bridge_never_binds_to_a_worker_threads_loop(amemory: AsyncMemory) -> None:
    from hindsight_adapters.llamaindex import CoreBridge

    await amemory.write(LESSON)
    bridge = await asyncio.to_thread(CoreBridge, amemory)  # built with no running loop
    try:
        in_thread = await asyncio.to_thread(
            asyncio.run, bridge.arecall(QUESTION, namespace=None, scene=None, top_k=3)
        )
        assert in_thread.hits and opened(bridge.sync_memory())  # through the sync twin
        # the worker thread's throw-away loop did not become its home: this loop is
        assert bridge.native()
        native = await bridge.arecall(QUESTION, namespace=None, scene=None, top_k=3)
        assert native.hits and bridge.native()
    finally:
        bridge.close()


def test_exports_are_complete() -> None:
    import hindsight_adapters.llamaindex as pkg

    public = {n for n in dir(pkg) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(pkg.__all__)
    assert all(hasattr(pkg, n) for n in pkg.__all__)


async def test_flush_from_a_sync_call_reflects_on_a_thread(
    amemory: AsyncMemory, make_chat_memory: Any
) -> None:
    """chat.put_messages() (sync, inside a running loop) flushes on a throw-away loop:
    the reflection goes to a BackgroundReflector thread, not to a dying loop."""
    import concurrent.futures

    block = HindsightMemoryBlock(memory=amemory, reflect_on_flush=True)
    chat = make_chat_memory(
        memory_blocks=[block], token_limit=40, chat_history_token_ratio=0.5, token_flush_size=10
    )
    try:
        for i in range(4):
            chat.put_messages(
                [
                    ChatMessage(role="user", content=f"step {i}: list the files in downloads now"),
                    ChatMessage(role="assistant", content=f"done {i}: there are {i + 3} old files"),
                ]
            )
        job = block.last_reflection
        assert isinstance(job, concurrent.futures.Future) and block.bridge.submitted >= 1
        result = await asyncio.wrap_future(job)
        assert result.error is None and result.distiller == "rule-based"
    finally:
        block.close()
