"""Evidence first, the model only phrases it (issue 24).

Each scripted answer below is what a real small model (Qwen2.5-Coder 0.5B/1.5B)
answered, or the kind of thing it answered, before the evidence-first design: the
goal restated, the user's words restated, one lesson twice, the opposite of the fix,
a good lesson dropped because the fix was compared with the wrong call. Answers are
given in the old ``{"records": [...]}`` shape with citations, which the old screen
accepted and the new one reads too. Each test failed on the code before the change
(the module imports nothing new at import time, so that it could be run there).
"""

from __future__ import annotations

import json
from typing import Any

from hindsight_core import Memory
from hindsight_core.reflection import Reflector, ScriptedLLM, Step, Trajectory
from hindsight_core.reflection.evidence import analyse, changed_units, units


def call(tool: str, **args: Any) -> Step:
    return Step(kind="tool_call", tool=tool, args=args)


def result(tool: str, content: str) -> Step:
    return Step(kind="tool_result", tool=tool, content=content)


def user(content: str) -> Step:
    return Step(kind="message", role="user", content=content)


PIP = Trajectory(
    goal="Install the requests package",
    outcome="success",
    steps=[
        call("shell", cmd="pip install requests"),
        result("shell", "ERROR: Could not install packages: [Errno 13] Permission denied"),
        call("shell", cmd="pip install --user requests"),
        result("shell", "Successfully installed requests-2.32.3"),
    ],
)
NOTHING = Trajectory(
    goal="What is 2 to the power of 10?",
    outcome="success",
    steps=[
        call("python", code="2 ** 10"),
        result("python", "1024"),
        Step(kind="message", role="assistant", content="1024."),
        user("Perfect, thanks."),
    ],
)
JQ = Trajectory(  # a fix that only adds a flag: jq -r prints the raw string
    goal="Tag the release with the package version",
    outcome="success",
    steps=[
        call("shell", cmd='git tag "v$(jq .version package.json)"'),
        result("shell", "fatal: 'v\"1.4.2\"' is not a valid tag name."),
        call("shell", cmd='git tag "v$(jq -r .version package.json)"'),
        result("shell", "tagged v1.4.2"),
    ],
)
PORT = Trajectory(
    goal="连接报表数据库",
    outcome="success",
    steps=[
        call("db_connect", host="10.0.0.8", port=5433),
        Step(kind="error", tool="db_connect", content="连接超时：10.0.0.8:5433 无响应"),
        call("db_connect", host="10.0.0.8", port=5432),
        result("db_connect", "连接成功"),
    ],
)
REBASE = Trajectory(
    goal="Push the fix to origin",
    outcome="success",
    steps=[
        call("shell", cmd="git push origin main"),
        result("shell", "! [rejected] main -> main (fetch first) error: failed to push some refs"),
        call("shell", cmd="git pull --rebase origin main"),
        result("shell", "Successfully rebased and updated refs/heads/main."),
        call("shell", cmd="git push origin main"),
        result("shell", "main -> main"),
    ],
)
TWO = Trajectory(  # two failures in one run, each fixed
    goal="Set up the reporting job",
    outcome="success",
    steps=[
        call("shell", cmd="pip install pandas"),
        result("shell", "ERROR: Could not install packages: Permission denied"),
        call("shell", cmd="pip install --user pandas"),
        result("shell", "Successfully installed pandas-2.2.3"),
        call("http_get", url="https://intra.example/export/sales", timeout=5),
        Step(kind="error", tool="http_get", content="ReadTimeout: timed out after 5 s"),
        call("http_get", url="https://intra.example/export/sales", timeout=120),
        result("http_get", "200 OK, 48 MB"),
    ],
)
CC = Trajectory(
    goal="把今天的日报发出去",
    outcome="partial",
    steps=[
        call("send_email", to="me@corp.example", cc="team@corp.example", subject="日报"),
        result("send_email", "已发送，抄送 team@corp.example"),
        user("日报只发给我，不要抄送全组。"),
    ],
)
STAGING = Trajectory(  # the fix is compared with the failed call, not the ssh before it
    goal="Deploy the web build",
    outcome="success",
    steps=[
        call("shell", cmd="ssh staging-01 uptime"),
        result("shell", "up 3 days"),
        Step(
            kind="error",
            tool="deploy",
            args={"host": "web-01", "user": "root"},
            content="Permission denied (publickey)",
        ),
        call("deploy", host="web-01", user="deploy"),
        result("deploy", "deployed"),
    ],
)


