"""The file-cleanup example end to end: run 1 makes the mistake and learns, run 2 avoids it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("langgraph.prebuilt", reason="needs the langgraph extra")

from hindsight_adapters.langgraph import HindsightCheckpointer
from hindsight_core import Memory

EXAMPLE = Path(__file__).parent.parent / "integrations" / "langgraph" / "file_cleanup_agent.py"


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("file_cleanup_agent", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_second_run_recalls_the_lesson_and_keeps_the_package(
    memory: Memory, tmp_path: Path
) -> None:
    example = _load()
    with HindsightCheckpointer(memory) as checkpointer:
        first, second = example.run_demo(memory, checkpointer, tmp_path)

    assert not first["lessons_in_prompt"]
    assert not first["package_kept"] and first["check_failed"]
    assert first["lessons_written"] == ["Check package.json before deleting packages"]
    stored = memory.list_records()
    assert [r.lesson for r in stored] == ["Check package.json before deleting packages"]
    assert stored[0].source.get("thread") == first["thread_id"]

    assert second["lessons_in_prompt"]
    assert second["package_kept"] and not second["check_failed"]
    assert "ok: the project builds" in second["answer"]
    assert second["lessons_written"] == []  # nothing new to learn

    # The run is in the checkpointer: its history holds the failed check.
    tup = checkpointer.get_tuple({"configurable": {"thread_id": first["thread_id"]}})
    assert any(
        getattr(m, "status", None) == "error" for m in tup.checkpoint["channel_values"]["messages"]
    )


def test_scripted_model_depends_on_the_prompt(tmp_path: Path) -> None:
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

    example = _load()
    model = example.ScriptedCleanupModel()
    listing = ToolMessage(
        "package.json\nold-2020-01-01.log\n" + example.PACKAGE, name="list_files", tool_call_id="1"
    )
    plain = model.invoke([HumanMessage(example.TASK), listing])
    assert {c["args"]["name"] for c in plain.tool_calls} == {"old-2020-01-01.log", example.PACKAGE}
    lessons = SystemMessage(example.MEMORY_HEADER + "\n- Check package.json first")
    careful = model.invoke([lessons, HumanMessage(example.TASK), listing])
    assert careful.tool_calls[0]["name"] == "read_file"
    # An unrelated lesson does not change what it does.
    other = SystemMessage(example.MEMORY_HEADER + "\n- Prefer small commits")
    assert len(model.invoke([other, HumanMessage(example.TASK), listing]).tool_calls) == 2


def test_main_leaves_nothing_in_the_store(
    database_url: str, settings: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python file_cleanup_agent.py`` drops its namespace and its runs' threads."""
    import re

    example = _load()
    example.main([])
    out = capsys.readouterr().out
    threads = re.findall(r"thread (cleanup-\w+)", out)
    assert len(threads) == 2 and "lesson stored" in out
    with Memory(("x",), settings=settings) as mem:  # type: ignore[arg-type]
        assert mem.namespaces(prefix=("examples", "file-cleanup")) == []
        with HindsightCheckpointer(mem) as checkpointer:
            for thread in threads:
                assert checkpointer.get_tuple({"configurable": {"thread_id": thread}}) is None
