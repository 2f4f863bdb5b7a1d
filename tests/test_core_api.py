"""The whole public core API, once through ``Memory`` and once through ``AsyncMemory``.

Each scenario below is one async body run on either front end by the ``api`` fixture
(``tests/_front.py``): it asserts what the calls did, and returns what they returned.
``test_front_ends_agree`` runs every scenario on both front ends and compares those
transcripts, so the two cannot drift apart unnoticed; the last two tests check that
both offer the same operations and that a scenario here calls each of them.

Internals: ``runtime.host``'s protocols, to tell the public operations from the internal
host API.
"""

from __future__ import annotations

import inspect
import io
import json
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _clock import Clock
from _front import Front, Scenario, transcript
from conftest import FRONT_START, MakeFront

from hindsight_core import (
    AsyncMemory,
    ImportFormatError,
    Memory,
    NotFoundError,
    Settings,
    ValidationError,
)
from hindsight_core.checkpoints import AsyncCheckpoints, Checkpoints
from hindsight_core.items import AsyncItems, Items
from hindsight_core.reflection.tasks import AsyncTaskLog, TaskLog
from hindsight_core.runtime import host

FILES = {
    "scene": "files",
    "trigger": "cleaning the downloads folder",
    "lesson": "Check the extension before deleting files",
}
FILES_AGAIN = {**FILES, "lesson": "Check file extensions before deleting files"}
API = {
    "scene": "web",
    "trigger": "calling a flaky API",
    "lesson": "Retry flaky API calls with exponential backoff",
}
API_AGAIN = {**API, "lesson": "Retry flaky API calls using exponential backoff"}
DEPLOY = {
    "scene": "deploy",
    "trigger": "deploying on a Friday",
    "lesson": "Run the full test suite before deploying",
}
TAX = {
    "scene": "tax",
    "trigger": "the yearly tax filing",
    "lesson": "File the tax return in March",
    "critical": True,
}


def ids_of(records: list[Any]) -> list[uuid.UUID]:
    return [getattr(r, "record", r).id for r in records]


async def stored(api: Front) -> list[dict[str, Any]]:
    """Every record of the namespace (archived too) as data, in the order of their
    lessons (not of their ids: those are random, and transcripts are compared)."""
    records = await api.list_records(archived=None, limit=1000)
    return sorted((r.model_dump() for r in records), key=lambda r: (r["lesson"], r["scene"]))


# ------------------------------------------------------------------ scenarios


async def write_and_read(api: Front, clock: Clock) -> list[Any]:
    await api.setup()
    first = await api.write(FILES)
    again = await api.write(FILES_AGAIN)
    assert first.status == "inserted" and first.similarity is None
    assert again.status == "merged" and again.id == first.id and again.similarity >= 0.92
    batch = await api.write_many([API, DEPLOY, API_AGAIN])
    assert [r.status for r in batch] == ["inserted", "inserted", "merged"]
    assert batch[2].id == batch[0].id

    hits = await api.search("remove old installers from the downloads folder")
    assert hits[0].record.id == first.id and hits[0].record.occurrences == 2
    web = await api.search("remove old installers from the downloads folder", scene="web")
    assert ids_of(web) == [batch[0].id]
    recalled = await api.recall("the API sometimes fails")
    assert not recalled.degraded and recalled.hits[0].record.id == batch[0].id

    got = await api.get(first.id)
    assert got.created_at == clock.now and got.scene == "files" and got.occurrences == 2
    listed = await api.list_records()
    assert sorted(ids_of(listed)) == sorted({first.id, batch[0].id, batch[1].id})
    assert ids_of(await api.list_records(scene="deploy")) == [batch[1].id]
    page = await api.list_records(order_by="lesson", limit=1, offset=1)
    assert [r.lesson for r in page] == [sorted(r.lesson for r in listed)[1]]
    assert await api.count_records() == 3
    return [
        first,
        again,
        batch,
        hits,
        web,
        recalled.hits,
        got,
        sorted(listed, key=lambda r: r.lesson),
        page,
    ]


