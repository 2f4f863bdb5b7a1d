"""HindsightCheckpointer under real LangGraph graphs (sync and async) and its extras."""

from __future__ import annotations

import operator
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph", reason="needs the langgraph extra")

from _lg_checkpoint_util import async_saver, sync_saver
from _pool import checkouts
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from hindsight_adapters.langgraph import HindsightCheckpointer
from hindsight_core import AsyncMemory, Memory, Settings


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    approved: str


@pytest.fixture
def saver(settings: Settings) -> Iterator[HindsightCheckpointer]:
    with sync_saver(settings) as cp:
        yield cp


@pytest.fixture
async def asaver(settings: Settings) -> AsyncIterator[HindsightCheckpointer]:
    async with async_saver(settings) as cp:
        yield cp


def _thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def approval_graph() -> StateGraph:
    def plan(state: State) -> dict[str, Any]:
        return {"log": ["plan"]}

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt("delete 3 files?")
        return {"log": [f"asked:{answer}"], "approved": answer}

    def act(state: State) -> dict[str, Any]:
        return {"log": ["act" if state["approved"] == "yes" else "skip"]}

    g = StateGraph(State)
    g.add_node("plan", plan)
    g.add_node("ask", ask)
    g.add_node("act", act)
    g.add_edge(START, "plan")
    g.add_edge("plan", "ask")
    g.add_edge("ask", "act")
    g.add_edge("act", END)
    return g


def test_interrupt_and_resume(saver: HindsightCheckpointer) -> None:
    graph = approval_graph().compile(checkpointer=saver)
    config = _thread()
    out = graph.invoke({"log": [], "approved": ""}, config)
    assert out["__interrupt__"][0].value == "delete 3 files?"
    state = graph.get_state(config)
    assert state.next == ("ask",)
    assert state.tasks[0].interrupts[0].value == "delete 3 files?"

    out = graph.invoke(Command(resume="yes"), config)
    assert out["log"] == ["plan", "asked:yes", "act"]
    assert graph.get_state(config).next == ()


def test_time_travel_resume_from_old_checkpoint(saver: HindsightCheckpointer) -> None:
    graph = approval_graph().compile(checkpointer=saver)
    config = _thread()
    graph.invoke({"log": [], "approved": ""}, config)
    graph.invoke(Command(resume="no"), config)
    history = list(graph.get_state_history(config))
    assert [h.values.get("log") for h in history][0] == ["plan", "asked:no", "skip"]
    assert len(history) >= 4
    # Newest first, each pointing at its parent.
    ids = [h.config["configurable"]["checkpoint_id"] for h in history]
    assert ids == sorted(ids, reverse=True)
    assert history[0].parent_config["configurable"]["checkpoint_id"] == ids[1]

    # Go back to before the question and take the other branch.
    before = next(h for h in history if h.next == ("plan",))
    out = graph.invoke(None, before.config)
    assert "__interrupt__" in out
    out = graph.invoke(Command(resume="yes"), config)
    assert out["log"] == ["plan", "asked:yes", "act"]
    # The old branch is still in the history; the new one is the latest.
    assert len(list(graph.get_state_history(config))) > len(history)
    # Replaying the waiting checkpoint reuses its stored writes, as InMemorySaver does.
    waiting = next(h for h in history if h.next == ("ask",))
    assert graph.invoke(Command(resume="yes"), waiting.config)["log"][-1] == "skip"
    # update_state forks too.
    graph.update_state(waiting.config, {"log": ["edited"]}, as_node="plan")
    assert graph.get_state(config).values["log"][-1] == "edited"


def test_same_history_as_in_memory_saver(saver: HindsightCheckpointer) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    def history(checkpointer: Any) -> list[tuple[Any, ...]]:
        graph = approval_graph().compile(checkpointer=checkpointer)
        config = _thread()
        graph.invoke({"log": [], "approved": ""}, config)
        graph.invoke(Command(resume="no"), config)
        first = list(graph.get_state_history(config))
        graph.invoke(None, next(h for h in first if h.next == ("plan",)).config)
        graph.invoke(Command(resume="yes"), config)
        return [
            (
                h.values,
                h.next,
                h.metadata["step"],
                h.metadata["source"],
                [(t.name, t.interrupts and t.interrupts[0].value) for t in h.tasks],
            )
            for h in graph.get_state_history(config)
        ]

    assert history(saver) == history(InMemorySaver())


