"""Items, checkpoints and the task log, once through the sync and once through the
async front end (``tests/_front.py``), as ``test_core_api.py`` does for ``Memory``.

Each scenario asserts what its calls did and returns what they returned;
``test_front_ends_agree`` runs each on both I/O styles and compares the transcripts.
"""

from __future__ import annotations

import inspect
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _clock import Clock
from _front import Front, Scenario, beside, transcript
from conftest import FRONT_START, MakeFront

from hindsight_core import NotFoundError, ValidationError
from hindsight_core.checkpoints import AsyncCheckpoints, Checkpoints
from hindsight_core.items import AsyncItems, GetItem, ItemIndex, Items, PutItem
from hindsight_core.reflection.tasks import AsyncTaskLog, TaskLog


async def items(api: Front, clock: Clock) -> list[Any]:
    store = beside(api, Items, AsyncItems, index=ItemIndex(dims=api.embedder.dim))
    await store.setup()
    prefs, notes = (*api.namespace, "prefs"), (*api.namespace, "notes")
    await store.put(prefs, "style", {"text": "likes short answers", "lang": "en"})
    await store.put(prefs, "tone", {"text": "prefers a formal tone", "lang": "de"})
    await store.put(notes, "tmp", {"text": "a note that expires"}, ttl=30)
    got = await store.get(prefs, "style")
    assert got is not None and got.value["text"] == "likes short answers"
    assert got.created_at == clock.now and got.expires_at is None
    hits = await store.search(api.namespace, query="how long should answers be")
    assert [h.item.key for h in hits][0] == "style" and len(hits) == 3
    assert hits[0].score is not None and hits[0].breakdown is not None
    german = await store.search(api.namespace, filter={"lang": "de"})
    assert [h.item.key for h in german] == ["tone"]
    spaces = await store.list_namespaces(prefix=api.namespace)
    assert sorted(spaces) == sorted([prefs, notes])
    batch = await store.batch([GetItem(prefs, "tone"), PutItem(prefs, "tone", None)])
    assert batch[0] is not None and batch[1] is None and await store.get(prefs, "tone") is None
    await store.delete(prefs, "style")
    assert await store.get(prefs, "style") is None
    clock.now += timedelta(hours=1)  # past the note's TTL: swept
    assert await store.sweep() >= 1 and await store.get(notes, "tmp") is None
    assert isinstance(await store.index_health(), list)
    assert isinstance(await store.rebuild_indexes(), list)
    with pytest.raises(ValidationError):
        await store.put((), "k", {"text": "no namespace"})
    await store.close()
    return [got, hits, german, spaces, batch]


async def checkpoints(api: Front, clock: Clock) -> list[Any]:
    store = beside(api, Checkpoints, AsyncCheckpoints)
    await store.setup()
    thread, other = api.namespace[-1], api.namespace[0]
    blobs = [("messages", "1", "json", b"[1]")]
    one = {"id": "c1", "channel_versions": {"messages": "1"}}
    await store.put(thread, "", "c1", None, one, {"run_id": "r1"}, blobs)
    await store.put(thread, "", "c2", "c1", {"id": "c2", "v": 1}, {"run_id": "r2"})
    await store.put_writes(thread, "", "c2", "task", [(0, "messages", "json", b"[2]")])
    latest = await store.get(thread)
    assert latest is not None and latest.checkpoint_id == "c2"
    assert latest.writes == [("task", "messages", "json", b"[2]")]
    first = await store.get(thread, "", "c1")
    assert first is not None and first.blobs == [("messages", "json", b"[1]")]
    listed = await store.list(thread)
    assert [r.checkpoint_id for r in listed] == ["c2", "c1"]
    by_run = await store.list(thread, metadata={"run_id": "r1"})
    assert [r.checkpoint_id for r in by_run] == ["c1"]
    await store.copy_thread(thread, other)
    assert [r.checkpoint_id for r in await store.list(other)] == ["c2", "c1"]
    stats = await store.thread_stats(thread)
    assert stats["checkpoints"] == 2
    await store.prune([thread])  # keep_latest
    assert [r.checkpoint_id for r in await store.list(thread)] == ["c2"]
    assert await store.delete_for_runs(["r2"]) == 2  # the thread's and its copy's
    await store.delete_threads([thread, other])
    assert await store.get(thread) is None and await store.list(other) == []
    with pytest.raises(ValueError, match="prune strategy"):
        await store.prune([thread], "everything")
    await store.close()
    return [latest, first, listed, by_run, stats]


async def tasks(api: Front, clock: Clock) -> list[Any]:
    log = beside(api, TaskLog, AsyncTaskLog)
    task = await log.start_task("clean up the downloads", scene="files", source={"agent": "a"})
    await log.log_step(task, {"kind": "tool_call", "tool": "rm", "args": {"path": "a.exe"}})
    await log.log_step(task, {"kind": "error", "tool": "rm", "content": "permission denied"})
    recalled = (await api.write({"trigger": "deleting", "lesson": "Check rights first"})).id
    await log.note_recall(task, recalled=[recalled], used=[recalled])
    running = await log.get_trajectory(task)
    assert [s.kind for s in running.steps] == ["tool_call", "error"]
    assert running.outcome == "unknown" and running.recalled == [recalled]
    ended = await log.end_task(task, "failure", "the file stayed")
    assert (ended.outcome, ended.final_state) == ("failure", "the file stayed")
    assert ended.used == [recalled]
    assert ended.source == {"agent": "a", "task": str(task)} and ended.scene == "files"
    with pytest.raises(ValidationError, match="already ended"):
        await log.log_step(task, {"kind": "thought", "content": "too late"})
    with pytest.raises(ValidationError) as bad:
        await log.end_task(task, "great")
    assert bad.value.field == "outcome"
    assert await log.drop_task(task) and not await log.drop_task(task)
    with pytest.raises(NotFoundError):
        await log.get_trajectory(task)
    return [running, ended]


SCENARIOS: dict[str, Scenario] = {"items": items, "checkpoints": checkpoints, "tasks": tasks}


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
async def test_scenario(api: Front, front_clock: Clock, scenario: Scenario) -> None:
    await scenario(api, front_clock)


@pytest.mark.parametrize("name", SCENARIOS)
async def test_front_ends_agree(make_front: MakeFront, name: str) -> None:
    """The same calls give the same results (ids and namespace aside) on both."""
    runs = []
    for kind in ("sync", "async"):
        clock = Clock(FRONT_START)
        namespace = ("agree", uuid.uuid4().hex[:12])
        front = make_front(kind, namespace, clock=clock)
        runs.append(transcript(await SCENARIOS[name](front, clock), namespace))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("cls", [Items, Checkpoints, TaskLog], ids=lambda c: c.__name__)
def test_every_operation_is_exercised_here(cls: type) -> None:
    """A new public method fails this until a scenario above calls it (its async twin's
    signature is checked by ``test_core_api.test_both_front_ends_offer_the_same_operations``)."""
    called = set(re.findall(r"(?:store|log)\.(\w+)\(", Path(__file__).read_text(encoding="utf-8")))
    public = {n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}
    assert sorted(public - called - {"close"}) == []