async def feedback_and_curation(api: Front, clock: Clock) -> list[Any]:
    a, b, c = ids_of(await api.write_many([FILES, API, DEPLOY]))
    used = await api.mark_used(a)
    assert used.score == pytest.approx(1.1) and used.use_count == 1
    assert used.last_used_at == clock.now
    down = await api.mark_used(a, helpful=False)
    assert down.score == pytest.approx(1.0) and down.use_count == 2
    assert (await api.set_critical(b)).critical and (await api.get(b)).critical
    assert not (await api.set_critical(b, False)).critical and not (await api.get(b)).critical

    edited = await api.edit(c, lesson="Run the smoke tests before deploying")
    assert edited.lesson == "Run the smoke tests before deploying"  # a new version
    assert edited.supersedes == c and (await api.get(c)).superseded_by == edited.id
    assert ids_of(await api.search("smoke tests before a deploy"))[0] == edited.id  # embedded

    clock.now += timedelta(days=1)
    archived = await api.archive(a)
    assert archived.archived_at == clock.now == (await api.get(a)).archived_at
    assert a not in ids_of(await api.search("clean the downloads folder", top_k=10))
    assert a not in ids_of(await api.list_records())
    assert ids_of(await api.list_records(archived=True)) == [a]
    with pytest.raises(ValidationError, match="already archived") as info:
        await api.archive(a)
    assert info.value.field == "id"
    restored = await api.restore(a)
    assert restored.archived_at is None and restored.decayed_score == pytest.approx(1.0)
    assert a in ids_of(await api.search("clean the downloads folder", top_k=10))

    merged = await api.merge(
        [a, b],
        {
            "scene": "files",
            "trigger": "cleaning up or calling",
            "lesson": "Check the target before acting",
        },
    )
    assert set(merged.merged_from) == {a, b} and set(merged.scenes) == {"files", "web"}
    assert merged.use_count == 2 and merged.occurrences == 2
    for source in (await api.get(a), await api.get(b)):
        assert source.merged_into == merged.id and source.archived_at == clock.now
    assert ids_of(await api.search("check the target", scene="web"))[0] == merged.id

    await api.forget(c)
    with pytest.raises(NotFoundError):
        await api.get(c)
    with pytest.raises(NotFoundError):
        await api.forget(c)
    listed = sorted(ids_of(await api.list_records(archived=None)))
    assert listed == sorted([a, b, merged.id, edited.id])
    return [used, down, edited, archived, restored, merged, await stored(api)]


async def lifecycle(api: Front, clock: Clock) -> list[Any]:
    stale, fresh, critical = ids_of(await api.write_many([FILES, API, TAX]))
    clock.now += timedelta(days=400)  # 0.9 ** (400 / 30) ~ 0.245, under evict_below 0.3
    await api.mark_used(fresh)
    report = await api.maintain(namespace=api.namespace)
    assert report.archived == 1
    assert (await api.get(stale)).archived_at == clock.now
    assert (await api.get(fresh)).archived_at is None
    assert (await api.get(critical)).archived_at is None
    assert (await api.maintain(namespace=api.namespace)).archived == 0
    stats = await api.stats(namespace=api.namespace)
    assert (stats.records, stats.archived) == (2, 1)
    assert stats.embedding_model == api.embedder.model_name

    # export, drop the namespace, import: the same records, lifecycle state included
    buf = io.StringIO()
    assert await api.export(buf) == 3
    lines = buf.getvalue().splitlines()
    before = await stored(api)
    assert (await api.drop_namespace(api.namespace))["records"] == 3
    assert await stored(api) == []
    imported = await api.import_records(lines)
    assert (imported["imported"], imported["already_present"]) == (3, 0)
    assert await stored(api) == before
    assert ids_of(await api.search("retry the flaky API"))[0] == fresh  # vectors too
    again = await api.import_records(lines)
    assert (again["imported"], again["already_present"]) == (0, 3)

    # plain lines are written like write_many (dedup included); a bad line stops it all
    plain = [json.dumps(API_AGAIN), json.dumps(DEPLOY)]
    with pytest.raises(ImportFormatError) as info:
        await api.import_records([*plain, "{not json"])
    assert info.value.line == 3 and await stored(api) == before
    written = await api.import_records(plain)
    assert (written["imported"], written["merged"]) == (1, 1)
    assert (await api.get(fresh)).occurrences == 2
    exported = sorted(map(json.loads, lines), key=lambda r: r["lesson"])
    return [report, stats, exported, imported, again, written, await stored(api)]


