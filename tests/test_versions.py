"""Versions of a lesson (docs/versions.md): supersede, history, recall of current
versions only, dedup into a chain's head, eviction, export / import, and concurrent
superseders, against the real database; ``api`` runs each on both front ends."""

from __future__ import annotations

import io
import re
import threading
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from _clock import Clock
from _docs import run_python_block
from _front import Front
from _locks import EMB, hold_namespace, in_thread, lockable, wait_until_blocked
from _pool import tagged

from hindsight_core import Memory, NotFoundError, Settings, ValidationError
from hindsight_core.memory.versions import typo_only
from hindsight_core.models import ns_key

OLD = {
    "scene": "files",
    "trigger": "cleaning the downloads folder",
    "lesson": "Check the extension before deleting files",
}
NEW = {**OLD, "lesson": "Check the file type, not the extension"}
NEWER = {**OLD, "lesson": "Ask the user before deleting any file"}
QUERY = "deleting files in the downloads folder"


def ids(records: list[Any]) -> list[uuid.UUID]:
    return [getattr(r, "record", r).id for r in records]


@pytest.mark.parametrize(
    ("old", "new", "typo"),
    [
        ("Check the extension", "check the extension.", True),
        ("Chekc the extension", "Check the extension", True),  # two letters swapped
        ("Check the extention", "Check the extension", True),
        ("Increase the timeout", "Decrease the timeout", False),  # opposite terms
        ("Retry 3 times", "Retry 5 times", False),
        ("Check the extension", "Check the file type", False),
        ("Use the cache", "Use the cash", False),  # a short word: could be another word
        ("Do delete logs", "Do not delete logs", False),
        ("先检查扩展名", "先检查文件名", False),
        ("先检查扩展名。", "先检查扩展名", True),
    ],
)
def test_what_an_edit_may_change_in_place(old: str, new: str, typo: bool) -> None:
    assert typo_only(old, new) is typo


async def test_supersede_links_the_versions_and_recall_sees_the_head(
    api: Front, front_clock: Clock
) -> None:
    old = await api.write(OLD)
    front_clock.now += timedelta(minutes=5)
    new = await api.supersede(old.id, NEW, reason="files get renamed", actor="token:reviewer")
    was = await api.get(old.id)
    assert was.superseded_by == new.id and was.superseded_actor == "token:reviewer"
    assert was.superseded_at == front_clock.now and was.superseded_reason == "files get renamed"
    assert was.archived_at is None  # history, not archived: restorable as it is
    head = await api.get(new.id)
    assert (head.version, head.supersedes, head.lineage, head.superseded_by) == (
        2,
        old.id,
        old.id,
        None,
    )
    assert ids(await api.search(QUERY, top_k=10)) == [new.id]
    hits = await api.search(QUERY, top_k=10, include_superseded=True)
    assert set(ids(hits)) == {old.id, new.id}
    # the default actor is the namespace
    newer = await api.supersede(new.id, NEWER)
    assert (await api.get(new.id)).superseded_actor == "/".join(api.namespace)
    chain = await api.history(newer.id)
    assert ids(chain) == [old.id, new.id, newer.id] == ids(await api.history(old.id))
    assert [r.version for r in chain] == [1, 2, 3]
    lone = await api.write({"trigger": "a flaky API", "lesson": "Retry with backoff"})
    assert ids(await api.history(lone.id)) == [lone.id]  # a chain of one


async def test_a_correction_of_the_lesson_alone_keeps_the_rest(api: Front) -> None:
    a = await api.write({**OLD, "action": "deleted *.tmp", "outcome": "failure"})
    b = await api.supersede(a.id, {"lesson": "Check the file type, not the extension"})
    new = await api.get(b.id)
    assert (new.scene, new.trigger, new.action, new.outcome) == (
        OLD["scene"],
        OLD["trigger"],
        "deleted *.tmp",
        "failure",
    )
    with pytest.raises(NotFoundError):
        await api.supersede(uuid.uuid4(), {"lesson": "Anything"})


async def test_an_old_version_is_superseded_at_its_head(api: Front) -> None:
    """Superseding an id another writer superseded already appends to the chain."""
    a = await api.write(OLD)
    b = await api.supersede(a.id, NEW)
    c = await api.supersede(a.id, NEWER, reason="late correction")
    assert c.supersedes == b.id
    assert ids(await api.history(a.id)) == [a.id, b.id, c.id]


async def test_dedup_never_merges_into_an_old_version(api: Front) -> None:
    """A new version as close as a typo fix is inserted, not merged back; the old
    text written again merges into the chain's head (both dedup lookups: the exact
    scan of a small namespace here, the HNSW one in test_dedup_through_the_index)."""
    a = await api.write(OLD)
    fixed = await api.supersede(a.id, {**OLD, "lesson": "Check the extension before deleting"})
    assert fixed.status == "inserted" and fixed.id != a.id
    again = await api.write(OLD)
    assert again.status == "merged" and again.id == fixed.id
    assert (await api.get(fixed.id)).occurrences == 2 and (await api.get(a.id)).occurrences == 1
    batch = await api.write_many([OLD, {"trigger": "t", "lesson": "Something else entirely"}])
    assert batch[0].id == fixed.id


