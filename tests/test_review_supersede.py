"""Review corrects a lesson that misled a run: it supersedes it with the corrected lesson
(docs/versions.md), from the run's failed-then-fixed call or the user's correction,
rule-based or phrased by a (scripted) model whose words must come from the run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hindsight_core import AsyncMemory, Memory
from hindsight_core.reflection import AsyncReflector, Reflector, ScriptedLLM, Trajectory

REPORT = {
    "scene": "reports",
    "trigger": "sharing the weekly report",
    "lesson": "Send the weekly report to the whole team",
}
CORRECTED = Trajectory(
    goal="share the weekly report",
    scene="reports",
    outcome="success",
    steps=[
        {"kind": "tool_call", "tool": "send_email", "args": {"to": "team@acme.example"}},
        {"kind": "tool_result", "tool": "send_email", "content": "sent to 14 people"},
        {
            "kind": "message",
            "role": "user",
            "content": "No, send the weekly report to the manager only.",
        },
    ],
)
LOGS = {
    "scene": "ops",
    "trigger": "cleaning old logs with delete_logs",
    "lesson": "Run delete_logs on /srv/logs",
}
FAILED = Trajectory(
    goal="clean old logs",
    scene="ops",
    outcome="failure",
    steps=[
        {"kind": "tool_call", "tool": "delete_logs", "args": {"path": "/srv/logs"}},
        {"kind": "error", "tool": "delete_logs", "content": "permission denied: /srv/logs"},
        {"kind": "tool_call", "tool": "delete_logs", "args": {"path": "/srv/old"}},
        {"kind": "tool_result", "tool": "delete_logs", "content": "deleted 120 files"},
    ],
)


def run_of(base: Trajectory, rid: Any, **extra: Any) -> Trajectory:
    return base.model_copy(update={"recalled": [rid], "used": [rid], **extra})


def test_a_users_correction_supersedes_the_lesson_without_a_model(memory: Memory) -> None:
    old = memory.write(REPORT).id
    result = Reflector(memory).review(run_of(CORRECTED, old))
    new = result.superseded[old]
    assert memory.get(new).lesson == "Send the weekly report to the manager only."
    was = memory.get(old)
    assert was.superseded_by == new and was.superseded_actor == "review"
    assert was.superseded_reason == "followed, and the user corrected it"
    assert was.score == pytest.approx(0.9)  # marked unhelpful, not reinforced
    assert [d.action for d in result.decisions] == ["decay", "supersede"]
    hits = memory.search("share the weekly report", top_k=5)
    assert [h.record.id for h in hits] == [new]  # recall sees the correction only
    assert memory.get(new).source == {"distiller": "rules", "review": "supersede"}


def test_a_failed_then_fixed_call_supersedes_the_lesson_followed(memory: Memory) -> None:
    old = memory.write(LOGS).id
    result = Reflector(memory).review(run_of(FAILED, old))
    new = memory.get(result.superseded[old])
    assert "/srv/old" in new.lesson and new.trigger == LOGS["trigger"]
    assert memory.get(old).superseded_reason == "followed, and the run failed"


def test_the_model_phrases_the_correction_from_the_run(memory: Memory) -> None:
    old = memory.write(REPORT).id
    answer = {"supersede": True, "lesson": "Send the weekly report only to the manager"}
    llm = ScriptedLLM([json.dumps(answer)])
    result = Reflector(memory, llm).review(run_of(CORRECTED, old))
    new = memory.get(result.superseded[old])
    assert new.lesson == answer["lesson"] and new.source["distiller"].startswith("llm:")
    assert "the manager only" in llm.calls[0]["messages"][1]["content"]  # the evidence shown


def test_a_correction_the_run_does_not_show_is_refused(memory: Memory) -> None:
    """A model inventing the fix ("encrypt") is not believed: the user's own words are
    the new version instead."""
    old = memory.write(REPORT).id
    invented = {"supersede": True, "lesson": "Encrypt every report before sending"}
    result = Reflector(memory, ScriptedLLM([json.dumps(invented)])).review(run_of(CORRECTED, old))
    new = memory.get(result.superseded[old])
    assert new.lesson == "Send the weekly report to the manager only."
    assert new.source["distiller"] == "rules"


def test_the_model_may_decline_and_a_failure_without_a_fix_only_decays(memory: Memory) -> None:
    old = memory.write(LOGS).id
    bare = Trajectory(goal="clean old logs", scene="ops", outcome="failure")
    llm = ScriptedLLM([json.dumps({"supersede": False, "reason": "no fix shown"})])
    result = Reflector(memory, llm).review(run_of(bare, old))
    assert result.superseded == {} and result.decayed == [old]
    assert result.decisions[-1].action == "keep" and "no correction" in result.decisions[-1].reason
    assert memory.get(old).superseded_by is None


def test_a_successful_run_reinforces_and_supersedes_nothing(memory: Memory) -> None:
    old = memory.write(REPORT).id
    ok = Trajectory(goal="share the weekly report", scene="reports", outcome="success")
    result = Reflector(memory).review(run_of(ok, old))
    assert result.reinforced == [old] and result.superseded == {}


async def test_async_review_supersedes_too(amemory: AsyncMemory) -> None:
    old = (await amemory.write(REPORT)).id
    result = await AsyncReflector(amemory).review(run_of(CORRECTED, old))
    chain = await amemory.history(old)
    assert [r.id for r in chain] == [old, result.superseded[old]]
