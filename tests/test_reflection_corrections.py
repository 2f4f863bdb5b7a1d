"""Corrections with nothing after them, and restatements of the user's words in Chinese.

Scripted models replay what the real local models answered on the bench's runs
(bench/data/reflection_trajectories.json): the 0.5B's opposite of the user's rule,
the 1.5B's reordered or shortened copy of the user's message.
"""

from __future__ import annotations

from hindsight_core import Memory
from hindsight_core.reflection import Trajectory
from hindsight_core.reflection.check import restates
from hindsight_core.reflection.findings import find_evidence
from tests.test_reflection_evidence import (
    CC,
    INSTALLER,
    LOCKFILE,
    NOTHING,
    call,
    lessons,
    reasons,
    records,
    reflect,
    result,
    user,
)

TIMEZONE = Trajectory(
    goal="Book a call with Anna tomorrow at 9",
    outcome="success",
    steps=[
        call("create_event", title="Call with Anna", start="2026-12-02T09:00:00Z"),
        result("create_event", "created for 09:00 UTC"),
        user("I'm in Berlin, 9 means 9 local time, not UTC. Use my timezone."),
        call("update_event", title="Call with Anna", start="2026-12-02T09:00:00+01:00"),
        result("update_event", "moved to 09:00 Europe/Berlin"),
    ],
)


def test_a_correction_the_model_words_wrongly_twice_gets_the_users_rule_by_rule(
    memory: Memory,
) -> None:
    # 0.5B said the opposite of the user's rule twice; nothing after the correction (or
    # only a shell command) showed what changed, so the run ended with no lesson
    for run, bad, expected in (
        (INSTALLER, "Delete the installer first", "When using delete, never delete installers"),
        (
            TIMEZONE,
            "Update event start time to UTC",
            "When using create_event, use the user's timezone",
        ),
        (CC, "给客户发送日报时先抄送全组", "用 send_email 时不要抄送全组"),
        (LOCKFILE, "删除依赖文件并恢复", "用 rm 时不要删除依赖文件"),
    ):
        res, llm = reflect(memory, run, records(bad), records(bad))
        assert lessons(res) == [expected], (bad, reasons(res))
        assert res.records[0]["source"]["phrased_by"] == "rule"
        assert len(llm.calls) == 2
        assert not any(restates(expected, s.content) for s in run.steps if s.role == "user")


def test_a_complaint_without_a_rule_and_a_run_with_nothing_to_learn_get_no_rule_lesson(
    memory: Memory,
) -> None:
    wrong = Trajectory(
        goal="Rename the report",
        outcome="partial",
        steps=[
            call("rename", old="report.pdf", new="r.pdf"),
            result("rename", "renamed"),
            user("That is wrong."),
        ],
    )
    assert [f.rule_lesson for f in find_evidence(wrong)] == [None]
    res, llm = reflect(memory, NOTHING, records("Compute 2 to the power of 10"))
    assert llm.calls == [] and res.records == []


def test_a_reordered_or_short_copy_of_the_users_chinese_is_not_written(memory: Memory) -> None:
    # 1.5B: the user's "依赖文件不要删除，快恢复它" reordered; a 6-character clause of
    # "日报只发给我，不要抄送全组。"; both passed the sequence ratio and the 10-character
    # clause threshold
    for run, copy in ((LOCKFILE, "不要删除依赖文件，快恢复它"), (CC, "不要抄送全组")):
        res, _ = reflect(memory, run, records(copy), records(copy))
        assert copy not in lessons(res), reasons(res)
        assert reasons(res)[0] == "restates the user's message in step 3", reasons(res)
    # the good answers of the same runs share the user's words and stay
    for run, good in (
        (LOCKFILE, "package-lock.json 是依赖锁文件，不要删除"),
        (CC, "发日报时只发本人，别抄送团队"),
    ):
        res, _ = reflect(memory, run, records(good))
        assert lessons(res) == [good], reasons(res)


def test_english_advice_in_the_users_words_is_not_a_restatement() -> None:
    said = "Never send release notes to the whole company, only to team-dev@company.example."
    assert not restates("Send release notes to team-dev only", said)


def test_a_lesson_narrowing_what_the_user_forbade_to_other_people_is_kept(
    memory: Memory,
) -> None:
    # the 1.5B's good lesson for "不要抄送全组" was dropped as recommending 抄送: it says to
    # cc only the people named, which is what the user asked for
    good = "邮件抄送时只抄送给指定的人"
    res, llm = reflect(memory, CC, records(good))
    assert lessons(res) == [good], reasons(res)
    assert len(llm.calls) == 1
    # the forbidden act itself, even with "only", is still the opposite of the rule
    res, _ = reflect(memory, CC, records("只抄送全组"), records("只抄送全组"))
    assert lessons(res) != ["只抄送全组"]