def test_subgraph_state_and_namespaces(saver: HindsightCheckpointer) -> None:
    class Sub(TypedDict):
        log: Annotated[list[str], operator.add]

    def inner(state: Sub) -> dict[str, Any]:
        answer = interrupt("inner question")
        return {"log": [f"inner:{answer}"]}

    sub = StateGraph(Sub)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)

    parent = StateGraph(Sub)
    parent.add_node("child", sub.compile())
    parent.add_node("after", lambda s: {"log": ["after"]})
    parent.add_edge(START, "child")
    parent.add_edge("child", "after")
    parent.add_edge("after", END)
    graph = parent.compile(checkpointer=saver)

    config = _thread()
    graph.invoke({"log": ["start"]}, config)
    state = graph.get_state(config, subgraphs=True)
    sub_state = state.tasks[0].state
    assert sub_state is not None and sub_state.next == ("inner",)
    namespaces = {
        t.config["configurable"]["checkpoint_ns"]
        for t in saver.list({"configurable": {"thread_id": config["configurable"]["thread_id"]}})
    }
    assert "" in namespaces and any(ns.startswith("child:") for ns in namespaces)

    out = graph.invoke(Command(resume="ok"), config)
    # The subgraph returns its whole "log", which the parent's reducer appends.
    assert out["log"] == ["start", "start", "inner:ok", "after"]


def test_put_writes_idempotent_and_special_writes(saver: HindsightCheckpointer) -> None:
    config = saver.put(
        _thread() | {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}},
        _checkpoint({}),
        {"source": "loop", "step": 0},
        {},
    )
    saver.put_writes(config, [("a", 1), ("b", {"x": 1})], "task-1")
    saver.put_writes(config, [("a", 99), ("b", {"x": 99})], "task-1")  # re-sent: no-op
    saver.put_writes(config, [("__error__", "boom")], "task-2")
    saver.put_writes(config, [("__error__", "boom again")], "task-2")  # special: replaced
    writes = saver.get_tuple(config).pending_writes
    assert writes == [
        ("task-1", "a", 1),
        ("task-1", "b", {"x": 1}),
        ("task-2", "__error__", "boom again"),
    ]


def test_thread_operations(saver: HindsightCheckpointer) -> None:
    graph = approval_graph().compile(checkpointer=saver)
    a, b = _thread(), _thread()
    tid_a, tid_b = a["configurable"]["thread_id"], b["configurable"]["thread_id"]
    for config in (a, b):
        graph.invoke(
            {"log": [], "approved": ""}, config | {"metadata": {"run_id": "r1-" + str(id(config))}}
        )
        graph.invoke(
            Command(resume="yes"), config | {"metadata": {"run_id": "r2-" + str(id(config))}}
        )

    target = uuid.uuid4().hex
    saver.copy_thread(tid_a, target)
    copied = graph.get_state({"configurable": {"thread_id": target}})
    assert copied.values == graph.get_state(a).values
    assert len(list(saver.list({"configurable": {"thread_id": target}}))) == len(
        list(saver.list(a))
    )

    saver.prune([tid_a], strategy="keep_latest")
    kept = list(saver.list(a))
    assert len(kept) == 1 and kept[0].parent_config is None
    assert graph.get_state(a).values["log"] == ["plan", "asked:yes", "act"]
    assert len(list(saver.list(b))) > 1  # not listed: untouched

    run_ids = {t.metadata.get("run_id") for t in saver.list(b)}
    first_run = "r1-" + str(id(b))
    assert run_ids == {first_run, "r2-" + str(id(b))}
    saver.delete_for_runs([first_run])
    assert {t.metadata.get("run_id") for t in saver.list(b)} == run_ids - {first_run}

    saver.delete_thread(tid_b)
    assert saver.get_tuple(b) is None and list(saver.list(b)) == []
    assert saver.get_tuple({"configurable": {"thread_id": target}}) is not None
    saver.prune([target], strategy="delete")
    assert saver.get_tuple({"configurable": {"thread_id": target}}) is None
    with pytest.raises(ValueError):
        saver.prune([target], strategy="everything")
    with pytest.raises(TypeError):
        saver.prune(target)  # type: ignore[arg-type]