async def inspector(api: Front, clock: Clock) -> list[Any]:
    a, b, c = ids_of(await api.write_many([FILES, API, DEPLOY]))
    child = (*api.namespace, "child")
    await api.write(FILES, namespace=child)
    await api.mark_used(a)
    start = clock.now
    clock.now += timedelta(days=2)
    await api.mark_used(a, helpful=False)
    await api.archive(c)

    spaces = await api.namespaces(prefix=api.namespace)
    assert [n.namespace for n in spaces] == [api.namespace, child]
    assert (spaces[0].records, spaces[0].archived, spaces[0].scenes) == (2, 1, 3)
    scenes = {s.scene: (s.records, s.archived) for s in await api.scenes()}
    assert scenes == {"files": (1, 0), "web": (1, 0), "deploy": (0, 1)}
    counts = [
        await api.count_records(),
        await api.count_records(archived=True),
        await api.count_records(archived=None),
        await api.count_records(scene="files"),
        await api.count_records(namespace=child),
    ]
    assert counts == [2, 1, 3, 1, 1]

    activity = {(p.day, p.kind): p.count for p in await api.activity(days=30)}
    assert activity == {
        (start.date(), "used"): 1,
        (clock.now.date(), "unhelpful"): 1,
        (clock.now.date(), "archive"): 1,
    }
    assert [p.kind for p in await api.activity(record_id=b)] == []
    history = await api.events(a)
    assert [(e.kind, e.at) for e in history] == [("unhelpful", clock.now), ("used", start)]

    curve = await api.decay_curve(a, days=400, points=5)
    assert len(curve.points) == 5 and not curve.critical
    assert curve.evict_below == api.settings.evict_below
    # from the last helpful use (unhelpful feedback lowers the score, 1.1 - 0.1, but
    # does not restart the decay clock) until 400 days from now
    assert (curve.points[0].at, curve.points[-1].at) == (start, clock.now + timedelta(days=400))
    assert curve.points[0].score == pytest.approx(1.0)
    assert curve.points[-1].score == pytest.approx(0.9 ** (402 / 30))
    assert curve.evicted_at is not None and curve.now < curve.evicted_at
    return [spaces, scenes, counts, sorted(activity.items()), history, curve]


async def bad_input(api: Front, clock: Clock) -> list[Any]:
    a, _ = ids_of(await api.write_many([FILES, API]))
    before = await stored(api)
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
        ("write", ({**DEPLOY, "confidence": "high"},), {}, "confidence"),
        ("write", ({**DEPLOY, "lesson": "x" * 60},), {}, "lesson"),
        ("write", (DEPLOY,), {"namespace": ()}, "namespace"),
        ("write_many", ([DEPLOY, {**DEPLOY, "trigger": ""}],), {}, "records[1]"),
        ("search", ("deploy",), {"top_k": 0}, "top_k"),
        ("recall", ("deploy",), {"top_k": 1000}, "top_k"),
        ("get", ("not-a-uuid",), {}, "id"),
        ("list_records", (), {"order_by": "password"}, "order_by"),
        ("mark_used", (a,), {"helpful": "yes"}, "helpful"),
        ("edit", (a,), {"lesson": "x" * 60}, "lesson"),
        ("edit", (a,), {"score": 99}, "score"),
        ("merge", ([a, a], DEPLOY), {}, "ids"),
        ("merge", ([a, "nope"], DEPLOY), {}, "ids[1]"),
        ("namespaces", (), {"prefix": ()}, "prefix"),
        ("count_records", (), {"archived": "yes"}, "archived"),
        ("activity", (), {"days": 0}, "days"),
        ("events", (a,), {"limit": 0}, "limit"),
        ("decay_curve", (a,), {"points": 1}, "points"),
    ]
    fields = []
    for method, args, kwargs, field in calls:
        with pytest.raises(ValidationError) as info:
            await getattr(api, method)(*args, **kwargs)
        assert info.value.field == field, (method, kwargs, info.value.field, str(info.value))
        assert field in str(info.value), str(info.value)
        if method == "write_many":
            assert "trigger" in str(info.value), str(info.value)
        fields.append(info.value.field)
    assert await stored(api) == before  # nothing written, nothing changed
    assert await api.events(a) == []  # and no event recorded
    return [fields, before]


