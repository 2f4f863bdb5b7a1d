"""bench/bench_reflection.py: its hand-written runs are sound, and its OpenAI-compatible
path works (a loopback chat server stands in for the endpoint; figures are in bench/)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from _chat_server import ChatServer, serve

from hindsight_core import Memory
from hindsight_core.reflection import OpenAICompatibleLLM, Trajectory
from hindsight_core.reflection.evidence import analyse, is_chinese

BENCH = Path(__file__).parent.parent / "bench" / "bench_reflection.py"
chat = pytest.fixture(serve)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_reflection", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs(bench: ModuleType) -> list[dict]:
    return json.loads(bench.DATA.read_text("utf-8"))["runs"]


def test_the_runs_are_sound(runs: list[dict]) -> None:
    assert len(runs) == 40 and len({r["id"] for r in runs}) == 40
    assert {r["kind"] for r in runs} == {"fix", "correction", "nothing", "noisy"}
    assert sum(r["lang"] == "zh" for r in runs) >= 12
    for run in runs:
        traj = Trajectory.model_validate(run["trajectory"])
        assert is_chinese(traj) == (run["lang"] == "zh"), run["id"]
        signals = analyse(traj).signals
        if run["expect"] == "none":
            assert signals == [], (run["id"], signals)  # nothing failed, nobody complained
            continue
        assert signals, run["id"]
        text = json.dumps(run["trajectory"], ensure_ascii=False).lower()
        for fact in run["expect"]["facts"]:
            assert fact and all(isinstance(a, str) and a for a in fact)
            assert any(a.lower() in text for a in fact), (run["id"], fact)  # taken from the run
    assert max(len(r["trajectory"]["steps"]) for r in runs if r["kind"] == "noisy") >= 30


def test_bench_against_an_openai_compatible_endpoint(
    bench: ModuleType, runs: list[dict], chat: ChatServer, memory: Memory
) -> None:
    first = runs[:3]  # pip --user, git pull --rebase, a longer timeout
    assert [r["id"] for r in first] == ["en-fix-pip-user", "en-fix-git-rebase", "en-fix-timeout"]
    copy = "Do not repeat the task or the user's words, do not recommend what failed"
    chat.completion(json.dumps({"lesson": copy}))  # pip: a copy of the prompt,
    chat.completion(json.dumps({"lesson": "Install the requests package"}))  # then the goal
    chat.completion(json.dumps({"lesson": "Run git pull --rebase when a push is rejected"}))
    chat.completion('{"lesson": ""}')  # timeout: nothing, twice
    chat.completion('{"lesson": ""}')
    llm = bench.CountingLLM(OpenAICompatibleLLM(chat.url, "parrot"))
    result = bench.bench("llm:parrot", first, memory, llm)
    rows = {r["id"]: r for r in result["rows"]}
    assert rows["en-fix-pip-user"]["lessons"] == ["When calling pip, always add --user"]
    assert rows["en-fix-git-rebase"]["lessons"] == ["Run git pull --rebase when a push is rejected"]
    assert rows["en-fix-timeout"]["lessons"] == ["http_get: use timeout=120 instead of timeout=5"]
    assert result["lessons_written"] == 3 and result["share_grounded"] == 1.0
    assert result["prompt_copies_written"] == 0 and result["prompt_copies_proposed"] == 1
    assert result["restated_goal_or_user"] == 0 and result["opposite_of_fix"] == 0
    assert result["facts_covered"] == 1.0 and result["asked_again"] == 2
    assert result["dropped"] == {"copies the prompt": 1, "restates": 1, "the lesson is empty": 2}
    sent = chat.requests[0]["body"]
    assert sent["model"] == "parrot" and "lesson" in json.dumps(sent["response_format"])
    assert "| share_grounded | 1.0 |" in bench.table([result])


def test_the_screen_keeps_the_good_answers_and_stops_the_bad(
    bench: ModuleType, runs: list[dict], memory: Memory
) -> None:
    """The hand-written answers: a grounded lesson for each run with something to learn
    (all kept), and what small models answered (none written; a run with something to
    learn gets its rule-built lesson instead, never the goal)."""

    def replay(kind: str) -> object:
        return bench.CountingLLM(bench.ReplayLLM(runs, kind))

    good = bench.bench("replay:good", runs, memory, replay("good"))
    assert good["runs_fully_answered"] == 1.0 and good["share_grounded"] == 1.0, [
        (r["id"], r["dropped"]) for r in good["rows"] if r["dropped"]
    ]
    assert good["nothing_new_precision"] == good["nothing_new_recall"] == 1.0
    assert good["calls_on_nothing_runs"] == 0
    bad_runs = [r for r in runs if r.get("answers", {}).get("bad")]
    assert len(bad_runs) >= 15
    bad = bench.bench("replay:bad", bad_runs, memory, replay("bad"))
    bad_lessons = {le for r in bad_runs for a in r["answers"]["bad"] for le in [a["lesson"]]}
    written = [le for r in bad["rows"] for le in r["lessons"]]
    assert not set(written) & bad_lessons, written
    assert bad["restated_goal_or_user"] == bad["opposite_of_fix"] == 0
    assert bad["share_grounded"] == 1.0 and bad["calls_on_nothing_runs"] == 0
    assert {"restates", "does not name", "recommends"} <= set(bad["dropped"])


def test_the_harder_runs(bench: ModuleType, memory: Memory) -> None:
    """Two failures in one run, a fix that only adds a flag, a Chinese correction after
    an English goal: the good answers are kept, the bad ones (one lesson twice, the
    opposite of the fix) are not."""
    hard = json.loads(bench.HARD.read_text("utf-8"))["runs"]
    good = bench.bench(
        "replay:good", hard, memory, bench.CountingLLM(bench.ReplayLLM(hard, "good"))
    )
    assert good["runs_fully_answered"] == 1.0 and good["share_grounded"] == 1.0, good["rows"]
    bad = bench.bench("replay:bad", hard, memory, bench.CountingLLM(bench.ReplayLLM(hard, "bad")))
    bad_lessons = {a["lesson"] for r in hard for a in r["answers"].get("bad", [])}
    written = [le for r in bad["rows"] for le in r["lessons"]]
    assert written.count(written[0]) == 1 and not set(written) & (bad_lessons - {written[0]})
    assert bad["opposite_of_fix"] == 0 and bad["share_grounded"] == 1.0
