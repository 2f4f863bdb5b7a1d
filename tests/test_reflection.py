"""Reflection: the LLM distiller (scripted model, real storage), review, rule-based."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from hindsight_core import Memory, Settings
from hindsight_core.reflection import (
    LLMResponse,
    Reflector,
    RuleBasedDistiller,
    ScriptedLLM,
    Step,
    Trajectory,
)

CLEANUP = Trajectory(
    goal="Clean up the Downloads folder",
    scene="file-cleanup",
    outcome="partial",
    steps=[
        Step(kind="tool_call", tool="list_dir", args={"path": "~/Downloads"}),
        Step(kind="tool_result", tool="list_dir", content="setup-2024-01-02.exe report-2023.pdf"),
        Step(kind="thought", content="Files with dates are old; delete them."),
        Step(kind="tool_call", tool="delete", args={"path": "~/Downloads/setup-2024-01-02.exe"}),
        Step(kind="tool_result", tool="delete", content="deleted"),
        Step(kind="message", role="user", content="That was the installer I still need!"),
    ],
    final_state="installer deleted by mistake, restored from trash",
    source={"agent": "cleanup-bot"},
)


def answer(*records: dict) -> str:
    return json.dumps({"records": list(records)})


def rec(
    lesson: str, confidence: float | str = 0.9, trigger: str = "cleaning downloads", **extra: object
) -> dict:
    """A record grounded in CLEANUP: it cites the delete (4) and the complaint (6)."""
    return {
        "scene": "file-cleanup",
        "trigger": trigger,
        "action": "deleted by date",
        "outcome": "failure",
        "lesson": lesson,
        "confidence": confidence,
        "steps": [4, 6],
        "evidence": "That was the installer I still need!",
        **extra,
    }


def lesson(text: str) -> str:
    return json.dumps({"lesson": text})


def test_a_phrased_lesson_is_written_with_the_evidence(memory: Memory) -> None:
    llm = ScriptedLLM([lesson("Ask before deleting an installer")])
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert not result.skipped and result.error is None
    assert result.distiller == "llm:scripted"
    assert [w.status for w in result.written] == ["inserted"]
    (one,) = memory.list_records()
    assert one.lesson == "Ask before deleting an installer"
    assert one.scene == "file-cleanup"  # the trajectory's scene wins
    assert one.source["agent"] == "cleanup-bot" and one.source["distiller"] == "llm:scripted"
    assert one.confidence == pytest.approx(0.7)  # a correction nothing followed: the evidence's
    assert "That was the installer I still need!" in one.trigger
    # the prompt: versioned template, a small schema, the evidence (not the goal)
    (call,) = llm.calls
    assert call["json_schema"]["required"] == ["lesson"]
    system, *shots, user = call["messages"]
    assert [m["role"] for m in shots] == ["user", "assistant"] * 2  # worked examples
    assert "at most 50 characters" in system["content"] and "English" in system["content"]
    assert "What the user said: That was the installer I still need!" in user["content"]
    assert "setup-2024-01-02.exe" in user["content"] and "Clean up" not in user["content"]


def test_a_confidence_floor_above_the_evidence_skips_the_call(
    settings: Settings, embedder: Any, namespace: tuple[str, str]
) -> None:
    strict = settings.model_copy(update={"min_confidence": 0.75})
    llm = ScriptedLLM([])
    mem = Memory(namespace, settings=strict, embedder=embedder)
    try:
        result = Reflector(mem, llm).reflect(CLEANUP)
    finally:
        mem.close()
    assert llm.calls == [] and result.records == []
    assert "below 0.75" in result.dropped[0]["reason"]


@pytest.mark.parametrize(
    "text", ['{"records": []}', '```json\n{"records": []}\n```', "No new lesson.", "[]"]
)
def test_an_empty_answer_is_asked_again_then_nothing(memory: Memory, text: str) -> None:
    llm = ScriptedLLM([text, text])
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert result.written == [] and not result.skipped and result.error is None
    assert len(llm.calls) == 2 and result.dropped[0]["reason"] == "the lesson is empty"
    assert memory.list_records() == []


def test_malformed_then_valid_is_retried_once(memory: Memory) -> None:
    good = "```json\n" + lesson("Ask before deleting an installer") + "\n```\nHope this helps!"
    llm = ScriptedLLM(['Sure! {"lesson": "Ask bef', good])
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert len(llm.calls) == 2
    retry = llm.calls[1]["messages"]
    assert retry[-2]["role"] == "assistant" and retry[-2]["content"].startswith("Sure!")
    assert "could not be used" in retry[-1]["content"] and "JSON" in retry[-1]["content"]
    assert [w.status for w in result.written] == ["inserted"]
    assert memory.get(result.written[0].id).lesson == "Ask before deleting an installer"


def test_malformed_twice_is_skipped_and_logged(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    llm = ScriptedLLM(["I think the agent should be careful.", "{'lesson': oops"])
    with caplog.at_level(logging.WARNING, logger="hindsight.reflection"):
        result = Reflector(memory, llm).reflect(CLEANUP)
    assert result.skipped and result.written == []
    assert result.error and "unusable model answer" in result.error
    assert len(llm.calls) == 2
    assert any("reflection skipped" in r.getMessage() for r in caplog.records)
    assert memory.list_records() == []


def test_model_errors_are_retried_then_skipped(memory: Memory) -> None:
    llm = ScriptedLLM([ConnectionError("refused"), TimeoutError("slow")])
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert result.skipped and "model call failed" in (result.error or "")
    ok = ScriptedLLM([ConnectionError("refused"), lesson("Ask before deleting an installer")])
    assert len(Reflector(memory, ok).reflect(CLEANUP).written) == 1


def test_over_long_lesson_is_asked_again_once_then_dropped(memory: Memory) -> None:
    long = "Before deleting anything in a downloads folder always check for an installer"
    llm = ScriptedLLM([lesson(long), lesson(long + " of every file")])
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert result.written == [] and result.asked_again == 1
    first, again = result.dropped
    assert again["record"]["lesson"] == long + " of every file"
    assert "after being asked again" in again["reason"] and "at most 50" in again["reason"]
    fix = llm.calls[1]["messages"][-1]["content"]
    assert "shorten it to at most 50 characters" in fix and long not in fix


def test_over_long_lesson_shortened_when_asked_is_kept(memory: Memory) -> None:
    long = "Before deleting anything in a downloads folder always check for an installer"
    llm = ScriptedLLM([lesson(long), lesson("Keep installers when cleaning downloads")])
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert result.asked_again == 1
    assert [r["lesson"] for r in result.records] == ["Keep installers when cleaning downloads"]


def test_string_answers_in_the_old_shape_are_read(memory: Memory) -> None:
    old = json.dumps(
        {"records": [{"lesson": "Keep installers when cleaning", "confidence": "85%"}]}
    )
    result = Reflector(memory, ScriptedLLM([old])).reflect(CLEANUP)
    assert [r.lesson for r in memory.list_records()] == ["Keep installers when cleaning"]
    assert result.records[0]["confidence"] == pytest.approx(0.7)


def test_duplicate_lesson_merges_through_dedup(memory: Memory) -> None:
    existing = memory.write(
        {
            "scene": "file-cleanup",
            "trigger": "Clean up the Downloads folder (the user said: That was the installer "
            "I still need!)",
            "lesson": "Check for installers before deleting files",
        }
    )
    llm = ScriptedLLM([lesson("Check for installers before deleting old files")])
    result = Reflector(memory, llm).reflect(CLEANUP)
    (written,) = result.written
    assert written.status == "merged" and written.id == existing.id
    assert written.similarity is not None and written.similarity >= 0.92
    (only,) = memory.list_records()
    assert only.occurrences == 2


def test_token_usage_is_recorded(memory: Memory) -> None:
    before = memory.stats()
    llm = ScriptedLLM(
        [
            "not json",
            LLMResponse(
                text=lesson("Ask before deleting an installer"),
                prompt_tokens=120,
                completion_tokens=7,
                model="m-1",
            ),
        ]
    )
    Reflector(memory, llm).reflect(CLEANUP)
    after = memory.stats()
    assert after.llm_calls == before.llm_calls + 2
    assert after.llm_completion_tokens - before.llm_completion_tokens >= 7
    assert after.llm_prompt_tokens - before.llm_prompt_tokens >= 120


# ---------------------------------------------------------------------- rule-based

FIXED_RUN = Trajectory(
    goal="Install the requests package",
    outcome="success",
    scene="python-setup",
    steps=[
        Step(kind="tool_call", tool="shell", args={"cmd": "pip install requests"}),
        Step(
            kind="tool_result",
            tool="shell",
            content="ERROR: Could not install packages: Permission denied",
        ),
        Step(kind="thought", content="No root; install for the user."),
        Step(kind="tool_call", tool="shell", args={"cmd": "pip install --user requests"}),
        Step(kind="tool_result", tool="shell", content="Successfully installed requests"),
    ],
)


def test_rule_based_distiller_on_failed_then_fixed_run(memory: Memory) -> None:
    result = Reflector(memory).reflect(FIXED_RUN)  # llm=None: rule-based
    assert result.distiller == "rule-based" and not result.skipped
    (written,) = result.written
    record = memory.get(written.id)
    assert "--user" in record.lesson and record.lesson.startswith("When calling shell")
    assert len(record.lesson) <= memory.settings.lesson_max_chars
    assert record.confidence == pytest.approx(0.65)
    assert record.source["distiller"] == "rule-based"
    assert "Permission denied" in record.trigger and "pip install --user" in record.action
    hits = memory.search("pip install fails with permission denied", scene="python-setup")
    assert hits and hits[0].record.id == written.id


def test_rule_based_without_a_correction_learns_nothing(memory: Memory) -> None:
    run = Trajectory(
        goal="x",
        steps=[
            Step(kind="tool_call", tool="a", args={"n": 1}),
            Step(kind="error", tool="a", content="boom"),
        ],
    )
    assert Reflector(memory).reflect(run).written == []
    ok = Trajectory(
        goal="x", steps=[Step(kind="tool_call", tool="a"), Step(kind="tool_result", content="fine")]
    )
    assert RuleBasedDistiller().distill(ok) == []


@pytest.mark.parametrize("max_chars", [20, 30, 50, 80])
def test_rule_based_lessons_fit_the_limit(max_chars: int) -> None:
    run = Trajectory(
        goal="Read the quarterly report",
        steps=[
            Step(kind="tool_call", tool="read_pdf_document_with_ocr", args={"path": "q3.pdf"}),
            Step(kind="error", tool="read_pdf_document_with_ocr", content="encrypted PDF"),
            Step(kind="tool_call", tool="pdftotext_with_password", args={"path": "q3.pdf"}),
            Step(kind="tool_result", content="Revenue grew 12%"),
        ],
    )
    (record,) = RuleBasedDistiller(max_chars=max_chars).distill(run)
    assert 0 < len(record["lesson"]) <= max_chars
    assert record["lesson"].startswith(("When", "If", "Use", "pdf", "read"))


# ---------------------------------------------------------------------- Chinese


def test_chinese_trajectory_keeps_chinese_lessons(memory: Memory) -> None:
    run = Trajectory(
        goal="清理下载文件夹里的旧文件",
        scene="文件清理",
        outcome="partial",
        steps=[
            Step(kind="tool_call", tool="delete", args={"pattern": "*2024*"}),
            Step(
                kind="tool_result", tool="delete", content="已删除 setup-2024.exe 和 报告-2024.pdf"
            ),
            Step(kind="message", role="user", content="报告还要用，安装包也不该删！"),
        ],
        final_state="误删了报告，已从回收站恢复",
    )
    text = "清理时别删PDF报告和安装包"
    llm = ScriptedLLM([lesson(text)])
    result = Reflector(memory, llm).reflect(run)
    system, *_, user = llm.calls[0]["messages"]
    assert "in Chinese" in system["content"] and "报告还要用" in user["content"]
    (written,) = result.written
    stored = memory.get(written.id)
    assert stored.lesson == text and stored.scene == "文件清理"
    hits = memory.recall("清理下载文件夹，删除旧文件", scene="文件清理").hits
    assert hits and hits[0].record.id == written.id and hits[0].record.lesson == text


def test_rule_based_chinese_run_gives_chinese_lesson(memory: Memory) -> None:
    run = Trajectory(
        goal="清理下载文件夹里的旧安装包",
        outcome="success",
        steps=[
            Step(kind="tool_call", tool="delete", args={"pattern": "*2024*"}),
            Step(kind="tool_result", content="错误：匹配到了文档"),
            Step(kind="tool_call", tool="delete", args={"pattern": "*2024*.exe"}),
            Step(kind="tool_result", content="已删除 3 个安装包"),
        ],
    )
    (written,) = Reflector(memory).reflect(run).written
    lesson = memory.get(written.id).lesson
    assert lesson == "调用delete时用*2024*.exe而不是*2024*"