async def reindex(api: Front, clock: Clock) -> list[Any]:
    """On a database of its own: reindex reads every namespace."""
    a, b, c = ids_of(await api.write_many([FILES, API, DEPLOY]))
    await api.edit(c, lesson="Run the smoke tests before deploying")
    merged = await api.merge([a, b], {**FILES, "lesson": "Check the target before acting"})
    await api.import_records([json.dumps(TAX)])
    query = "check before deleting downloads"
    before = {h.record.id: h.breakdown.semantic for h in await api.search(query, top_k=10)}
    # every write path embedded the text reindex embeds: nothing is stale
    seen: list[tuple[int, int]] = []
    report = await api.reindex(progress=lambda done, total: seen.append((done, total)))
    # (the edit's new version and the version it superseded: six records)
    assert (report.reembedded, report.skipped) == (0, 6) and seen[-1] == (6, 6)
    forced = await api.reindex(force=True)
    assert (forced.reembedded, forced.skipped) == (6, 0)
    after = {h.record.id: h.breakdown.semantic for h in await api.search(query, top_k=10)}
    assert after == pytest.approx(before, abs=1e-6) and merged.id in after
    stats = await api.stats()
    assert stats.embedding_model == api.embedder.model_name and stats.records == 4
    await api.drop_namespace(api.namespace)  # the next front end starts from the same store
    return [report, forced, sorted(before.values()), stats]


async def versions(api: Front, clock: Clock) -> list[Any]:
    """supersede and history (more in tests/test_versions.py)."""
    old = await api.write(FILES)
    clock.now += timedelta(hours=1)
    new = await api.supersede(
        old.id,
        {**FILES, "lesson": "Check the file type, not the name"},
        reason="renamed files",
        actor="the reviewer",
    )
    assert new.status == "inserted" and new.supersedes == old.id and new.id != old.id
    was = await api.get(old.id)
    assert (was.superseded_by, was.superseded_at, was.superseded_reason) == (
        new.id,
        clock.now,
        "renamed files",
    )
    chain = await api.history(old.id)
    assert ids_of(chain) == ids_of(await api.history(new.id)) == [old.id, new.id]
    assert [r.version for r in chain] == [1, 2] and chain[1].lineage == old.id
    query = "deleting files in the downloads folder"
    assert ids_of(await api.search(query)) == [new.id]
    assert set(ids_of(await api.search(query, include_superseded=True))) == {old.id, new.id}
    return [new, chain]