def test_dedup_through_the_index(memory: Memory) -> None:
    """The HNSW lookup (a namespace too large to compare exactly) redirects too."""
    filler = [{"trigger": f"case {i}", "lesson": f"Filler lesson number {i}"} for i in range(60)]
    memory.write_many(filler)
    a = memory.write(OLD)
    b = memory.supersede(a.id, NEW)
    again = memory.write_many([OLD, {"trigger": "z", "lesson": "Yet another lesson"}])
    assert again[0].status == "merged" and again[0].id == b.id


async def test_edit_of_the_text_is_a_new_version_and_a_typo_stays_in_place(api: Front) -> None:
    a = await api.write({**OLD, "importance": 0.7})
    typo = await api.edit(a.id, lesson="Check the extention before deleting files")
    assert typo.id == a.id and typo.version == 1
    edited = await api.edit(a.id, lesson="Check the file type before deleting files")
    assert edited.id != a.id and edited.supersedes == a.id and edited.importance == 0.7
    assert (await api.get(a.id)).superseded_reason == "edited"
    scene = await api.edit(edited.id, scene="cleanup")  # not the text: in place
    assert scene.id == edited.id and scene.scene == "cleanup"


async def test_supersede_refuses_what_it_cannot_do(api: Front) -> None:
    a = await api.write(OLD)
    with pytest.raises(NotFoundError):
        await api.supersede(uuid.uuid4(), NEW)
    with pytest.raises(NotFoundError):
        await api.supersede(a.id, NEW, namespace=("elsewhere", uuid.uuid4().hex[:8]))
    with pytest.raises(ValidationError, match="lesson"):
        await api.supersede(a.id, {**NEW, "lesson": "x" * 80})
    with pytest.raises(ValidationError, match="reason"):
        await api.supersede(a.id, NEW, reason="r" * 5000)
    with pytest.raises(NotFoundError):
        await api.history(uuid.uuid4())
    b = await api.supersede(a.id, NEW)
    other = await api.write({"trigger": "a flaky API", "lesson": "Retry with backoff"})
    with pytest.raises(ValidationError, match="superseded"):
        await api.merge([a.id, other.id], {"trigger": "t", "lesson": "General lesson"})
    assert (await api.merge([b.id, other.id], {"trigger": "t", "lesson": "General"})).merged_from


def test_a_superseded_version_is_not_evicted_on_its_own(
    settings: Settings, embedder: Any, namespace: tuple[str, str]
) -> None:
    clock = Clock()
    with Memory(namespace, settings=settings, embedder=embedder, clock=clock) as mem:
        a = mem.write(OLD)
        b = mem.supersede(a.id, NEW)
        mem.mark_used(a.id)  # an old version keeps its usage history
        assert mem.get(a.id).use_count == 1
        clock.now += timedelta(days=400)  # both decay below the eviction line
        assert mem.maintain(namespace=namespace).archived == 1  # the head only
        assert mem.get(b.id).archived_at is not None and mem.get(a.id).archived_at is None
        assert ids(mem.history(a.id)) == [a.id, b.id]  # the chain keeps its head
        assert mem.search(QUERY, top_k=10) == []  # the old version does not come back
        # a chain whose head is archived counts as archived for dedup: a new record
        fresh = mem.write(OLD)
        assert fresh.status == "inserted" and fresh.id not in (a.id, b.id)
        mem.restore(b.id)
        assert ids(mem.search(QUERY, top_k=10)).count(a.id) == 0


async def test_export_and_import_keep_the_chains(api: Front) -> None:
    a = await api.write(OLD)
    b = await api.supersede(a.id, NEW, reason="renamed files", actor="tok")
    c = await api.supersede(b.id, NEWER)
    await api.write({"trigger": "a flaky API", "lesson": "Retry with backoff"})
    before = [r.model_dump() for r in await api.history(b.id)]
    buf = io.StringIO()
    assert await api.export(buf) == 4
    await api.drop_namespace(api.namespace)
    imported = await api.import_records(buf.getvalue().splitlines())
    assert imported["imported"] == 4
    assert [r.model_dump() for r in await api.history(a.id)] == before
    assert ids(await api.search(QUERY, top_k=10))[0] == c.id
    assert a.id not in ids(await api.search(QUERY, top_k=10))
    assert (await api.write(OLD)).id == c.id  # dedup still finds the head


