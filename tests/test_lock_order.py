"""Writers take shared locks in one order, so that concurrent writers cannot deadlock.

Each test holds a lock from a connection of its own, lets a real writer (its own
connection, tagged with an ``application_name``) run into it, and then looks from the
server's side at what the waiting writer holds. A writer that waits for a lock while
holding one that comes later in the order is half of a deadlock: a second writer
taking the two the other way round completes it.

Internals: ``storage.items_sql.SWEEP_CHUNK``, to expire more items than two sweep
chunks.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from _locks import DIM, EMB, hold_namespace
from _locks import in_thread as _in_thread
from _locks import lockable as _lockable
from _locks import wait_until_blocked as _wait_until_blocked
from _pool import tagged

from hindsight_core import Memory, Settings
from hindsight_core.items import ItemIndex, Items, PutItem
from hindsight_core.models import NS_SEPARATOR, ns_key

COUNTER = "SELECT 1 FROM hindsight_keyword_stats WHERE tbl = 'i' AND ns = :ns"


@pytest.mark.parametrize("updated", ["first", "second"])
def test_an_item_batch_takes_the_keyword_counters_in_namespace_order(
    fresh_db: str, admin: sa.Engine, updated: str
) -> None:
    """A batch that changes an item's text in one namespace and adds an item in
    another fires two counter triggers (UPDATE, INSERT), each of which locked its own
    namespaces' BM25 counter rows: across the two, in whichever order they fire. So
    two such batches over the same two namespaces could each hold one counter and
    wait for the other's. The batch now locks every counter it will change up front,
    in namespace order: while it waits for the first, it holds none of the others."""
    run = uuid.uuid4().hex[:8]
    first, second = ("lk", run, "a"), ("lk", run, "b")
    assert ns_key(first) < ns_key(second)
    index = ItemIndex(dims=DIM, fields=("text",))
    setup = Memory(settings=Settings(database_url=fresh_db), embedder=EMB)
    Items(setup, index=index).batch(
        [PutItem(first, "old", {"text": "alpha one"}), PutItem(second, "old", {"text": "beta"})]
    )
    setup.close()
    # One namespace's item changes its text, the other namespace gains an item.
    changed, added = (first, second) if updated == "first" else (second, first)
    # (a text of another length: a change that leaves the counts alone locks nothing)
    text = {"text": "a changed text of five words"}
    batch = [PutItem(changed, "old", text), PutItem(added, "new", {"text": "x"})]

    app = "hs-lock-" + run
    writer = Memory(settings=Settings(database_url=tagged(fresh_db, app)), embedder=EMB)
    items = Items(writer, index=index)
    with admin.connect() as holder:  # holds the first namespace's counter
        holder.execute(sa.text(COUNTER + " FOR UPDATE"), {"ns": ns_key(first)}).all()
        thread, out = _in_thread(lambda: items.batch(batch))
        try:
            _wait_until_blocked(admin, app)
            free = _lockable(admin, COUNTER, {"ns": ns_key(second)})
        finally:
            holder.rollback()
            thread.join()
    items.close()
    writer.close()
    assert out == [[None, None]], out
    assert free, "the batch held the second namespace's counter while waiting for the first's"


@pytest.mark.parametrize("archiving", ["maintain", "maintain everywhere", "archive"])
def test_archiving_and_a_merging_write_take_the_namespace_in_one_order(
    fresh_db: str, embedder: Any, archiving: str
) -> None:
    """A write locks its namespace, inserts (the namespace's keyword counter, by
    trigger) and then merges (the merged-into record's row); eviction (``maintain``)
    and ``archive`` archived the record (its row) and then, by trigger, took the
    counter: in the other order, so a write merging into a record being archived
    deadlocked with it (SQLSTATE 40P01; one of them failed). Both now take the
    namespace lock first, as writers do."""
    database_url, settings = fresh_db, Settings(database_url=fresh_db)
    ns = ("lk", uuid.uuid4().hex[:8])
    old = {"scene": "files", "trigger": "cleaning downloads", "lesson": "Check the extension"}
    first = Memory(ns, settings=settings, embedder=embedder)
    written = first.write(old)
    first.close()
    app_e, app_w = "hs-evict-" + ns[1], "hs-write-" + ns[1]

    def memory(app: str, **kwargs: Any) -> Memory:
        url = tagged(database_url, app)
        return Memory(ns, settings=settings.model_copy(update={"database_url": url}), **kwargs)

    # Two years on, the record has decayed below evict_below.
    def later() -> datetime:
        return datetime.now(UTC) + timedelta(days=730)

    evictor = memory(app_e, embedder=embedder, clock=later)
    writer = memory(app_w, embedder=embedder)
    admin = sa.create_engine(database_url)
    record = "SELECT 1 FROM hindsight_experiences WHERE ns = :ns AND id = :id"
    try:
        with admin.connect() as holder:  # holds the record: both queue behind it
            holder.execute(
                sa.text(record + " FOR UPDATE"), {"ns": ns_key(ns), "id": written.id}
            ).all()
            evicting, evicted = _in_thread(
                {
                    "maintain": lambda: evictor.maintain(namespace=ns),
                    "maintain everywhere": lambda: evictor.maintain(),
                    "archive": lambda: evictor.archive(written.id),
                }[archiving]
            )
            _wait_until_blocked(admin, app_e)
            writing, wrote = _in_thread(
                lambda: writer.write_many([old, {**old, "lesson": "Keep a backup first"}])
            )
            _wait_until_blocked(admin, app_w)
            holder.rollback()
            evicting.join()
            writing.join()
    finally:
        admin.dispose()
        evictor.close()
        writer.close()
    failed = [r for r in (*evicted, *wrote) if isinstance(r, BaseException)]
    assert not failed, failed
    if archiving.startswith("maintain"):
        assert evicted[0].archived == 1
    else:
        assert evicted[0].archived_at is not None
    # the write came after the eviction: its duplicate found no live record to merge into
    assert [r.status for r in wrote[0]] == ["inserted", "inserted"]


ITEM = "SELECT 1 FROM hindsight_items WHERE ns = :ns AND key = :key"


@pytest.mark.parametrize("sweeper", ["sweep", "maintain"])
def test_the_sweep_takes_the_keys_before_their_rows_as_batches_do(
    fresh_db: str, admin: sa.Engine, sweeper: str
) -> None:
    """A batch locks its keys, then their vectors' rows, then (several namespaces) the
    counters, then the items' rows. The sweep (``Items.sweep``, ``maintain``) took no
    key lock: it locked an expired item's row, then waited for its vector row, which a
    batch putting that key held while it would want the item's row next (a deadlock).
    The sweep now skips the keys a writer holds (their writer decides what they become)
    and touches a row only under its key's lock."""
    run = uuid.uuid4().hex[:8]
    first, second = ("lk", run, "a"), ("lk", run, "b")
    index = ItemIndex(dims=DIM, fields=("text",))
    setup = Memory(settings=Settings(database_url=fresh_db), embedder=EMB)
    Items(setup, index=index).batch(
        [
            PutItem(first, "put again", {"text": "alpha"}, ttl=1),
            PutItem(first, "expired", {"text": "gamma"}, ttl=1),
            PutItem(second, "kept", {"text": "beta"}),
        ]
    )
    setup.close()
    app_w, app_s = "hs-put-" + run, "hs-sweep-" + run
    writer = Memory(settings=Settings(database_url=tagged(fresh_db, app_w)), embedder=EMB)
    puts = Items(writer, index=index)
    sweeper_memory = Memory(  # a day later: both items of the first namespace expired
        settings=Settings(database_url=tagged(fresh_db, app_s)),
        embedder=EMB,
        clock=lambda: datetime.now(UTC) + timedelta(days=1),
    )
    sweeps = Items(sweeper_memory, index=index)
    sweep = {"sweep": sweeps.sweep, "maintain": lambda: sweeper_memory.maintain().expired_items}
    batch = [PutItem(first, "put again", {"text": "alpha again"}), PutItem(second, "new", {})]
    key = {"ns": ns_key(first), "key": "put again"}
    with admin.connect() as holder:  # the batch waits for the second counter, holding the rest
        holder.execute(sa.text(COUNTER + " FOR UPDATE"), {"ns": ns_key(second)}).all()
        putting, put = _in_thread(lambda: puts.batch(batch))
        try:
            _wait_until_blocked(admin, app_w)
            sweeping, swept = _in_thread(sweep[sweeper])
            _wait_until_blocked(admin, app_s)  # for the batch's vector row, or its counter
            free = _lockable(admin, ITEM, key)
        finally:
            holder.rollback()
            putting.join()
            sweeping.join()
    for closing in (puts, sweeps, writer, sweeper_memory):
        closing.close()
    assert free, "the sweep held the row of a key the batch held, waiting for the batch"
    assert put == [[None, None]] and swept == [1], (put, swept)
    check = Memory(settings=Settings(database_url=fresh_db), embedder=EMB)
    found = Items(check, index=index).get(first, "put again")
    check.close()
    assert found is not None and found.value == {"text": "alpha again"}


def test_reinforcing_waits_for_the_namespace_and_skips_a_record_archived_meanwhile(
    fresh_db: str, admin: sa.Engine, embedder: Any
) -> None:
    """Reflection reinforces a recalled record that a candidate repeats. It read the
    record, embedded, and updated it, with no namespace lock: an eviction archiving
    the record (namespace lock, then the row) in between made it add the lesson to an
    archived record, where no search finds it. It now takes the namespace lock after
    embedding, as writes do, and reinforces only the records still live; the lesson
    is then written as a record of its own."""
    from hindsight_core.reflection import Reflector, ScriptedLLM, Step, Trajectory

    ns = ("lk", uuid.uuid4().hex[:8])
    settings = Settings(database_url=fresh_db)
    first = Memory(ns, settings=settings, embedder=embedder)
    shown = first.write(
        {
            "scene": "python-setup",
            "trigger": "pip permission errors",
            "lesson": "Pass --user to pip install without root",
        }
    )
    first.close()
    run = Trajectory(
        goal="Install the requests package",
        outcome="success",
        recalled=[shown.id],
        steps=[
            Step(kind="tool_call", tool="shell", args={"cmd": "pip install requests"}),
            Step(kind="tool_result", tool="shell", content="ERROR: Permission denied"),
            Step(kind="tool_call", tool="shell", args={"cmd": "pip install --user requests"}),
            Step(kind="tool_result", tool="shell", content="Successfully installed requests"),
        ],
    )
    repeat = {
        "trigger": "a brand new trigger text",
        "lesson": "Pass --user to pip install without root.",
        "confidence": 0.9,
        "steps": [2, 3],
    }
    app = "hs-reflect-" + ns[1]
    tagged_settings = settings.model_copy(update={"database_url": tagged(fresh_db, app)})
    memory = Memory(ns, settings=tagged_settings, embedder=embedder)
    reflector = Reflector(memory, ScriptedLLM([json.dumps({"records": [repeat]})]))
    with admin.connect() as holder:  # archives the record as eviction does, uncommitted
        hold_namespace(holder, ns_key(ns))
        holder.execute(
            sa.text(
                "UPDATE hindsight_experiences SET archived_at = now(), updated_at = now()"
                " WHERE ns = :ns AND id = :id"
            ),
            {"ns": ns_key(ns), "id": shown.id},
        )
        thread, out = _in_thread(lambda: reflector.reflect(run))
        try:
            _wait_until_blocked(admin, app)
        finally:
            holder.commit()
            thread.join()
    (result,) = out
    assert not isinstance(result, BaseException), result
    records = {r.id: r for r in memory.list_records(archived=None)}
    memory.close()
    assert result.reinforced == [], "the lesson went into a record archived meanwhile"
    assert [r.status for r in result.written] == ["inserted"]
    assert records[shown.id].occurrences == 1 and records[shown.id].archived_at is not None
    assert records[result.written[0].id].archived_at is None


def test_the_sweep_deletes_every_expired_item_a_chunk_at_a_time(
    fresh_db: str, admin: sa.Engine
) -> None:
    """The sweep deletes ``SWEEP_CHUNK`` keys per statement (each chunk's key locks are
    slots of the server's lock table) until a chunk comes back short: items over two
    namespaces and more than two chunks are all deleted, and the live ones kept. A key
    whose lock a writer holds is left for a later sweep, without waiting."""
    from hindsight_core.storage.items_sql import SWEEP_CHUNK

    run = uuid.uuid4().hex[:8]
    spaces = [("lk", run, "a"), ("lk", run, "b")]
    expired = 2 * SWEEP_CHUNK + 7
    setup = Memory(settings=Settings(database_url=fresh_db), embedder=EMB)
    items = Items(setup)
    items.batch(
        [PutItem(spaces[i % 2], f"k{i}", {"n": i}, index=False, ttl=1) for i in range(expired)]
        + [PutItem(spaces[0], "live", {"n": -1}, index=False)]
    )
    items.close()
    setup.close()
    later = Memory(
        settings=Settings(database_url=fresh_db),
        embedder=EMB,
        clock=lambda: datetime.now(UTC) + timedelta(days=1),
    )
    sweeps = Items(later)
    with admin.connect() as holder:  # a writer holds one expired key: skipped, not waited for
        holder.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"hindsight:item:{ns_key(spaces[0])}{NS_SEPARATOR}k0"},
        )
        assert later.maintain().expired_items == expired - 1
        holder.rollback()
    assert sweeps.sweep() == 1
    assert sweeps.sweep() == 0
    left = [sweeps.get(spaces[0], "live"), sweeps.get(spaces[1], "k1")]
    sweeps.close()
    later.close()
    assert left[0] is not None and left[1] is None


