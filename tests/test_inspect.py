"""The core's inspection API (namespaces, scenes, counts, activity, history, decay
curve) in sync and async, and the ``hindsight ui`` command's refusals."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _clock import Clock, clocked_memory

from hindsight_core import AsyncMemory, Memory, NotFoundError, Settings, ValidationError

RECORDS = [
    {"scene": "files", "trigger": "deleting downloads", "lesson": "Check the extension first"},
    {"scene": "files", "trigger": "moving folders", "lesson": "Copy, verify, then delete"},
    {"scene": "web", "trigger": "flaky API", "lesson": "Retry with exponential backoff"},
]


@pytest.fixture
def clocked(settings: Settings, embedder: Any, namespace: tuple[str, str]):  # type: ignore[no-untyped-def]
    with clocked_memory(namespace, settings, embedder) as pair:
        yield pair


def test_namespaces_scenes_and_counts(memory: Memory) -> None:
    ids = [r.id for r in memory.write_many(RECORDS)]
    memory.archive(ids[2])
    other = (*memory.namespace, "child")
    memory.write(RECORDS[0], namespace=other)

    under = memory.namespaces(prefix=memory.namespace)
    assert [n.namespace for n in under] == [memory.namespace, other]
    mine = under[0]
    assert (mine.records, mine.archived, mine.scenes) == (2, 1, 2)
    assert memory.namespaces(prefix=(memory.namespace[0], "no-such")) == []
    assert memory.namespace in [n.namespace for n in memory.namespaces()]

    scenes = {s.scene: (s.records, s.archived) for s in memory.scenes()}
    assert scenes == {"files": (2, 0), "web": (0, 1)}
    assert memory.count_records() == 2
    assert memory.count_records(archived=True) == 1
    assert memory.count_records(archived=None) == 3
    assert memory.count_records(scene="files") == 2
    assert memory.count_records(namespace=other) == 1


def test_activity_and_history(clocked: tuple[Memory, Clock]) -> None:
    mem, clock = clocked
    rid = mem.write(RECORDS[0]).id
    mem.mark_used(rid)
    clock.now += timedelta(days=2)
    mem.mark_used(rid, helpful=False)
    mem.archive(rid)
    clock.now += timedelta(days=1, hours=1)
    mem.restore(rid)

    points = {(p.day.isoformat(), p.kind): p.count for p in mem.activity(days=10)}
    assert points == {
        ("2026-01-01", "used"): 1,
        ("2026-01-03", "unhelpful"): 1,
        ("2026-01-03", "archive"): 1,
        ("2026-01-04", "restore"): 1,
    }
    assert [p.kind for p in mem.activity(days=1)] == ["restore"]  # a window, not everything
    assert mem.activity(days=10, record_id=uuid.uuid4()) == []
    kinds = [e.kind for e in mem.events(rid)]
    assert kinds == ["restore", "archive", "unhelpful", "used"]
    assert mem.events(rid, limit=1)[0].detail == {"restore_score": pytest.approx(0.4)}


def test_decay_curve_follows_the_decay_rule(clocked: tuple[Memory, Clock]) -> None:
    mem, clock = clocked
    rid = mem.write(RECORDS[2]).id
    clock.now += timedelta(days=30)
    curve = mem.decay_curve(rid, days=330, points=13)  # one point every 30 days
    assert curve.points[0].at == datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert [round(p.score, 4) for p in curve.points[:4]] == [1.0, 0.9, 0.81, 0.729]
    assert curve.points[1].score == pytest.approx(mem.get(rid).decayed_score)
    # 0.9 ** 12 = 0.28 is the first value under the 0.3 eviction line
    assert curve.evicted_at == curve.points[12].at
    mem.set_critical(rid, True)
    flat = mem.decay_curve(rid, days=330, points=13)
    assert flat.critical and flat.evicted_at is None
    assert {round(p.score, 6) for p in flat.points} == {1.0}


def test_inspect_errors(memory: Memory) -> None:
    with pytest.raises(NotFoundError):
        memory.decay_curve(uuid.uuid4())
    with pytest.raises(ValidationError, match="days must be an integer"):
        memory.activity(days=0)
    with pytest.raises(ValidationError, match="points"):
        memory.decay_curve(uuid.uuid4(), points=1)
    with pytest.raises(ValidationError, match="prefix"):
        memory.namespaces(prefix=())
    with pytest.raises(ValidationError, match="archived"):
        memory.count_records(archived="yes")  # type: ignore[arg-type]


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "HINDSIGHT_UI_TOKEN"} | env
    command = [sys.executable, "-c", "from hindsight_adapters.cli import main; main()", *args]
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)


def test_cli_refuses_public_bind_without_token() -> None:
    result = _cli("ui", "--host", "0.0.0.0", "--port", "1")
    assert result.returncode == 2
    assert "without a token" in result.stderr and "HINDSIGHT_UI_TOKEN" in result.stderr


def test_is_loopback_and_safe_next() -> None:
    from hindsight_adapters.ui import is_loopback
    from hindsight_adapters.ui.auth import safe_next

    assert all(
        map(is_loopback, ["127.0.0.1", "localhost", "LocalHost", "::1", "[::1]", "127.0.0.2"])
    )
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.com"]))
    assert safe_next("/?ns=a") == "/?ns=a"
    assert safe_next("//evil.example/") == "/" and safe_next("https://evil.example") == "/"


def test_drop_namespace_deletes_everything_in_it_and_nothing_else(memory: Memory) -> None:
    from hindsight_core.items import Items
    from hindsight_core.reflection import TaskLog

    ns, other = memory.namespace, (*memory.namespace, "child")
    ids = [r.id for r in memory.write_many(RECORDS)]
    memory.mark_used(ids[0])
    memory.write(RECORDS[0], namespace=other)
    items = Items(memory)
    items.put(ns, "k", {"v": 1})
    TaskLog(memory).start_task("tidy up", namespace=ns)
    assert memory.drop_namespace(ns) == {"records": 3, "events": 1, "items": 1, "tasks": 1}
    assert memory.namespaces(prefix=ns) == [
        n for n in memory.namespaces(prefix=ns) if n.namespace == other
    ]
    assert memory.count_records(namespace=other) == 1 and items.get(ns, "k") is None
    assert memory.activity(days=1) == [] and memory.events(ids[0]) == []
    assert memory.drop_namespace(ns) == {"records": 0, "events": 0, "items": 0, "tasks": 0}
    items.close()


async def test_drop_namespace_async(amemory: AsyncMemory) -> None:
    await amemory.write(RECORDS[0])
    assert (await amemory.drop_namespace(amemory.namespace))["records"] == 1
    assert await amemory.count_records() == 0
