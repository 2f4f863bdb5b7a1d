"""Reads on a real streaming standby (``HINDSIGHT_READ_DATABASE_URLS``).

The standby is a ``pg_basebackup`` copy of the session's embedded server, streaming
over its unix socket (``_replica_util.Standby``). Pausing its WAL replay
(``pg_wal_replay_pause()``) makes it stale on purpose: a read that returns the old
state proves it was served by the replica, and read-your-writes must then fall back
to the primary. Every wait polls with a deadline; the standby is always removed.

Internals: ``storage.replicas``' router, its policy driven step by step without a
database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from _replica_util import Standby, wait_for

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.errors import ConfigurationError
from hindsight_core.items import Items


@pytest.fixture(scope="module")
def standby(database_url: str) -> Iterator[Standby]:
    replica = Standby(database_url)
    try:
        replica.create()
        replica.start()
        wait_for(replica.caught_up, "the standby to catch up")
        yield replica
    finally:
        replica.destroy()


def _settings(database_url: str, standby: Standby, **extra: object) -> Settings:
    options: dict[str, object] = {
        "read_database_urls": standby.url,
        "read_your_writes_timeout": 30.0,
        "replica_max_lag": 600.0,
        "replica_check_interval": 0.0,
    }
    options.update(extra)
    return Settings(database_url=database_url, **options)


def _record(lesson: str) -> dict[str, object]:
    return {"scene": "replica-test", "trigger": f"when {lesson}", "lesson": lesson}


def test_bad_replica_url_names_the_setting(database_url: str, embedder, namespace) -> None:
    bad = Settings(database_url=database_url, read_database_urls="mysql://x@y/z")
    with (
        Memory(namespace, settings=bad, embedder=embedder) as mem,
        pytest.raises(ConfigurationError, match="HINDSIGHT_READ_DATABASE_URLS"),
    ):
        mem.search("deleting old files")
    blank = Settings(database_url=database_url, read_database_urls=" , ")
    with Memory(namespace, settings=blank, embedder=embedder) as mem:
        assert mem.search("deleting old files") == []
        assert mem.stats().reads == {}  # no replica: nothing routed


def test_reads_served_by_the_replica_and_read_your_writes(
    database_url: str, standby: Standby, embedder, namespace
) -> None:
    writer = Memory(namespace, settings=_settings(database_url, standby), embedder=embedder)
    reader = Memory(namespace, settings=_settings(database_url, standby), embedder=embedder)
    hasty = Memory(
        namespace,
        settings=_settings(database_url, standby, read_your_writes_timeout=0.2),
        embedder=embedder,
    )
    try:
        first = writer.write(_record("Pin the base image digest"))
        assert writer.get(first.id).lesson == "Pin the base image digest"  # waited, replica
        assert writer.stats(namespace=namespace).reads["replica"] >= 1
        with _paused(standby):
            second = hasty.write(_record("Rotate the API keys monthly"))
            # The reader never wrote: the (stale) replica serves it, without the new record.
            ids = {r.id for r in reader.list_records()}
            assert first.id in ids and second.id not in ids
            assert reader.stats().reads["replica"] >= 1
            # The writer must see its own write: the replica cannot replay it while
            # paused, so after read_your_writes_timeout the primary answers.
            before = hasty.stats().reads
            assert second.id in {r.id for r in hasty.list_records()}
            hits = hasty.search("rotate api keys")
            assert hits and hits[0].record.id == second.id
            after = hasty.stats().reads
            assert after["skipped_lag"] >= before["skipped_lag"] + 2
            assert after["primary"] >= before["primary"] + 2
            # A reader with no lag allowed skips the replica, which now has received
            # WAL it has not replayed: the primary serves it, up to date.
            wait_for(
                lambda: standby.sql("SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()"),
                "the standby to receive the paused write",
            )
            strict = Memory(
                namespace,
                settings=_settings(database_url, standby, replica_max_lag=0.0),
                embedder=embedder,
            )
            try:
                assert second.id in {r.id for r in strict.list_records()}
                reads = strict.stats().reads
                assert reads["skipped_lag"] == 1 and reads["replica"] == 0
                assert reads["max_lag_seconds"] > 0
            finally:
                strict.close()
        # Replay resumed: the reader sees the record once the replica has it.
        wait_for(
            lambda: second.id in {r.id for r in reader.list_records()},
            "the replica to replay the second write",
        )
        assert reader.stats().reads["primary"] == 0
    finally:
        writer.close()
        reader.close()
        hasty.close()


async def test_first_reads_on_a_fresh_database_go_to_the_replica(
    fresh_db: str, standby: Standby, embedder, namespace
) -> None:
    """A read sets the memory up on the primary first, then goes to the replica: the
    first read after the first write into an empty database, and a new memory's (a
    new process's) first read. Alone, the session's database was empty too, and these
    reads stayed on the primary; only a record another test wrote hid it."""
    wait_for(standby.caught_up, "the standby to replay the new database")
    replica = sa.make_url(standby.url).set(database=sa.make_url(fresh_db).database)
    settings = _settings(
        fresh_db, standby, read_database_urls=replica.render_as_string(hide_password=False)
    )
    with Memory(namespace, settings=settings, embedder=embedder) as empty:
        # No record yet: not set up (another model may still adopt the database).
        assert empty.list_records() == [] and empty.stats().reads.get("replica", 0) == 0
    with Memory(namespace, settings=settings, embedder=embedder) as writer:
        first = writer.write(_record("Pin the base image digest"))
        assert writer.get(first.id).id == first.id
        Items(writer).put(("replica", "fresh"), "k", {"v": 1})
        assert writer.stats().reads["replica"] == 1
    with Memory(namespace, settings=settings, embedder=embedder) as reader:
        assert Items(reader).get(("replica", "fresh"), "k").value == {"v": 1}
        assert reader.stats().reads["replica"] == 1
    amem = AsyncMemory(namespace, settings=settings, embedder=embedder)
    try:
        assert [r.id for r in await amem.list_records()] == [first.id]
        reads = (await amem.stats()).reads
        assert reads["replica"] == 1 and reads["primary"] == 0
    finally:
        await amem.aclose()


class _paused:
    """``with _paused(standby):`` pauses WAL replay for the block."""

    def __init__(self, standby: Standby) -> None:
        self.standby = standby

    def __enter__(self) -> None:
        self.standby.sql("SELECT pg_wal_replay_pause()")

    def __exit__(self, *exc: object) -> None:
        self.standby.sql("SELECT pg_wal_replay_resume()")


def test_replica_down_mid_run_then_back(
    database_url: str, standby: Standby, embedder, namespace
) -> None:
    settings = _settings(database_url, standby, replica_retry_interval=0.0, connect_timeout=2)
    mem = Memory(namespace, settings=settings, embedder=embedder)
    written: list[uuid.UUID] = []

    def step(i: int) -> None:
        written.append(mem.write(_record(f"Lesson number {i} about replicas")).id)
        # Nothing lost: every record written so far is there, wherever reads go.
        assert {r.id for r in mem.list_records(limit=100)} >= set(written)
        assert mem.get(written[-1]).id == written[-1]

    try:
        for i in range(3):
            step(i)
        on_replica = mem.stats().reads["replica"]
        assert on_replica >= 6
        standby.stop("fast")
        for i in range(3, 6):
            step(i)
        reads = mem.stats().reads
        assert reads["skipped_down"] >= 6 and reads["primary"] >= 6
        assert reads["replica"] == on_replica
        standby.start()
        i = 6

        def used_again() -> bool:
            nonlocal i
            step(i)
            i += 1
            return mem.stats().reads["replica"] > on_replica

        wait_for(used_again, "the restarted replica to serve reads again")
        assert len({r.id for r in mem.list_records(limit=100)}) == len(written)
    finally:
        mem.close()
        if not standby.running():
            standby.start()


async def test_async_memory_store_and_checkpoints_on_the_replica(
    database_url: str, standby: Standby, embedder, namespace
) -> None:
    from hindsight_core.checkpoints import AsyncCheckpoints, Checkpoints

    settings = _settings(database_url, standby)
    amem = AsyncMemory(namespace, settings=settings, embedder=embedder)
    mem = Memory(namespace, settings=settings, embedder=embedder)
    try:
        res = await amem.write(_record("Cache the wheel downloads"))
        assert (await amem.get(res.id)).id == res.id
        hits = await amem.search("wheel cache")
        assert hits and hits[0].record.id == res.id
        assert (await amem.stats()).reads["replica"] >= 2

        items = Items(mem)
        items.put(("replica", namespace[1]), "k", {"v": 1})
        assert items.get(("replica", namespace[1]), "k").value == {"v": 1}
        cps = Checkpoints(mem)
        cps.put("t-" + namespace[1], "", "c1", None, {"v": 1, "id": "c1"}, {})
        assert cps.get("t-" + namespace[1]).checkpoint_id == "c1"
        assert mem.stats().reads["replica"] >= 2

        acps = AsyncCheckpoints(amem)
        await acps.put("a-" + namespace[1], "", "c2", None, {"v": 2, "id": "c2"}, {})
        assert (await acps.get("a-" + namespace[1])).checkpoint_id == "c2"
        assert (await amem.stats()).reads["replica"] >= 3
        assert (await amem.stats()).reads["primary"] == 0
    finally:
        await amem.aclose()
        mem.close()


def _drive(plan, replies):
    """Drive a router plan: ``replies`` maps a step type to a value or an exception."""
    steps, reply, error = [], None, None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(reply)
        except StopIteration as stop:
            return steps, stop.value
        steps.append(type(step).__name__)
        answer = replies.get(type(step))
        error, reply = (answer, None) if isinstance(answer, BaseException) else (None, answer)


def test_router_policy_failed_read_vs_unreachable_vs_not_a_standby(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from hindsight_core.errors import DatabaseError, DatabaseUnavailableError
    from hindsight_core.storage.replicas import Primary, Probe, Read, ReadRouter, parse_urls

    settings = Settings(replica_retry_interval=60, replica_check_interval=60)
    router = ReadRouter(settings, parse_urls("postgresql://u:secret@replica/db"))
    standby = {"standby": True, "replay": 100, "lag": 0.0}
    # A read that fails on the replica (e.g. a statement timeout): the primary serves
    # it; the replica stays in use.
    steps, result = _drive(
        router.plan("ns"),
        {Probe: standby, Read: DatabaseError("statement timeout"), Primary: "from primary"},
    )
    assert steps == ["Probe", "Read", "Primary"] and result == "from primary"
    steps, result = _drive(router.plan("ns"), {Read: "from replica"})
    assert steps == ["Read"] and result == "from replica"  # probed < 60 s ago: no probe
    # A write past the replica's replay position: probe again, wait, then read there.
    router.note_write("ns", 150)
    steps, result = _drive(router.plan("other-ns"), {Read: "other"})
    assert steps == ["Read"]  # another namespace's reads do not wait for it
    replay = iter([100, 120, 150])
    plan = router.plan("ns")
    steps = [type(plan.send(None)).__name__]
    while steps[-1] != "Read":
        reply = (
            {"standby": True, "replay": next(replay), "lag": 0.0} if steps[-1] == "Probe" else None
        )
        steps.append(type(plan.send(reply)).__name__)
    assert steps == ["Probe", "Pause", "Probe", "Pause", "Probe", "Read"]
    with pytest.raises(StopIteration):
        plan.send("the read's rows")
    # Unreachable: marked down, so the next read goes straight to the primary.
    router.note_write("ns", 10**9)
    steps, _ = _drive(router.plan("ns"), {Probe: DatabaseUnavailableError("refused"), Primary: "p"})
    assert steps == ["Probe", "Primary"]
    steps, _ = _drive(router.plan("ns"), {Primary: "p"})
    assert steps == ["Primary"]
    counts = router.counts()
    assert counts["failed"] == 1 and counts["skipped_down"] == 1
    assert counts["no_replica"] == 1 and counts["replica"] == 3 and counts["waited"] == 1
    # A server that is not a standby is another database: never read there.
    other = ReadRouter(settings, parse_urls("postgresql://u@promoted/db"))
    steps, _ = _drive(
        other.plan(None), {Probe: {"standby": False, "replay": None, "lag": 0}, Primary: "p"}
    )
    assert steps == ["Probe", "Primary"] and other.counts()["skipped_down"] == 1
    # logs name the replica, never with its password
    logged = [r.getMessage() for r in caplog.records]
    assert any("replica postgresql+psycopg://u:***@replica/db skipped" in m for m in logged)
    assert not any("secret" in m for m in logged), logged


def test_langgraph_store_and_checkpointer_read_on_the_replica(
    database_url: str, standby: Standby, embedder, namespace
) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from hindsight_adapters.langgraph import HindsightCheckpointer, HindsightStore

    mem = Memory(namespace, settings=_settings(database_url, standby), embedder=embedder)
    try:
        store = HindsightStore(memory=mem)
        store.put(("lg", namespace[1]), "prefs", {"text": "short answers"})
        assert store.get(("lg", namespace[1]), "prefs").value == {"text": "short answers"}
        saver = HindsightCheckpointer(mem)
        config = {"configurable": {"thread_id": f"lg-{namespace[1]}", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        saver.put(config, checkpoint, {"step": 1}, {})
        assert saver.get_tuple(config).checkpoint["id"] == checkpoint["id"]
        reads = mem.stats().reads
        assert reads["replica"] >= 2 and reads["primary"] == 0
    finally:
        mem.close()


async def test_mcp_server_reads_on_the_replica(
    database_url: str, standby: Standby, tmp_path
) -> None:
    import secrets

    from _mcp_util import SIGTERM_EXIT, free_port, http_client, start_cli, stop, wait_healthy

    token = secrets.token_urlsafe(16)
    app = f"hs-mcp-{uuid.uuid4().hex[:8]}"  # names the server's connections to the standby
    port = free_port()
    log = tmp_path / "server.log"
    proc = start_cli(
        ["mcp", "--http", "--port", str(port)],
        {
            "HINDSIGHT_MCP_TOKENS": f"{token}=replica/{uuid.uuid4().hex[:8]}",
            "HINDSIGHT_READ_DATABASE_URLS": f"{standby.url}&application_name={app}",
            "HINDSIGHT_READ_YOUR_WRITES_TIMEOUT": "30",
        },
        log,
    )
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}", log, timeout=180)
        async with http_client(f"http://127.0.0.1:{port}/mcp", token) as client:
            wrote = await client.call_tool(
                "write_memory",
                {
                    "scene": "ci",
                    "trigger": "a flaky test",
                    "action": "reran it",
                    "outcome": "passed",
                    "lesson": "Quarantine flaky tests at once",
                },
            )
            for _ in range(3):  # the token reads its own write
                found = await client.call_tool("search_memory", {"query": "flaky tests"})
                assert (
                    found.structured_content["results"][0]["id"] == wrote.structured_content["id"]
                )
            # ... on the replica: the server ran there a statement that is not one of the
            # router's probes, which only a routed read does (recall's search, on a warm
            # connection that the probe before it used too: its last statement).
            last = standby.sql(
                f"SELECT array_agg(query) FROM pg_stat_activity WHERE application_name = '{app}'"
            )
            assert last and any("pg_last_wal_replay_lsn" not in q for q in last), last
    finally:
        code = stop(proc)
    assert code == SIGTERM_EXIT and "Traceback" not in log.read_text(), log.read_text()
