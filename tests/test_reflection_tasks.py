"""Task logs (working memory, TTL), the background runners, and sync/async parity."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta

import pytest
from _clock import clocked_memory

from hindsight_core import AsyncMemory, Memory, NotFoundError, Settings, ValidationError
from hindsight_core.reflection import (
    AsyncReflector,
    AsyncTaskLog,
    BackgroundReflector,
    Reflector,
    ScriptedLLM,
    Step,
    TaskLog,
    Trajectory,
)


@pytest.fixture
def clocked(settings: Settings, embedder, namespace):  # type: ignore[no-untyped-def]
    with clocked_memory(namespace, settings, embedder) as pair:
        yield pair


def test_task_log_start_log_end_then_reflect_drops_it(clocked) -> None:  # type: ignore[no-untyped-def]
    memory, _ = clocked
    log = TaskLog(memory)
    tid = log.start_task(
        "Install the requests package", scene="python-setup", source={"agent": "setup-bot"}
    )
    log.log_step(
        tid, {"kind": "tool_call", "tool": "shell", "args": {"cmd": "pip install requests"}}
    )
    log.log_step(tid, Step(kind="tool_result", tool="shell", content="ERROR: Permission denied"))
    log.log_step(
        tid, {"kind": "tool_call", "tool": "shell", "args": {"cmd": "pip install --user requests"}}
    )
    log.log_step(tid, {"kind": "tool_result", "tool": "shell", "content": "Successfully installed"})
    rid = memory.write({"trigger": "python packages", "lesson": "Prefer virtualenvs"}).id
    log.note_recall(tid, recalled=[rid], used=[rid])
    running = log.get_trajectory(tid)
    assert len(running.steps) == 4 and running.outcome == "unknown"

    traj = log.end_task(tid, "success", final_state="requests installed for the user")
    assert traj.goal == "Install the requests package" and traj.scene == "python-setup"
    assert [s.kind for s in traj.steps] == ["tool_call", "tool_result", "tool_call", "tool_result"]
    assert traj.steps[0].args == {"cmd": "pip install requests"}
    assert traj.outcome == "success" and traj.final_state == "requests installed for the user"
    assert traj.recalled == [rid] and traj.used == [rid]
    assert traj.source == {"agent": "setup-bot", "task": str(tid)}
    with pytest.raises(ValidationError, match="already ended"):
        log.log_step(tid, {"kind": "thought", "content": "late"})

    result = Reflector(memory).reflect(traj)  # rule-based; the log is dropped once distilled
    (written,) = result.written
    record = memory.get(written.id)
    assert "--user" in record.lesson and record.source["task"] == str(tid)
    with pytest.raises(NotFoundError):
        log.get_trajectory(tid)


def test_task_log_expires_after_ttl(clocked) -> None:  # type: ignore[no-untyped-def]
    memory, clock = clocked
    log = TaskLog(memory)
    abandoned = log.start_task("abandoned task")
    clock.now += timedelta(hours=memory.settings.task_ttl_hours - 1)
    log.log_step(abandoned, {"kind": "thought", "content": "still here"})  # pushes the TTL
    clock.now += timedelta(hours=2)
    memory.maintain(namespace=memory.namespace)
    assert len(log.get_trajectory(abandoned).steps) == 1  # activity kept it alive
    clock.now += timedelta(hours=memory.settings.task_ttl_hours)
    report = memory.maintain(namespace=memory.namespace)
    assert report.expired_tasks >= 1
    with pytest.raises(NotFoundError):
        log.get_trajectory(abandoned)
    with pytest.raises(NotFoundError):
        log.log_step(abandoned, {"kind": "thought"})


def test_task_log_validates(memory: Memory) -> None:
    log = TaskLog(memory)
    with pytest.raises(ValidationError, match="goal"):
        log.start_task("  ")
    tid = log.start_task("t")
    with pytest.raises(ValidationError, match="step.kind"):
        log.log_step(tid, {"kind": "shout", "content": "x"})
    with pytest.raises(ValidationError, match="outcome"):
        log.end_task(tid, "great")
    with pytest.raises(NotFoundError):
        TaskLog(memory).get_trajectory(tid, namespace=("someone", "else"))


GOOD = json.dumps(
    {
        "records": [
            {
                "trigger": "cleaning downloads",
                "lesson": "Check for installers before deleting files",
                "confidence": 0.9,
                "steps": [1, 2],
                "evidence": "I still need that installer",
            }
        ]
    }
)
RUN = Trajectory(
    goal="Clean up the Downloads folder",
    scene="file-cleanup",
    outcome="partial",
    steps=[
        Step(kind="tool_call", tool="delete", args={"path": "setup-2024.exe"}),
        Step(kind="message", role="user", content="I still need that installer"),
    ],
)


def test_background_reflector(memory: Memory) -> None:
    started = threading.Event()
    release = threading.Event()

    class SlowLLM(ScriptedLLM):
        def complete(self, messages, *, json_schema=None):  # type: ignore[no-untyped-def]
            started.set()
            release.wait(10)
            return super().complete(messages, json_schema=json_schema)

    llm = SlowLLM([GOOD, "garbage", "still garbage", '{"records": []}'])
    bg = BackgroundReflector(Reflector(memory, llm))
    first = bg.submit(RUN)
    assert started.wait(10)
    assert not first.done()  # submit returned while the model was still "thinking"
    second = bg.submit(RUN.model_dump())
    third = bg.submit(RUN)
    release.set()
    bg.close()  # drains the queue
    assert first.result(0).written[0].status == "inserted"
    skipped = second.result(0)
    assert skipped.skipped and skipped.error  # malformed twice: no exception
    assert third.result(0).written == [] and not third.result(0).skipped
    late = bg.submit(RUN).result(0)
    assert late.skipped and "closed" in (late.error or "")
    assert [r.lesson for r in memory.list_records()] == [
        "Check for installers before deleting files"
    ]


def test_background_reflector_survives_storage_errors(settings: Settings, embedder) -> None:  # type: ignore[no-untyped-def]
    broken = Memory(
        ("t", "x"),
        settings=Settings(
            database_url="postgresql+psycopg://nobody@127.0.0.1:1/none", connect_timeout=1
        ),
        embedder=embedder,
    )
    with BackgroundReflector(Reflector(broken, ScriptedLLM([GOOD, GOOD]))) as bg:
        future = bg.submit(RUN)
    result = future.result(0)
    assert result.skipped and result.error
    broken.close()


# ---------------------------------------------------------------------- async parity


@pytest.mark.parametrize("answers", [[GOOD], ["not json", GOOD], ["x", "y"], ['{"records": []}']])
async def test_async_reflect_matches_sync(settings: Settings, embedder, answers) -> None:  # type: ignore[no-untyped-def]
    import uuid

    sync_mem = Memory(("parity", uuid.uuid4().hex), settings=settings, embedder=embedder)
    async_mem = AsyncMemory(("parity", uuid.uuid4().hex), settings=settings, embedder=embedder)
    try:
        s = await asyncio.to_thread(Reflector(sync_mem, ScriptedLLM(answers)).reflect, RUN)
        a = await AsyncReflector(async_mem, ScriptedLLM(answers)).reflect(RUN)
        assert (a.skipped, a.distiller, a.records, a.dropped) == (
            s.skipped,
            s.distiller,
            s.records,
            s.dropped,
        )
        assert [w.status for w in a.written] == [w.status for w in s.written]
        assert [r.lesson for r in await async_mem.list_records()] == [
            r.lesson for r in sync_mem.list_records()
        ]
    finally:
        sync_mem.close()
        await async_mem.aclose()


async def test_async_submit_and_task_log(amemory: AsyncMemory) -> None:
    log = AsyncTaskLog(amemory)
    tid = await log.start_task("Install the requests package")
    for step in FIXED_STEPS:
        await log.log_step(tid, step)
    traj = await log.end_task(tid, "success")
    reflector = AsyncReflector(amemory)  # rule-based
    task = reflector.submit(traj)
    failing = AsyncReflector(amemory, ScriptedLLM([])).submit(RUN)
    assert reflector.pending == 1
    assert await reflector.wait() == [await task]
    result = await task
    assert result.distiller == "rule-based" and "--user" in result.records[0]["lesson"]
    assert (await failing).skipped  # script exhausted: reported, not raised
    with pytest.raises(NotFoundError):
        await log.get_trajectory(tid)


FIXED_STEPS = [
    {"kind": "tool_call", "tool": "shell", "args": {"cmd": "pip install requests"}},
    {"kind": "tool_result", "tool": "shell", "content": "ERROR: Permission denied"},
    {"kind": "tool_call", "tool": "shell", "args": {"cmd": "pip install --user requests"}},
    {"kind": "tool_result", "tool": "shell", "content": "Successfully installed requests"},
]
