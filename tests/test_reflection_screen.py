"""The screens, driven end to end by scripted models that misbehave as small real ones do.

Each misbehaviour was seen with Qwen2.5-Coder 0.5B/1.5B Instruct through the real
prompt: copying the prompt's example, a confident lesson for a run with nothing to
learn (now: no model call at all), a Chinese lesson saying the opposite of the run,
over-long lessons, code fences. The citation screen (``screen.py``), which the
rule-based distiller's lessons go through, is tested directly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hindsight_core import AsyncMemory, Memory
from hindsight_core.reflection import (
    AsyncReflector,
    Reflector,
    RuleBasedDistiller,
    ScriptedLLM,
    Step,
    Trajectory,
)
from hindsight_core.reflection.distiller import distill_messages
from hindsight_core.reflection.evidence import analyse
from hindsight_core.reflection.screen import copies_prompt, prompt_fragments, screen

NOTHING = Trajectory(
    goal="List the files in ~/Documents",
    outcome="success",
    steps=[
        Step(kind="tool_call", tool="shell", args={"cmd": "ls ~/Documents"}),
        Step(kind="tool_result", tool="shell", content="12 files: cv.pdf notes.txt plan.md ..."),
        Step(kind="message", role="assistant", content="There are 12 files in ~/Documents."),
    ],
)
PIP = Trajectory(
    goal="Install the requests package",
    outcome="success",
    steps=[
        Step(kind="tool_call", tool="shell", args={"cmd": "pip install requests"}),
        Step(
            kind="tool_result",
            tool="shell",
            content="ERROR: Could not install packages: Permission denied",
        ),
        Step(kind="tool_call", tool="shell", args={"cmd": "pip install --user requests"}),
        Step(kind="tool_result", tool="shell", content="Successfully installed requests"),
    ],
)
LOCKFILE = Trajectory(
    goal="清理项目里没用的文件",
    outcome="partial",
    steps=[
        Step(kind="tool_call", tool="shell", args={"cmd": "rm package-lock.json"}),
        Step(kind="tool_result", tool="shell", content="已删除"),
        Step(kind="tool_call", tool="shell", args={"cmd": "npm ci"}),
        Step(
            kind="error",
            tool="shell",
            content="npm ERR! 找不到 package-lock.json，npm ci 需要锁文件",
        ),
        Step(kind="message", role="user", content="依赖文件不要删除，快恢复它"),
        Step(kind="tool_call", tool="shell", args={"cmd": "git checkout package-lock.json"}),
        Step(kind="tool_result", tool="shell", content="已恢复"),
    ],
)


def rec(lesson: str, steps: Any = (2, 3), confidence: float = 0.9, **extra: Any) -> dict:
    out = {
        "trigger": "installing a python package",
        "lesson": lesson,
        "confidence": confidence,
        **extra,
    }
    if steps is not None:
        out["steps"] = list(steps)
    return out


def answer(*records: dict) -> str:
    return json.dumps({"records": list(records)}, ensure_ascii=False)


def reflect(memory: Memory, run: Trajectory, *answers: str):  # type: ignore[no-untyped-def]
    llm = ScriptedLLM(list(answers))
    return Reflector(memory, llm).reflect(run), llm


def reasons(result: Any) -> list[str]:
    return [d["reason"] for d in result.dropped]


def lesson(text: str) -> str:
    return json.dumps({"lesson": text}, ensure_ascii=False)


def screened(memory: Memory, run: Trajectory, *records: dict) -> tuple[list, list, list]:
    """The citation screen the rule-based distiller's lessons go through."""
    return screen(list(records), run, memory.settings, [])


def test_a_copy_of_the_prompt_is_dropped(memory: Memory) -> None:
    prompt = distill_messages(PIP, memory.settings)[0]["content"]
    sentence = "Do not repeat the task or the user's words, do not recommend what failed"
    assert sentence in prompt
    example = "Add -z to tar when extracting a .tgz file"  # the prompt's worked example
    result, _ = reflect(memory, PIP, lesson(sentence), lesson(example))
    assert all("copies the prompt" in r for r in reasons(result)[:2]), reasons(result)
    assert [r["lesson"] for r in result.records] == ["When calling pip, always add --user"]


