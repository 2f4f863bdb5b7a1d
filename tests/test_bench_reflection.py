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
    copy = "Do not write general advice, do not restate what a tool is for"
    chat.completion(
        json.dumps(
            {
                "records": [
                    {"lesson": copy, "confidence": 0.9, "steps": [2], "trigger": "installing"}
                ]
            }
        )
    )
    chat.completion(
        json.dumps(
            {
                "records": [
                    {
                        "lesson": "Run git pull --rebase when a push is rejected",
                        "confidence": 0.8,
                        "steps": [2, 3],
                        "trigger": "git push rejected",
                        "evidence": "rejected",
                    }
                ]
            }
        )
    )
    chat.completion('{"records": []}')
    llm = bench.CountingLLM(OpenAICompatibleLLM(chat.url, "parrot"))
    result = bench.bench("llm:parrot", first, memory, llm)
    assert result["lessons_written"] == 1 and result["share_grounded"] == 1.0
    assert result["prompt_copies_written"] == 0 and result["prompt_copies_proposed"] == 1
    assert result["nothing_new_precision"] == 0.0 and result["nothing_new_recall"] is None
    assert result["facts_covered"] == pytest.approx(1 / 3, abs=0.001)
    assert result["tokens_per_run"] == 49.0 and result["length_compliance"] == 1.0
    assert result["dropped"] == {"copies the prompt": 1}
    sent = chat.requests[0]["body"]
    assert sent["model"] == "parrot" and "steps" in json.dumps(sent["response_format"])
    assert "| share_grounded | 1.0 |" in bench.table([result])


def test_the_screen_keeps_the_good_answers_and_stops_the_bad(
    bench: ModuleType, runs: list[dict], memory: Memory
) -> None:
    """The hand-written answers: a grounded lesson for each run with something to learn
    (all kept), and what small models answered (all dropped, each with a reason)."""

    def replay(kind: str) -> object:
        return bench.CountingLLM(bench.ReplayLLM(runs, kind))

    good = bench.bench("replay:good", runs, memory, replay("good"))
    assert good["runs_fully_answered"] == 1.0 and good["share_grounded"] == 1.0, [
        (r["id"], r["dropped"]) for r in good["rows"] if r["dropped"]
    ]
    assert good["nothing_new_precision"] == good["nothing_new_recall"] == 1.0
    bad_runs = [r for r in runs if r.get("answers", {}).get("bad")]
    assert len(bad_runs) >= 15
    bad = bench.bench("replay:bad", bad_runs, memory, replay("bad"))
    assert bad["lessons_written"] == 0 and sum(bad["dropped"].values()) == len(bad_runs)
    assert {"nothing new", "generic advice", "recommends", "cites no step"} <= set(bad["dropped"])
