"""Review: reinforce what was used, decay what was not, merge near-duplicates via the LLM."""

from __future__ import annotations

import json
import logging

import pytest

from hindsight_core import AsyncMemory, Memory
from hindsight_core.reflection import AsyncReflector, Reflector, ScriptedLLM, Trajectory

SCENE = "file-cleanup"


def seed(memory: Memory) -> dict[str, object]:
    w = memory.write_many(
        [
            {
                "scene": SCENE,
                "trigger": "calling a rate-limited API",
                "lesson": "Retry with backoff on HTTP 429",
            },
            {
                "scene": SCENE,
                "trigger": "installing python packages",
                "lesson": "Use pip install --user without root",
            },
            {
                "scene": SCENE,
                "trigger": "cleaning downloads",
                "lesson": "Check the extension before deleting files",
            },
            {
                "scene": SCENE,
                "trigger": "cleaning downloads",
                "lesson": "Look at the file extension before you delete",
            },
        ]
    )
    assert [r.status for r in w] == ["inserted"] * 4  # 0.83 similar: below dedup's 0.92
    return {"used": w[0].id, "unused": w[1].id, "dup1": w[2].id, "dup2": w[3].id}


MERGE = json.dumps(
    {
        "merge": True,
        "reason": "both say: check the extension",
        "record": {
            "trigger": "deleting files while cleaning downloads",
            "lesson": "Check each file's extension before deleting it",
            "confidence": "0.9",
        },
    }
)


