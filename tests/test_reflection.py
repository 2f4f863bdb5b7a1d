"""Reflection: the LLM distiller (scripted model, real storage), review, rule-based."""

from __future__ import annotations

import json
import logging

import pytest

from hindsight_core import Memory
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


def test_three_good_records_are_written(memory: Memory) -> None:
    llm = ScriptedLLM(
        [
            answer(
                rec("Check the extension before deleting files"),
                rec("Ask the user before deleting an installer", trigger="deleting installers"),
                rec("Dates in names do not make setup files old", trigger="files named by date"),
            )
        ]
    )
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert not result.skipped and result.error is None
    assert result.distiller == "llm:scripted"
    assert [w.status for w in result.written] == ["inserted"] * 3
    stored = {r.lesson: r for r in memory.list_records()}
    assert set(stored) == {
        "Check the extension before deleting files",
        "Ask the user before deleting an installer",
        "Dates in names do not make setup files old",
    }
    one = stored["Check the extension before deleting files"]
    assert one.scene == "file-cleanup"  # the trajectory's scene wins
    assert one.source["agent"] == "cleanup-bot" and one.source["distiller"] == "llm:scripted"
    assert one.confidence == pytest.approx(0.9)
    # the prompt: versioned template, JSON schema, the run rendered with its steps
    (call,) = llm.calls
    items = call["json_schema"]["properties"]["records"]
    assert items["maxItems"] == 3 and "steps" in items["items"]["required"]
    system, user = call["messages"]
    assert "An empty list is the right answer" in system["content"]
    assert '"lesson": "' not in system["content"]  # no example lesson to copy
    assert "at most 50 characters" in system["content"]
    assert "setup-2024-01-02.exe" in user["content"] and "Goal: Clean up" in user["content"]
    assert "\n6. [message (user)] That was the installer" in user["content"]


def test_low_confidence_is_dropped(memory: Memory) -> None:
    llm = ScriptedLLM(
        [
            answer(
                rec("Check the extension before deleting files", "0.5"),
                rec("Ask before deleting files the user downloaded", "0.8"),
            )
        ]
    )
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert len(result.written) == 1
    assert [d["record"]["lesson"] for d in result.dropped] == [
        "Check the extension before deleting files"
    ]
    assert "below 0.6" in result.dropped[0]["reason"]
    assert [r.lesson for r in memory.list_records()] == [
        "Ask before deleting files the user downloaded"
    ]


@pytest.mark.parametrize(
    "text", ['{"records": []}', '```json\n{"records": []}\n```', "No new lesson.", "[]"]
)
def test_no_new_lesson_writes_nothing(memory: Memory, text: str) -> None:
    result = Reflector(memory, ScriptedLLM([text])).reflect(CLEANUP)
    assert result.written == [] and not result.skipped and result.error is None
    assert memory.list_records() == []


def test_malformed_then_valid_is_retried_once(memory: Memory) -> None:
    good = (
        "```json\n"
        + answer(rec("Check the extension before deleting files"))
        + "\n```\nHope this helps!"
    )
    llm = ScriptedLLM(['Sure! {"records": [{"lesson": "Check the ext', good])
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert len(llm.calls) == 2
    retry = llm.calls[1]["messages"]
    assert retry[-2]["role"] == "assistant" and retry[-2]["content"].startswith("Sure!")
    assert "could not be used" in retry[-1]["content"] and "JSON" in retry[-1]["content"]
    assert [w.status for w in result.written] == ["inserted"]
    assert memory.get(result.written[0].id).lesson == "Check the extension before deleting files"


def test_malformed_twice_is_skipped_and_logged(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    llm = ScriptedLLM(["I think the agent should be careful.", "{'records': oops"])
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
    ok = ScriptedLLM([ConnectionError("refused"), answer(rec("Ask before deleting user files"))])
    assert len(Reflector(memory, ok).reflect(CLEANUP).written) == 1


def test_over_long_lesson_is_sent_back_once_then_dropped(memory: Memory) -> None:
    long = "Before deleting anything in a downloads folder always check the extension first"
    llm = ScriptedLLM(
        [
            answer(rec(long), rec("Check the extension before deleting files")),
            answer(rec(long + " of every file")),
        ]
    )
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert len(result.written) == 1 and result.asked_again == 1
    (dropped,) = result.dropped
    assert dropped["record"]["lesson"] == long + " of every file"
    assert "after being asked again" in dropped["reason"] and "≤ 50" in dropped["reason"]
    fix = llm.calls[1]["messages"][-1]["content"]
    assert "shorten it to ≤ 50 characters" in fix and long in fix
    assert memory.list_records()[0].lesson == "Check the extension before deleting files"


def test_over_long_lesson_shortened_when_asked_is_kept(memory: Memory) -> None:
    long = "Before deleting anything in a downloads folder always check the extension first"
    shorter = {"lesson": "Check the extension before deleting downloads"}  # no citations
    llm = ScriptedLLM([answer(rec(long)), answer(shorter)])
    result = Reflector(memory, llm).reflect(CLEANUP)
    assert result.dropped == [] and result.asked_again == 1
    assert [r["lesson"] for r in result.records] == [shorter["lesson"]]  # never truncated


def test_string_numbers_and_extra_records(memory: Memory) -> None:
    records = [rec(f"Keep installer {i * 7} when deleting by date", "85%") for i in range(4)]
    result = Reflector(memory, ScriptedLLM([answer(*records)])).reflect(CLEANUP)
    assert len(result.written) == 3
    assert result.dropped[0]["reason"] == "more than 3 records"
    assert all(r.confidence == pytest.approx(0.85) for r in memory.list_records())


def test_duplicate_lesson_merges_through_dedup(memory: Memory) -> None:
    existing = memory.write(
        {
            "scene": "file-cleanup",
            "trigger": "cleaning downloads",
            "lesson": "Check the extension before deleting files",
        }
    )
    llm = ScriptedLLM(
        [
            answer(
                rec(
                    "Check file extensions before deleting old files",
                    trigger="cleaning the downloads folder",
                )
            )
        ]
    )
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
                text='{"records": []}', prompt_tokens=120, completion_tokens=7, model="m-1"
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
    lesson = "删除前先检查扩展名，文件名带日期不代表可以删"
    llm = ScriptedLLM(
        [
            answer(
                {
                    "scene": "文件清理",
                    "trigger": "按日期批量删除下载文件",
                    "action": "按文件名中的日期删除",
                    "outcome": "失败：误删报告",
                    "lesson": lesson,
                    "confidence": 0.85,
                    "steps": [1, 3],
                    "evidence": "安装包也不该删",
                }
            )
        ]
    )
    result = Reflector(memory, llm).reflect(run)
    system, user = llm.calls[0]["messages"]
    assert "in Chinese" in system["content"] and "清理下载文件夹" in user["content"]
    (written,) = result.written
    stored = memory.get(written.id)
    assert stored.lesson == lesson and stored.scene == "文件清理"
    hits = memory.recall("清理下载文件夹，删除旧文件", scene="文件清理").hits
    assert hits and hits[0].record.id == written.id and hits[0].record.lesson == lesson


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