def test_the_old_example_lesson_on_an_unrelated_run_is_dropped(memory: Memory) -> None:
    # what Qwen2.5-Coder 1.5B answered an unrelated run with (distill_v1's example)
    old = lesson("Check the extension before deleting dated files")
    result, _ = reflect(memory, PIP, old, old)
    assert reasons(result)[0] == "does not name what changed (--user)"
    assert [r["lesson"] for r in result.records] == ["When calling pip, always add --user"]


@pytest.mark.parametrize(
    "record",
    [
        rec("Use the `ls` command to list files in a directory", steps=[1]),
        rec("Be careful", steps=[1, 2]),
        rec("Summarise how many files ~/Documents holds", steps=[1, 2]),
    ],
    ids=["ls", "careful", "uncited-learning"],
)
def test_nothing_to_learn_asks_no_model(memory: Memory, record: dict) -> None:
    assert analyse(NOTHING).signals == []
    result, llm = reflect(memory, NOTHING, answer(record))
    assert llm.calls == [] and result.written == [] and not result.skipped
    assert memory.list_records() == []


def test_the_citation_screen_lets_a_clean_run_teach_what_a_step_showed(memory: Memory) -> None:
    run = Trajectory(
        goal="Report yesterday's orders",
        outcome="success",
        steps=[
            Step(kind="tool_call", tool="orders_api", args={"day": "2026-11-30"}),
            Step(
                kind="tool_result",
                tool="orders_api",
                content="42 orders; note: timestamps are in UTC, not local time",
            ),
        ],
    )
    good = rec(
        "Convert orders_api timestamps from UTC first",
        steps=[2],
        evidence="timestamps are in UTC, not local time",
    )
    made_up = rec(
        "Convert orders_api prices from cents first", steps=[2], evidence="prices are in cents"
    )
    kept, dropped, _ = screened(memory, run, good, made_up)
    assert kept == [good]
    assert [d["reason"] for d in dropped] == ["its evidence is not a quote of the steps it cites"]


def test_opposite_of_the_run_chinese_lesson_is_dropped(memory: Memory) -> None:
    bad = "检查依赖文件是否存在，如果存在则删除"  # seen from a real model
    good = "package-lock.json是依赖文件，不要删除"
    result, _ = reflect(memory, LOCKFILE, lesson(bad), lesson(good))
    assert [r["lesson"] for r in result.records] == [good]
    (reason,) = reasons(result)
    assert reason.startswith("recommends what the user said not to do"), reason


def test_repeating_the_failed_call_is_dropped(memory: Memory) -> None:
    run = Trajectory(
        goal="Fetch the report",
        outcome="success",
        steps=[
            Step(
                kind="tool_call", tool="http_get", args={"url": "http://intra/report", "timeout": 5}
            ),
            Step(kind="error", tool="http_get", content="timed out after 5 s"),
            Step(
                kind="tool_call",
                tool="http_get",
                args={"url": "http://intra/report", "timeout": 60},
            ),
            Step(kind="tool_result", tool="http_get", content="200 OK, 3 MB"),
        ],
    )
    result, _ = reflect(
        memory,
        run,
        lesson("Fetch intra reports with timeout 5"),
        lesson("Give intra reports a 60 s timeout"),
    )
    assert [r["lesson"] for r in result.records] == ["Give intra reports a 60 s timeout"]
    assert reasons(result) == ["recommends what failed (5), not the fix"]


@pytest.mark.parametrize(
    ("steps", "why"),
    [
        (None, "cites no step of the run"),
        ([], "cites no step of the run"),
        ([7, 9], "cites step 7, 9, but the run has 4 steps"),
        ([4], "cites none of the run's failures"),  # only the result of the fix
    ],
)
def test_citations_are_checked(memory: Memory, steps: Any, why: str) -> None:
    _, dropped, _ = screened(memory, PIP, rec("Pass --user to pip install without root", steps))
    assert dropped[0]["reason"].startswith(why), dropped


def test_citing_the_call_that_failed_counts_as_citing_its_failure(memory: Memory) -> None:
    kept, dropped, _ = screened(memory, PIP, rec("Pass --user to pip install without root", [1]))
    assert len(kept) == 1 and dropped == []