def test_review_reinforces_decays_and_merges(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    ids = seed(memory)
    llm = ScriptedLLM([MERGE])
    run = Trajectory(
        goal="clean downloads",
        scene=SCENE,
        outcome="success",
        recalled=[ids["used"], ids["unused"]],
        used=[ids["used"]],
    )
    with caplog.at_level(logging.INFO, logger="hindsight.reflection"):
        result = Reflector(memory, llm).review(run)

    assert result.reinforced == [ids["used"]] and result.decayed == [ids["unused"]]
    used, unused = memory.get(ids["used"]), memory.get(ids["unused"])
    assert used.score == pytest.approx(1.1) and used.use_count == 1
    assert unused.score == pytest.approx(0.9)
    # the feedback says who gave it: the reviewer (docs/sharing.md)
    assert [(f.helpful, f.by) for f in memory.feedback(ids["unused"])] == [(False, "review")]

    (merged,) = result.merged
    assert merged.lesson == "Check each file's extension before deleting it"
    assert set(merged.merged_from) == {ids["dup1"], ids["dup2"]}
    assert merged.scene == SCENE and merged.confidence == pytest.approx(0.9)
    for source in (ids["dup1"], ids["dup2"]):
        old = memory.get(source)  # archived, not deleted, and still linked
        assert old.archived_at is not None and old.merged_into == merged.id
    live = {r.id for r in memory.list_records()}
    assert live == {ids["used"], ids["unused"], merged.id}
    hits = memory.search("delete old installers from downloads", scene=SCENE)
    assert hits[0].record.id == merged.id

    actions = [d.action for d in result.decisions]
    assert actions == ["reinforce", "decay", "merge"]
    assert result.decisions[2].into == merged.id
    # the model saw both lessons of the cluster, nothing else
    prompt = llm.calls[0]["messages"][1]["content"]
    assert "Check the extension before deleting files" in prompt
    assert "Look at the file extension before you delete" in prompt
    assert "Retry with backoff" not in prompt
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "review: merge" in logged and "review: decay" in logged


def test_review_keeps_records_the_model_says_differ(memory: Memory) -> None:
    ids = seed(memory)
    llm = ScriptedLLM(['{"merge": false, "reason": "different points"}'])
    result = Reflector(memory, llm).review(Trajectory(goal="x", scene=SCENE))
    assert result.merged == [] and result.reinforced == [] and result.decayed == []
    (decision,) = result.decisions
    assert decision.action == "keep" and set(decision.ids) == {ids["dup1"], ids["dup2"]}
    assert len(memory.list_records()) == 4


def test_review_without_llm_reports_but_does_not_merge(memory: Memory) -> None:
    ids = seed(memory)
    missing = "00000000-0000-4000-8000-000000000000"
    run = Trajectory(goal="x", recalled=[ids["unused"], missing])  # scene from the record
    result = Reflector(memory).review(run)
    assert result.decayed == [ids["unused"]]
    assert [d.action for d in result.decisions] == ["decay", "missing", "skip"]
    assert "no LLM" in result.decisions[2].reason
    assert len(memory.list_records()) == 4


def test_review_with_broken_merge_answer_skips(memory: Memory) -> None:
    seed(memory)
    llm = ScriptedLLM(["merge them", '{"merge": true}'])
    result = Reflector(memory, llm).review(Trajectory(goal="x", scene=SCENE))
    assert result.merged == [] and result.errors and len(llm.calls) == 2
    assert result.decisions[-1].action == "skip"


async def test_async_review_matches(amemory: AsyncMemory) -> None:
    w = await amemory.write_many(
        [
            {
                "scene": SCENE,
                "trigger": "cleaning downloads",
                "lesson": "Check the extension before deleting files",
            },
            {
                "scene": SCENE,
                "trigger": "cleaning downloads",
                "lesson": "Look at the file extension before you delete",
            },
        ]
    )
    result = await AsyncReflector(amemory, ScriptedLLM([MERGE])).review(
        Trajectory(goal="x", scene=SCENE, recalled=[w[0].id], used=[w[0].id])
    )
    assert result.reinforced == [w[0].id]
    (merged,) = result.merged
    assert set(merged.merged_from) == {w[0].id, w[1].id}
    assert (await amemory.get(w[0].id)).merged_into == merged.id


def merge_answer(lesson: str) -> str:
    return json.dumps(
        {
            "merge": True,
            "reason": "same point",
            "record": {"trigger": "cleaning downloads", "lesson": lesson, "confidence": 0.9},
        }
    )


@pytest.mark.parametrize(
    ("lesson", "why"),
    [
        ("Check extensions before deleting and back up to a vault first", "adds claims"),
        ("Check the extension before deleting 3 files", "adds a number"),
        ("Never check the extension before deleting files", "contradicts lesson 1"),
        ("Be careful with your downloads folder", "drops what lesson 1 says"),
        ("Write one lesson that says what every one of them says", "copies the prompt"),
    ],
)
def test_a_merge_that_changes_what_the_lessons_say_is_skipped(
    memory: Memory, lesson: str, why: str
) -> None:
    ids = seed(memory)
    result = Reflector(memory, ScriptedLLM([merge_answer(lesson)])).review(
        Trajectory(goal="clean downloads", scene=SCENE)
    )
    assert result.merged == []
    (decision,) = result.decisions
    assert decision.action == "skip" and why in decision.reason, decision.reason
    assert {ids["dup1"], ids["dup2"]} <= {r.id for r in memory.list_records()}  # unchanged


def test_an_over_long_merge_is_asked_again_once(memory: Memory) -> None:
    seed(memory)
    long = "Check the extension of each file before deleting it when cleaning downloads"
    short = "Check a file's extension before deleting"
    llm = ScriptedLLM([merge_answer(long), merge_answer(short)])
    result = Reflector(memory, llm).review(Trajectory(goal="clean downloads", scene=SCENE))
    (merged,) = result.merged
    assert merged.lesson == short
    assert len(llm.calls) == 2 and "shorten it to ≤ 50" in llm.calls[1]["messages"][-1]["content"]


def test_a_merge_still_too_long_when_asked_again_is_skipped(memory: Memory) -> None:
    seed(memory)
    long = "Check the extension of each file before deleting it when cleaning downloads"
    llm = ScriptedLLM([merge_answer(long), merge_answer(long)])
    result = Reflector(memory, llm).review(Trajectory(goal="x", scene=SCENE))
    assert result.merged == [] and len(llm.calls) == 2
    assert "after being asked again" in result.decisions[0].reason
    assert len(memory.list_records()) == 4  # nothing archived