async def sharing(api: Front, clock: Clock) -> list[Any]:
    """search across namespaces, feedback by whom, locate (more in tests/test_sharing.py)."""
    shared = (*api.namespace, "shared")
    own = await api.write(FILES)
    theirs = await api.write(API, namespace=shared)
    hits = await api.search("retry the API call", namespaces=[api.namespace, shared], top_k=2)
    assert [(h.record.id, h.namespace) for h in hits] == [
        (theirs.id, shared),
        (own.id, api.namespace),
    ]
    assert await api.locate(theirs.id, namespaces=[(*api.namespace, "*")]) == shared
    assert await api.locate(theirs.id, namespaces=[api.namespace]) is None
    clock.now += timedelta(minutes=1)
    await api.mark_used(theirs.id, namespace=shared, by="agent-a")
    await api.mark_used(own.id, helpful=False)
    (given,) = await api.feedback(theirs.id, namespace=shared)
    assert (given.at, given.helpful, given.by) == (clock.now, True, "agent-a")
    (mine,) = await api.feedback(own.id)
    assert not mine.helpful and mine.by == "/".join(api.namespace)
    return [hits, given.helpful, mine.helpful]


SHARED: dict[str, Scenario] = {
    "sharing": sharing,
    "versions": versions,
    "write_and_read": write_and_read,
    "feedback_and_curation": feedback_and_curation,
    "lifecycle": lifecycle,
    "inspector": inspector,
    "bad_input": bad_input,
}


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("scenario", SHARED.values(), ids=SHARED.keys())
async def test_scenario(api: Front, front_clock: Clock, scenario: Scenario) -> None:
    await scenario(api, front_clock)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_reindex(make_front: MakeFront, fresh_db: str, kind: str) -> None:
    clock = Clock(FRONT_START)
    await reindex(
        make_front(kind, ("reindex",), settings=Settings(database_url=fresh_db), clock=clock), clock
    )


@pytest.mark.parametrize("name", [*SHARED, "reindex"])
async def test_front_ends_agree(
    make_front: MakeFront, request: pytest.FixtureRequest, name: str
) -> None:
    """The same calls give the same results (ids and namespace aside) on both."""
    scenario = SHARED.get(name, reindex)
    kwargs = {}
    if name == "reindex":
        kwargs["settings"] = Settings(database_url=request.getfixturevalue("fresh_db"))
    runs = []
    for kind in ("sync", "async"):
        clock = Clock(FRONT_START)
        namespace = ("agree", uuid.uuid4().hex[:12])
        front = make_front(kind, namespace, clock=clock, **kwargs)
        runs.append(transcript(await scenario(front, clock), namespace))
    assert runs[0] == runs[1]


def operations(cls: type) -> dict[str, inspect.Signature]:
    """The public operations of a front end: its public methods but the internal host
    API (``runtime/host.py``) and closing."""
    internal = {
        n for proto in (host.FlowHost, host.AsyncFlowHost, host.RecordContext) for n in dir(proto)
    } | {"close", "aclose"}
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name not in internal
    }


@pytest.mark.parametrize(
    ("sync_cls", "async_cls", "some"),
    [
        (Memory, AsyncMemory, {"write", "search", "export", "reindex", "decay_curve"}),
        (Items, AsyncItems, {"put", "get", "search", "batch", "sweep"}),
        (Checkpoints, AsyncCheckpoints, {"put", "get", "list", "prune", "thread_stats"}),
        (TaskLog, AsyncTaskLog, {"start_task", "log_step", "end_task", "drop_task"}),
    ],
    ids=["memory", "items", "checkpoints", "tasks"],
)
def test_both_front_ends_offer_the_same_operations(
    sync_cls: type, async_cls: type, some: set[str]
) -> None:
    sync, aio = operations(sync_cls), operations(async_cls)
    assert some <= set(sync)
    assert sorted(sync) == sorted(aio)
    for name, signature in sync.items():
        assert list(signature.parameters.values()) == list(aio[name].parameters.values()), name
        assert inspect.iscoroutinefunction(getattr(async_cls, name)), name


def test_every_operation_is_exercised_here() -> None:
    """A new public method of Memory fails this until a scenario above calls it."""
    source = Path(__file__).read_text(encoding="utf-8")
    called = set(re.findall(r"api\.(\w+)\(", source))
    called |= set(re.findall(r'^\s+\("(\w+)", ', source, re.MULTILINE))  # bad_input's calls
    assert sorted(set(operations(Memory)) - called) == []