def records(*lessons: str, steps: list[int] | None = None, confidence: float = 0.9) -> str:
    """An answer in the old shape, citing the run's first steps."""
    return json.dumps(
        {
            "records": [
                {
                    "lesson": le,
                    "confidence": confidence,
                    "steps": steps or [1, 2, 3],
                    "trigger": "t",
                    "evidence": "e",
                }
                for le in lessons
            ]
        },
        ensure_ascii=False,
    )


def reflect(memory: Memory, run: Trajectory, *answers: str) -> tuple[Any, ScriptedLLM]:
    llm = ScriptedLLM(list(answers))
    return Reflector(memory, llm).reflect(run), llm


def lessons(res: Any) -> list[str]:
    return [r["lesson"] for r in res.records]


def reasons(res: Any) -> list[str]:
    return [d["reason"] for d in res.dropped]


def test_a_run_with_nothing_to_learn_makes_no_model_call(memory: Memory) -> None:
    res, llm = reflect(memory, NOTHING, records("Compute 2 to the power of 10", steps=[1, 2]))
    assert llm.calls == [] and res.records == [] and not res.skipped
    assert analyse(NOTHING).complaints == []  # "Perfect, thanks." is not a complaint


def test_the_goal_restated_is_not_written(memory: Memory) -> None:
    # 0.5B: "Install the requests package" for en-fix-pip-user, twice
    bad = records("Install the requests package", steps=[1, 2, 3, 4])
    res, llm = reflect(memory, PIP, bad, bad)
    assert lessons(res) and all("--user" in le for le in lessons(res)), (lessons(res), reasons(res))
    assert "Install the requests package" not in lessons(res)
    assert reasons(res)[0] == "restates the task's goal"
    assert len(llm.calls) == 2


def test_the_re_ask_is_fresh_and_says_what_was_wrong(memory: Memory) -> None:
    long = "When pip install fails with permission denied, use the --user flag to install"
    res, llm = reflect(memory, PIP, records(long), records("Add --user when pip lacks root"))
    assert lessons(res) == ["Add --user when pip lacks root"]
    first, again = (c["messages"] for c in llm.calls)
    assert len(again) == len(first)  # a fresh request, not the model's answer as a turn
    assert long not in json.dumps(again, ensure_ascii=False)
    assert "shorten it" in again[-1]["content"] and "shorten" not in first[-1]["content"]
    assert res.asked_again == 1


def test_the_users_words_restated_are_not_written(memory: Memory) -> None:
    copy = records("日报只发给我，不要抄送全组")
    res, _ = reflect(memory, CC, copy, copy)
    assert reasons(res)[0] == "restates the user's message in step 3"
    # the user's rule tied to the call corrected, worded by rule, not the user's message
    assert lessons(res) == ["用 send_email 时不要抄送全组"]


def test_one_lesson_twice_in_a_run_is_written_once(memory: Memory) -> None:
    same = records("Use pip --user and a timeout of 120 s")
    res, llm = reflect(memory, TWO, same, same, same)
    from hindsight_core.reflection.findings import find_evidence  # not at import: see below

    assert len(find_evidence(TWO)) == 2
    assert lessons(res)[0] == "Use pip --user and a timeout of 120 s"
    assert len(lessons(res)) == 2 and "timeout" in lessons(res)[1], (lessons(res), reasons(res))
    assert any("another lesson of this run" in r for r in reasons(res))


def test_the_opposite_of_a_fix_that_adds_a_flag_is_not_written(memory: Memory) -> None:
    # 1.5B, for a run fixed by jq -r (raw output, no quotes)
    quotes = records("Put double quotes around the jq version string")
    res, _ = reflect(memory, JQ, quotes, records("Never pass -r to jq for tags"))
    assert all("-r" in le for le in lessons(res)) and lessons(res), (lessons(res), reasons(res))
    assert not any("quotes" in le for le in lessons(res))
    assert reasons(res)[0].startswith("does not name what changed (-r")
    assert reasons(res)[1].startswith("after being asked again: says the opposite of the fix")


def test_a_fix_that_adds_a_flag_phrased_by_the_model_is_kept(memory: Memory) -> None:
    res, _ = reflect(memory, JQ, records("Use jq -r to get the raw version for git tag"))
    assert lessons(res) == ["Use jq -r to get the raw version for git tag"]
    assert res.records[0]["source"]["distiller"] == "llm:scripted"


def test_a_lesson_that_does_not_name_the_fix_gives_way_to_the_rule(memory: Memory) -> None:
    # 1.5B: "Fetch first and then try again." for a run fixed by git pull --rebase
    vague = records("Fetch first and then try again.")
    res, _ = reflect(memory, REBASE, vague, vague)
    assert lessons(res) == ["Run git pull --rebase origin main before git push"]
    assert res.records[0]["source"]["phrased_by"] == "rule"