def test_an_edit_reads_the_record_under_the_namespace_lock(fresh_db: str, admin: sa.Engine) -> None:
    """An edit read the record, embedded, then took the namespace lock and wrote every
    editable field from what it had read: a write merging into the record in between
    (it raises importance, sets critical) was undone. The edit now reads the record
    after taking the lock, as merge does."""
    ns = ("lk", uuid.uuid4().hex[:8])
    settings = Settings(database_url=fresh_db)
    first = Memory(ns, settings=settings, embedder=EMB)
    shown = first.write({"trigger": "t", "lesson": "Check the extension", "importance": 0.2})
    first.close()
    app = "hs-edit-" + ns[1]
    memory = Memory(ns, settings=Settings(database_url=tagged(fresh_db, app)), embedder=EMB)
    memory.list_records()  # set up before the test holds the namespace
    with admin.connect() as holder:  # merges into the record as a write does, uncommitted
        hold_namespace(holder, ns_key(ns))
        holder.execute(
            sa.text(
                "UPDATE hindsight_experiences SET importance = 0.9, critical = true,"
                " occurrences = occurrences + 1 WHERE ns = :ns AND id = :id"
            ),
            {"ns": ns_key(ns), "id": shown.id},
        )
        thread, out = _in_thread(lambda: memory.edit(shown.id, lesson="Check the file type"))
        try:
            _wait_until_blocked(admin, app)
        finally:
            holder.commit()
            thread.join()
    (edited,) = out
    memory.close()
    assert not isinstance(edited, BaseException), edited
    assert edited.lesson == "Check the file type"  # a new version, from the merged record
    assert (edited.importance, edited.critical, edited.supersedes) == (0.9, True, shown.id)
