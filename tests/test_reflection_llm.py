"""The OpenAI-compatible client (real HTTP on loopback), parsing, boundaries, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _chat_server import ChatServer, serve
from typer.testing import CliRunner

import hindsight_core.reflection as reflection
from hindsight_core import LLMError, Memory, Settings
from hindsight_core.reflection import (
    Boundary,
    OpenAICompatibleLLM,
    ParseError,
    Reflector,
    Step,
    Trajectory,
    extract_json,
    idle_rounds,
    llm_from_settings,
    parse_records,
)

chat = pytest.fixture(serve)

LESSON = {
    "records": [
        {
            "trigger": "cleaning downloads",
            "lesson": "Check for installers before deleting files",
            "confidence": 0.8,
            "steps": [1, 2],
            "evidence": "I still need that installer",
        }
    ]
}
RUN = Trajectory(
    goal="Clean up the Downloads folder",
    outcome="partial",
    steps=[
        Step(kind="tool_call", tool="delete", args={"path": "setup-2024.exe"}),
        Step(kind="message", role="user", content="I still need that installer"),
    ],
)


def test_openai_client_round_trip(chat: ChatServer) -> None:
    chat.completion("hello", prompt=12, completion=3)
    llm = OpenAICompatibleLLM(chat.url + "/", "tiny", api_key="sk-test", timeout=5)
    resp = llm.complete([{"role": "user", "content": "hi"}], json_schema={"type": "object"})
    assert (resp.text, resp.prompt_tokens, resp.completion_tokens, resp.model) == (
        "hello",
        12,
        3,
        "tiny-1",
    )
    (req,) = chat.requests
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "tiny" and req["body"]["messages"][0]["content"] == "hi"
    assert req["body"]["response_format"]["type"] == "json_schema"
    assert req["body"]["response_format"]["json_schema"]["schema"] == {"type": "object"}


def test_openai_client_falls_back_when_json_schema_is_rejected(chat: ChatServer) -> None:
    chat.answers.append((400, {"error": {"message": "response_format json_schema unsupported"}}))
    chat.completion("{}")
    llm = OpenAICompatibleLLM(chat.url, "tiny")
    assert llm.complete([{"role": "user", "content": "x"}], json_schema={}).text == "{}"
    assert [r["body"]["response_format"]["type"] for r in chat.requests] == [
        "json_schema",
        "json_object",
    ]
    assert llm.response_format == "json_object"  # remembered for the next call


def test_openai_client_errors(chat: ChatServer) -> None:
    chat.answers.append((500, "upstream exploded"))
    chat.answers.append((200, {"choices": []}))
    llm = OpenAICompatibleLLM(chat.url, "tiny")
    with pytest.raises(LLMError, match="500"):
        llm.complete([{"role": "user", "content": "x"}])
    with pytest.raises(LLMError, match="unexpected answer"):
        llm.complete([{"role": "user", "content": "x"}])
    with pytest.raises(LLMError, match="cannot reach"):
        OpenAICompatibleLLM("http://127.0.0.1:1/v1", "m", timeout=2).complete([])


async def test_openai_client_async(chat: ChatServer) -> None:
    chat.completion("async hello")
    resp = await OpenAICompatibleLLM(chat.url, "tiny").acomplete(
        [{"role": "user", "content": "hi"}]
    )
    assert resp.text == "async hello" and "response_format" not in chat.requests[0]["body"]


def test_reflect_through_http_model_records_usage(chat: ChatServer, memory: Memory) -> None:
    chat.completion("```json\n" + json.dumps(LESSON) + "\n```", prompt=300, completion=40)
    before = memory.stats()
    result = Reflector(memory, OpenAICompatibleLLM(chat.url, "tiny")).reflect(RUN)
    assert result.distiller == "llm:tiny" and len(result.written) == 1
    after = memory.stats()
    assert after.llm_calls == before.llm_calls + 1
    assert after.llm_prompt_tokens - before.llm_prompt_tokens == 300
    assert after.llm_completion_tokens - before.llm_completion_tokens == 40


def test_llm_from_settings(database_url: str) -> None:
    assert llm_from_settings(Settings(database_url=database_url)) is None
    llm = llm_from_settings(
        Settings(
            database_url=database_url, llm_base_url="http://x/v1", llm_model="m", llm_api_key="k"
        )
    )
    assert isinstance(llm, OpenAICompatibleLLM) and llm.model_name == "m"
    assert isinstance(llm, reflection.LLM)


# ---------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text",
    [
        '{"records": [{"lesson": "a", "confidence": 0.7}]}',
        'Here you go:\n```json\n{"records": [{"lesson": "a", "confidence": "0.7"}]}\n```\nDone.',
        '{"records": [{"lesson": "a", "confidence": "70%"}]} I hope this helps [1].',
        '[{"lesson": "a", "confidence": 70}]',
        'Answer: {"lesson": "a", "confidence": 0.7}',
    ],
)
def test_parse_records_is_lenient(text: str) -> None:
    records, dropped = parse_records(text)
    assert records == [{"lesson": "a", "confidence": pytest.approx(0.7)}] and dropped == []


@pytest.mark.parametrize(
    "text", ["", "be careful", '{"records": ', '{"answer": 1}', '{"records": "none"}']
)
def test_parse_records_rejects(text: str) -> None:
    with pytest.raises(ParseError):
        parse_records(text)


def test_parse_records_drops_bad_entries() -> None:
    records, dropped = parse_records(
        json.dumps(
            {
                "records": [
                    {"lesson": "ok", "confidence": 0.9},
                    {"lesson": "x", "confidence": "very"},
                    {"lesson": "", "confidence": 0.9},
                    "text",
                    {"lesson": "no confidence"},
                ]
            }
        )
    )
    assert [r["lesson"] for r in records] == ["ok"]
    assert len(dropped) == 4


def test_extract_json_skips_prose_brackets() -> None:
    assert extract_json('See [the docs] then {"a": 1} trailing') == {"a": 1}


# ---------------------------------------------------------------------- boundaries


def test_boundaries() -> None:
    steps = [
        Step(kind="tool_call", tool="t"),
        Step(kind="tool_result", content="ok"),
        Step(kind="message", role="assistant", content="done?"),
        Step(kind="message", role="user", content="hm"),
        Step(kind="thought", content="waiting"),
    ]
    run = Trajectory(goal="g", steps=steps)
    assert idle_rounds(steps) == 2
    assert Boundary(idle_rounds=3).reached(run) is None
    assert Boundary(idle_rounds=2).reached(run) == "idle"
    assert Boundary(idle_rounds=None).reached(run, ended=True) == "explicit"
    assert Boundary().reached(run.model_copy(update={"outcome": "success"})) == "explicit"
    cond = Boundary(idle_rounds=None, until=lambda t: "waiting" in t.text())
    assert cond.reached(run) == "condition"
    with pytest.raises(ValueError):
        Boundary(idle_rounds=0)


def test_all_is_complete() -> None:
    public = {
        n
        for n in dir(reflection)
        if not n.startswith("_") and not isinstance(getattr(reflection, n), type(reflection))
    }
    assert public - {"annotations"} <= set(reflection.__all__)
    for name in (
        "Step",
        "Trajectory",
        "LLMResponse",
        "LLM",
        "OpenAICompatibleLLM",
        "llm_from_settings",
        "ScriptedLLM",
        "ReflectionResult",
        "Reflector",
        "AsyncReflector",
        "BackgroundReflector",
        "TaskLog",
        "AsyncTaskLog",
        "RuleBasedDistiller",
        "ReviewResult",
    ):
        assert name in reflection.__all__


def test_prompt_is_package_data() -> None:
    prompts = Path(reflection.__file__).parent / "prompts"
    assert (prompts / f"{reflection.PROMPT_VERSION}.md").is_file()
    text = (prompts / "distill_v2.md").read_text()
    assert "{{max_chars}}" in text and '"steps"' in text and "language" in text
    assert '"lesson": "' not in text  # no example lesson to copy


# ---------------------------------------------------------------------- CLI


@pytest.fixture
def cli(memory: Memory, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from hindsight_adapters.cli import app
    from hindsight_adapters.cli import reflect as _reflect  # noqa: F401 (registers commands)

    for var in ("HINDSIGHT_LLM_BASE_URL", "HINDSIGHT_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    return CliRunner(), app


def test_cli_reflect_rule_based(cli, memory: Memory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    runner, app = cli
    path = tmp_path / "run.json"
    path.write_text(
        json.dumps(
            {
                "goal": "Install requests",
                "outcome": "success",
                "steps": [
                    {"kind": "tool_call", "tool": "shell", "args": {"cmd": "pip install requests"}},
                    {"kind": "error", "tool": "shell", "content": "Permission denied"},
                    {
                        "kind": "tool_call",
                        "tool": "shell",
                        "args": {"cmd": "pip install --user requests"},
                    },
                    {"kind": "tool_result", "tool": "shell", "content": "Successfully installed"},
                ],
            }
        )
    )
    ns = "/".join(memory.namespace)
    res = runner.invoke(app, ["reflect", str(path), "-n", ns])
    assert res.exit_code == 0, res.output
    assert "rule-based" in res.output and "inserted" in res.output and "--user" in res.output
    res = runner.invoke(app, ["reflect", str(path), "-n", ns, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["distiller"] == "rule-based" and data["written"][0]["status"] == "merged"
    assert len(memory.list_records()) == 1
    shown = data["written"][0]["id"]  # the lesson was recalled this time: reinforced
    path.write_text(json.dumps({**json.loads(path.read_text()), "recalled": [shown]}))
    res = runner.invoke(app, ["reflect", str(path), "-n", ns])
    assert res.exit_code == 0, res.output
    assert f"reinforced {shown}" in res.output and "no new lesson" not in res.output
    assert memory.get(shown).occurrences == 3
    res = runner.invoke(
        app,
        ["reflect", "-", "-n", ns, "--rule-based"],
        input='{"goal": "nothing went wrong", "outcome": "success"}',
    )
    assert res.exit_code == 0, res.output
    assert "--rule-based" in res.output and "no new lesson" in res.output


def test_cli_reflect_with_http_model_and_review(
    cli,
    chat: ChatServer,
    memory: Memory,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner, app = cli
    monkeypatch.setenv("HINDSIGHT_LLM_BASE_URL", chat.url)
    monkeypatch.setenv("HINDSIGHT_LLM_MODEL", "tiny")
    chat.completion(json.dumps(LESSON))
    path = tmp_path / "run.json"
    path.write_text(RUN.model_dump_json())
    ns = "/".join(memory.namespace)
    res = runner.invoke(app, ["reflect", str(path), "-n", ns, "--json"])
    assert res.exit_code == 0, res.output
    written = json.loads(res.stdout)["written"][0]["id"]
    path.write_text(json.dumps({"goal": "x", "recalled": [written], "used": [written]}))
    res = runner.invoke(app, ["review", str(path), "-n", ns])
    assert res.exit_code == 0, res.output
    assert "reinforce" in res.output and written in res.output
    assert memory.get(written).use_count == 1


def test_cli_bad_input(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    runner, app = cli
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = runner.invoke(app, ["reflect", str(bad)])
    assert res.exit_code == 2 and "not valid JSON" in " ".join(res.output.split())
    bad.write_text('{"goal": "x", "steps": [{"kind": "dance"}]}')
    res = runner.invoke(app, ["reflect", str(bad)])
    assert res.exit_code == 2 and "steps.0.kind" in " ".join(res.output.split())