def test_with_allowlist_copy_shares_storage(saver: HindsightCheckpointer) -> None:
    strict = HindsightCheckpointer(
        saver.checkpoints.memory, serde=JsonPlusSerializer(allowed_msgpack_modules=None)
    )
    clone = strict.with_allowlist([("tests.test_langgraph_checkpointer", "State")])
    assert clone is not strict and clone.serde is not strict.serde
    assert clone.checkpoints is strict.checkpoints  # one pool, shared
    graph = approval_graph().compile(checkpointer=clone)
    config = _thread()
    graph.invoke({"log": [], "approved": ""}, config)
    assert strict.get_tuple(config) is not None  # the original sees what the copy wrote
    assert clone.get_tuple(config).checkpoint["id"] == strict.get_tuple(config).checkpoint["id"]


def test_large_values_are_stored_apart(saver: HindsightCheckpointer) -> None:
    config = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
    big = ["x" * 1000] * 300  # ~300 kB
    v1 = saver.get_next_version(None)
    cfg = saver.put(
        config,
        _checkpoint({"docs": big, "step": 1}, {"docs": v1, "step": v1}),
        {"source": "loop", "step": 1},
        {"docs": v1, "step": v1},
    )
    # The next checkpoint changes only "step": the big value is not written again.
    v2 = saver.get_next_version(v1)
    cfg2 = saver.put(
        cfg,
        _checkpoint({"docs": big, "step": 2}, {"docs": v1, "step": v2}),
        {"source": "loop", "step": 2},
        {"step": v2},
    )
    stats = saver.checkpoints.thread_stats(config["configurable"]["thread_id"])
    assert stats["checkpoints"] == 2 and stats["blobs"] == 1
    assert stats["max_blob_bytes"] > 250_000
    assert stats["max_checkpoint_bytes"] < 5_000  # the row holds only the small values
    values = saver.get_tuple(cfg2).checkpoint["channel_values"]
    assert values == {"docs": big, "step": 2}


def test_next_version_and_construction(settings: Settings) -> None:
    with HindsightCheckpointer.from_conn_string(settings.database_url or "") as cp:
        v = cp.get_next_version(None)
        assert v.split(".")[0] == "1".zfill(32)
        assert cp.get_next_version(v).split(".")[0] == "2".zfill(32)
        assert cp.get_next_version(7).startswith("8".zfill(32))
        assert cp.get_tuple(_thread()) is None
    # No arguments: HINDSIGHT_DATABASE_URL if set (it is, in tests), else embedded.
    default = HindsightCheckpointer()
    try:
        assert default.get_tuple(_thread()) is None
    finally:
        default.close()


async def test_async_graph_interrupt_resume_and_history(asaver: HindsightCheckpointer) -> None:
    graph = approval_graph().compile(checkpointer=asaver)
    config = _thread()
    out = await graph.ainvoke({"log": [], "approved": ""}, config)
    assert "__interrupt__" in out
    out = await graph.ainvoke(Command(resume="yes"), config)
    assert out["log"] == ["plan", "asked:yes", "act"]
    history = [h async for h in graph.aget_state_history(config)]
    before = next(h for h in history if h.next == ("plan",))
    await graph.ainvoke(None, before.config)
    out = await graph.ainvoke(Command(resume="no"), config)
    assert out["log"] == ["plan", "asked:no", "skip"]
    tid = config["configurable"]["thread_id"]
    await asaver.acopy_thread(tid, tid + "-copy")
    copy = await asaver.aget_tuple({"configurable": {"thread_id": tid + "-copy"}})
    assert copy is not None and copy.checkpoint["channel_values"]["log"][-1] == "skip"
    await asaver.aprune([tid], strategy="keep_latest")
    assert len([t async for t in asaver.alist(config)]) == 1
    await asaver.adelete_thread(tid)
    assert await asaver.aget_tuple(config) is None