def test_a_code_fence_is_accepted(memory: Memory) -> None:
    text = "```json\n" + lesson("Pass --user to pip install without root") + "\n```"
    result, _ = reflect(memory, PIP, text)
    assert [w.status for w in result.written] == ["inserted"] and result.dropped == []


def test_over_long_chinese_lesson_counts_characters_and_is_asked_again(memory: Memory) -> None:
    limit = memory.settings.lesson_max_chars
    at_limit = ("package-lock.json是npm ci需要的依赖锁文件，不要删除" + "它" * limit)[:limit]
    too_long = at_limit + "它"  # one CJK character over: counted as one, not as 3 bytes
    result, llm = reflect(memory, LOCKFILE, lesson(too_long), lesson(at_limit))
    assert result.asked_again == 1
    assert [r["lesson"] for r in result.records] == [at_limit]
    fix = llm.calls[1]["messages"][-1]["content"]
    assert f"is {limit + 1} characters: shorten it to at most {limit} characters" in fix
    assert too_long not in fix


def test_wrong_language_is_asked_again_once_then_dropped(memory: Memory) -> None:
    english = lesson("Never delete package-lock.json")
    result, llm = reflect(memory, LOCKFILE, english, english)
    assert len(llm.calls) == 2
    assert reasons(result)[-1] == (
        "after being asked again: the run is in Chinese: write the lesson in Chinese"
    )
    # the user's rule, worded by rule, not the English lesson
    assert [r["lesson"] for r in result.records] == ["用 rm 时不要删除依赖文件"]
    assert "write the lesson in Chinese" in llm.calls[1]["messages"][-1]["content"]


def test_a_failed_rewrite_falls_back_to_the_rule_lesson(memory: Memory) -> None:
    long = "When pip install fails with permission denied, install it with --user instead"
    result, llm = reflect(memory, PIP, lesson(long), "not json at all")
    assert len(llm.calls) == 2  # asked again once, not a third time
    assert [r["lesson"] for r in result.records] == ["When calling pip, always add --user"]


def test_a_repeat_of_a_recalled_lesson_reinforces_it(memory: Memory) -> None:
    shown = memory.write(
        {
            "scene": "python-setup",
            "trigger": "pip permission errors",
            "lesson": "Pass --user to pip install without root",
        }
    )
    run = PIP.model_copy(update={"recalled": [shown.id]})
    result, _ = reflect(memory, run, lesson("Pass --user to pip install without root."))
    assert result.written == [] and result.records == []
    (again,) = result.reinforced
    assert again.id == shown.id and again.status == "merged" and again.similarity >= 0.92
    (only,) = memory.list_records()
    assert only.occurrences == 2


def test_rule_based_lessons_pass_the_same_screen(memory: Memory) -> None:
    (cand,) = RuleBasedDistiller().distill(PIP)
    assert cand["steps"] == [1, 2, 3, 4] and "Permission denied" in cand["evidence"]
    kept, dropped, fixable = screen([cand], PIP, memory.settings, [])
    assert kept == [cand] and dropped == fixable == []
    assert Reflector(memory).reflect(NOTHING).written == []


def test_prompt_fragments_and_near_copies() -> None:
    frags = prompt_fragments('Say "Be careful" never.\nOne point per record, and no two.')
    assert copies_prompt("be careful!", frags) == "Be careful"
    assert copies_prompt("One point per record and no two", frags) is not None
    assert copies_prompt("Pass --user to pip install", frags) is None


async def test_async_reflector_screens_the_same(amemory: AsyncMemory, memory: Memory) -> None:
    script = [
        lesson("检查依赖文件是否存在，如果存在则删除"),
        lesson("Use the `ls` command to list files"),
    ]
    a = await AsyncReflector(amemory, ScriptedLLM(script)).reflect(LOCKFILE)
    s = Reflector(memory, ScriptedLLM(script)).reflect(LOCKFILE)
    assert reasons(a) == reasons(s) and len(reasons(a)) == 2
    # both fall back to the user's rule, worded by rule
    assert (
        [r["lesson"] for r in a.records]
        == [r["lesson"] for r in s.records]
        == ["用 rm 时不要删除依赖文件"]
    )