def test_a_chinese_lesson_without_the_port_is_not_written(memory: Memory) -> None:
    # 1.5B: the wrong port (5433 -> 5432) never named
    vague = records("检查数据库连接的主机和端口，确保它们正确无误。")
    res, _ = reflect(memory, PORT, vague, vague)
    assert lessons(res) and "5432" in lessons(res)[0], (lessons(res), reasons(res))
    assert "does not name" in reasons(res)[0]


def test_confidence_comes_from_the_evidence(memory: Memory) -> None:
    res, _ = reflect(memory, PIP, records("Add --user when pip lacks root", confidence=0.1))
    assert [r["confidence"] for r in res.records] == [0.8]


def test_the_fix_is_compared_with_the_call_that_failed() -> None:
    # the ssh to staging-01 before the failed deploy is not a failed argument
    bad, good = changed_units(analyse(STAGING), STAGING)
    assert not bad & units("staging-01 ssh uptime")
    assert bad == units("root") and not good  # the user changed: root -> deploy (a tool name)


def test_a_lesson_naming_another_host_is_not_a_failed_argument(memory: Memory) -> None:
    lesson = "Log in as a different user, as on staging-01"
    res, _ = reflect(memory, STAGING, records(lesson, steps=[3, 4]))
    assert lessons(res) == [lesson], reasons(res)


def test_small_causes() -> None:
    assert units("built") == units("build")
    assert not units("主机") | units("端口") | units("连接") | units("正确")
    perfect = Trajectory(goal="g", steps=[call("t"), result("t", "ok"), user("Perfect, thanks.")])
    assert analyse(perfect).complaints == []
    sorry = Trajectory(goal="g", steps=[call("t"), result("t", "ok"), user("No, use CSV.")])
    assert analyse(sorry).complaints == [3]


INSTALLER = Trajectory(
    goal="Clean up the Downloads folder",
    outcome="partial",
    steps=[
        call("delete", path="~/Downloads/setup-2024-01-02.exe"),
        result("delete", "deleted"),
        user("That was the installer I still need! Don't delete installers."),
    ],
)
LOCKFILE = Trajectory(
    goal="清理项目里没用的文件",
    outcome="partial",
    steps=[
        call("shell", cmd="rm package-lock.json"),
        result("shell", "已删除"),
        user("依赖文件不要删除，快恢复它"),
        call("shell", cmd="git checkout package-lock.json"),
        result("shell", "已恢复"),
    ],
)


def test_what_the_user_forbade_is_not_written_though_it_names_the_rule(memory: Memory) -> None:
    # 0.5B, through the evidence-first prompt: each names the user's words, and says
    # the opposite ("that was the installer I still need" made "installer" look followed)
    for run, bad in (
        (INSTALLER, "Delete the installer first"),
        (CC, "给客户发送日报时先抄送全组"),
        (LOCKFILE, "删除依赖文件并恢复"),
    ):
        res, _ = reflect(memory, run, records(bad), records(bad))
        assert bad not in lessons(res), (bad, reasons(res))
        assert reasons(res)[0].startswith("recommends what the user said not to do"), reasons(res)


SQL = Trajectory(
    goal="List customers with their last order date",
    outcome="success",
    steps=[
        call("sql", query="SELECT id, max(created) FROM users JOIN orders ON user_id = id"),
        Step(kind="error", tool="sql", content='ERROR: column reference "id" is ambiguous'),
        call(
            "sql",
            query="SELECT users.id, max(orders.created) FROM users JOIN orders "
            "ON orders.user_id = users.id",
        ),
        result("sql", "1,204 rows"),
    ],
)


def test_a_rule_lesson_naming_the_fix_then_what_failed_is_not_the_opposite(
    memory: Memory,
) -> None:
    # 1.5B: both answers too long; the rule's "use users.id, …, not id, …" was taken for
    # "users.id under a negation" because it shares the unit "id" with what failed
    long = records("Specify the table of every column reference in SQL joins, e.g. users.id")
    res, _ = reflect(memory, SQL, long, long)
    assert len(lessons(res)) == 1 and "users.id" in lessons(res)[0], reasons(res)


EMAIL = Trajectory(
    goal="Send the release notes",
    outcome="partial",
    steps=[
        call("send_email", to="all@company.example", subject="Release 4.2 notes"),
        result("send_email", "sent to 1,240 recipients"),
        user("Never send release notes to the whole company, only to team-dev@company.example."),
    ],
)


def test_following_what_the_user_asked_instead_is_not_the_opposite(memory: Memory) -> None:
    # 0.5B: the "company" of team-dev@company.example is not "the whole company"
    res, _ = reflect(memory, EMAIL, records("Send release notes to team-dev@company.example"))
    assert lessons(res) == ["Send release notes to team-dev@company.example"], reasons(res)