def _checkpoint(values: dict[str, Any], versions: dict[str, Any] | None = None) -> Any:
    cp = empty_checkpoint()
    cp["id"] = str(uuid6())
    cp["channel_values"] = values
    cp["channel_versions"] = versions or {}
    return cp


def _terminate_idle_checkpoint_connections(database_url: str) -> int:
    """End, server-side, the idle connections whose last statement wrote a checkpoint
    (the checkpointer's warm ones, seen from outside); returns how many."""
    import sqlalchemy as sa

    admin = sa.create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            return len(
                conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                        " AND state = 'idle' AND query ILIKE '%hindsight_checkpoint%'"
                    )
                ).all()
            )
    finally:
        admin.dispose()


def test_warm_connection_recovers_after_server_side_disconnect(
    saver: HindsightCheckpointer, database_url: str
) -> None:

    config = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
    saver.put(config, _checkpoint({"x": 1}), {"source": "input", "step": -1}, {})
    assert _terminate_idle_checkpoint_connections(database_url), (
        "a recently used connection is kept warm"
    )
    # The broken warm connection is dropped and the call retried on a fresh one.
    assert saver.get_tuple(config).checkpoint["channel_values"] == {"x": 1}


def test_warm_connection_serves_the_next_calls(settings: Settings) -> None:
    # One-statement calls run on a warm connection: after the first put, the next
    # writes and reads check no connection out of the pool (no ping, no BEGIN/COMMIT).
    # The cursor kept with it: tests/test_core_driver.py.
    memory = Memory(settings=settings)
    seen = checkouts(memory.engine)
    with HindsightCheckpointer(memory) as saver:
        saver.setup()
        config = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
        meta: Any = {"source": "loop", "step": 0}
        cfg = saver.put(config, _checkpoint({"x": 1}), meta, {})
        n = len(seen)
        cfg = saver.put(cfg, _checkpoint({"x": 2}), meta, {})
        listed = list(saver.list(config))
        assert [t.checkpoint["channel_values"] for t in listed] == [{"x": 2}, {"x": 1}]
        assert saver.get_tuple(cfg).checkpoint["channel_values"] == {"x": 2}
        assert len(seen) == n, "the next writes and reads reuse the warm connection"
    memory.close()


def test_many_channels_and_writes_in_one_call(saver: HindsightCheckpointer) -> None:
    # More rows than fit a VALUES list go through arrays: same results.
    config = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
    values = {f"ch{i}": [i] for i in range(40)}
    versions = {k: saver.get_next_version(None) for k in values}
    cfg = saver.put(config, _checkpoint(values, versions), {"source": "loop", "step": 0}, versions)
    saver.put_writes(cfg, [(f"ch{i}", {"w": i}) for i in range(40)], "task")
    saver.put_writes(cfg, [(f"ch{i}", {"w": -i}) for i in range(40)], "task")  # no-op
    tup = saver.get_tuple(cfg)
    assert tup.checkpoint["channel_values"] == values
    assert tup.pending_writes == [("task", f"ch{i}", {"w": i}) for i in range(40)]


async def test_async_warm_connection_serves_the_next_calls(settings: Settings) -> None:
    memory = AsyncMemory(settings=settings)
    seen = checkouts(await memory.get_engine())
    async with HindsightCheckpointer(memory) as saver:
        await saver.asetup()
        config = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
        meta: Any = {"source": "loop", "step": 0}
        cfg = await saver.aput(config, _checkpoint({"x": 1}), meta, {})
        n = len(seen)
        cfg = await saver.aput(cfg, _checkpoint({"x": 2}), meta, {})
        assert (await saver.aget_tuple(cfg)).checkpoint["channel_values"] == {"x": 2}
        assert (await saver.aget_tuple(cfg)).checkpoint["channel_values"] == {"x": 2}
        assert len(seen) == n
    await memory.aclose()


async def test_async_warm_connection_recovers(
    asaver: HindsightCheckpointer, database_url: str
) -> None:

    config = {"configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}}
    await asaver.aput(config, _checkpoint({"x": 2}), {"source": "input", "step": -1}, {})
    assert _terminate_idle_checkpoint_connections(database_url), "kept warm"
    tup = await asaver.aget_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"] == {"x": 2}