def test_the_database_refuses_a_fork(memory: Memory, database_url: str) -> None:
    """Two versions can never supersede the same one (unique ``(ns, supersedes)``)."""
    a = memory.write(OLD)
    b = memory.supersede(a.id, NEW)
    c = memory.write({"trigger": "t", "lesson": "An unrelated lesson to link"})
    engine = sa.create_engine(database_url)
    try:
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE hindsight_experiences SET supersedes = :a WHERE ns = :ns AND id = :c"
                ),
                {"a": a.id, "c": c.id, "ns": ns_key(memory.namespace)},
            )
    finally:
        engine.dispose()
    assert ids(memory.history(a.id)) == [a.id, b.id]


@pytest.mark.parametrize("writers", [4])
def test_concurrent_superseders_make_one_chain(fresh_db: str, embedder: Any, writers: int) -> None:
    """Agents superseding one lesson at the same moment, each with its own pool: one
    chain with every version, in some order, never a fork or a lost version."""
    ns = ("race", uuid.uuid4().hex[:8])
    settings = Settings(database_url=fresh_db)
    first = Memory(ns, settings=settings, embedder=embedder)
    root = first.write(OLD)
    mems = [Memory(ns, settings=settings, embedder=embedder) for _ in range(writers)]
    for m in mems:
        m.list_records()  # set up (migrated, model checked) before the race
    barrier = threading.Barrier(writers)
    results: list[Any] = [None] * writers

    def race(k: int) -> None:
        barrier.wait()
        try:
            lesson = {**OLD, "lesson": f"Correction number {k} of the cleanup lesson"}
            results[k] = mems[k].supersede(root.id, lesson, actor=f"agent-{k}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            results[k] = exc

    threads = [threading.Thread(target=race, args=(k,)) for k in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not [r for r in results if isinstance(r, BaseException)], results
        chain = first.history(root.id)
        assert len(chain) == writers + 1 and [r.version for r in chain] == list(
            range(1, writers + 2)
        )
        for before, after in zip(chain, chain[1:], strict=False):
            assert before.superseded_by == after.id and after.supersedes == before.id
        assert [r.superseded_by is None for r in chain].count(True) == 1
        assert {r.supersedes for r in results} == {r.id for r in chain[:-1]}  # each one
        assert ids(first.search(QUERY, top_k=10)).count(chain[-1].id) <= 1
    finally:
        for m in [first, *mems]:
            m.close()


DOC = (Path(__file__).parent.parent / "docs" / "versions.md").read_text(encoding="utf-8")


def test_the_versions_page_runs_and_its_commands_exist(
    fresh_db: str, embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scope = run_python_block("versions.md", fresh_db, embedder, monkeypatch)
    try:
        assert len(scope["everything"]) == 2
    finally:
        scope["mem"].close()

    import importlib

    from hindsight_adapters.cli import COMMAND_MODULES, app

    for name in COMMAND_MODULES:
        importlib.import_module(f"hindsight_adapters.cli.{name}")
    names = {c.name or c.callback.__name__ for c in app.registered_commands}  # type: ignore[union-attr]
    shown = set(re.findall(r"^hindsight ([a-z]+)", DOC, flags=re.M))
    assert shown == {"supersede", "history", "search"} and shown <= names


def test_a_supersede_waits_for_the_namespace_lock_holding_nothing(
    fresh_db: str, admin: sa.Engine
) -> None:
    """Superseding takes the namespace lock before any row (as writes, edits and
    eviction do, tests/test_lock_order*.py): while it waits, the record and the
    namespace's keyword counter stay free, so it cannot close a deadlock with a write
    that holds the lock and merges into the record."""
    ns = ("lk", uuid.uuid4().hex[:8])
    first = Memory(ns, settings=Settings(database_url=fresh_db), embedder=EMB)
    shown = first.write(OLD)
    first.close()
    app = "hs-supersede-" + ns[1]
    memory = Memory(ns, settings=Settings(database_url=tagged(fresh_db, app)), embedder=EMB)
    memory.list_records()  # set up before the test holds the namespace
    key = {"ns": ns_key(ns), "id": shown.id}
    try:
        with admin.connect() as holder:  # a write in the namespace, merging into the record
            hold_namespace(holder, ns_key(ns))
            thread, out = in_thread(lambda: memory.supersede(shown.id, NEW))
            try:
                wait_until_blocked(admin, app)
                record = "SELECT 1 FROM hindsight_experiences WHERE ns = :ns AND id = :id"
                assert lockable(admin, record, key)
                counter = "SELECT 1 FROM hindsight_keyword_stats WHERE tbl = 'e' AND ns = :ns"
                assert lockable(admin, counter, key)
                holder.execute(
                    sa.text(
                        "UPDATE hindsight_experiences SET occurrences = occurrences + 1"
                        " WHERE ns = :ns AND id = :id"
                    ),
                    key,
                )
            finally:
                holder.commit()
                thread.join()
        (done,) = out
        assert not isinstance(done, BaseException), done
        old, new = memory.history(shown.id)
        assert (old.occurrences, new.id, old.superseded_by) == (2, done.id, done.id)
    finally:
        memory.close()
