"""HindsightStore's async calls gathered in one event-loop tick (LangGraph's batch shape).

The calls of a tick run as one batch (``_store_util.Coalescer``): identical reads once,
results handed back a chunk per tick, namespace checks remembered per namespace. These
tests check that each caller still gets its own result and error, and that a check
remembered for one namespace never lets another one through. (The speed of the shape
is measured in ``bench/bench_store_async_batches.py``, not here.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp

from hindsight_adapters.langgraph import HindsightStore
from hindsight_core import Memory, Settings
from hindsight_core.errors import ValidationError
from hindsight_core.items import Items


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[HindsightStore]:
    s = HindsightStore(settings=settings)
    yield s
    await s.aclose()


@pytest.fixture
def ns() -> tuple[str, str]:
    return ("gathered", uuid.uuid4().hex[:8])


async def test_each_of_many_gathered_callers_gets_its_own_result(
    store: HindsightStore, ns: tuple[str, str]
) -> None:
    n = 350  # more than one chunk of results (RESOLVE_CHUNK)
    await asyncio.gather(*(store.aput(ns, f"k{i}", {"i": i}) for i in range(n)))
    calls = []
    for i in range(n):
        calls += [store.aget(ns, f"k{i}"), store.aget(ns, f"k{n - 1 - i}")]
    calls += [store.asearch(ns, limit=5), store.alist_namespaces(prefix=ns)]
    *items, hits, listed = await asyncio.gather(*calls)
    for i in range(n):
        assert items[2 * i].value == {"i": i} and items[2 * i + 1].value == {"i": n - 1 - i}
    assert len(hits) == 5 and listed == [ns]
    assert await store.aget(ns, "missing") is None


async def test_an_op_list_and_single_calls_in_one_tick_keep_their_places(
    store: HindsightStore, ns: tuple[str, str]
) -> None:
    await store.aput(ns, "a", {"v": 1})
    got, listed, one, none = await asyncio.gather(
        store.abatch([GetOp(ns, "a"), PutOp(ns, "b", {"v": 2}), GetOp(ns, "b")]),
        store.alist_namespaces(prefix=ns),
        store.aget(ns, "a"),
        store.adelete(ns, "a"),
    )
    assert [r.value if r else r for r in got] == [{"v": 1}, None, None]  # reads before puts
    assert listed == [ns] and one is not None and one.value == {"v": 1} and none is None
    assert await store.aget(ns, "a") is None and (await store.aget(ns, "b")).value == {"v": 2}


async def test_a_remembered_namespace_check_lets_no_other_namespace_through(
    store: HindsightStore, ns: tuple[str, str]
) -> None:
    await store.aput(ns, "k", {"v": 1})
    for bad in [(*ns, "x.y"), (*ns, ""), (ns[0], 1), ()]:
        with pytest.raises(InvalidNamespaceError):
            await store.aput(bad, "k", {"v": 1})  # type: ignore[arg-type]
    # A get may read under the reserved root, a put may not: two checks, remembered apart.
    assert await store.aget(("langgraph", "x"), "k") is None
    with pytest.raises(InvalidNamespaceError):
        await store.aput(("langgraph", "x"), "k", {"v": 1})
    # A list is checked each time: it may have changed since.
    labels = [ns[0], ns[1]]
    await store.aput(labels, "k", {"v": 2})  # type: ignore[arg-type]
    labels[1] = "x.y"
    with pytest.raises(InvalidNamespaceError):
        await store.aput(labels, "k", {"v": 3})  # type: ignore[arg-type]
    assert (await store.aget(ns, "k")).value == {"v": 2}


async def test_a_bad_value_fails_its_caller_alone_naming_the_field(
    store: HindsightStore, ns: tuple[str, str]
) -> None:
    circular: dict[str, object] = {}
    circular["self"] = circular
    results = await asyncio.gather(
        *(store.aput(ns, f"k{i}", {"i": i}) for i in range(20)),
        store.aput(ns, "circular", circular),
        store.aput(ns, "object", {"o": object()}),
        return_exceptions=True,
    )
    for bad in results[-2:]:
        assert isinstance(bad, ValidationError) and bad.field == "value"
    assert "Circular reference" in str(results[-2])
    assert results[:-2] == [None] * 20
    assert await store.aget(ns, "circular") is None and await store.aget(ns, "object") is None
    assert len(await store.asearch(ns, limit=50)) == 20


def test_core_namespace_checks_remembered_per_namespace(settings: Settings) -> None:
    memory = Memory(settings=settings)
    items = Items(memory)
    ns = ("core", uuid.uuid4().hex[:8])
    try:
        items.put(ns, "k", {"v": 1})
        for bad, field in [((*ns, ""), "namespace"), ((*ns, "a\x1fb"), "namespace")]:
            with pytest.raises(ValidationError) as exc:
                items.put(bad, "k", {"v": 1})
            assert exc.value.field == field
        labels = list(ns)
        items.put(labels, "j", {"v": 1})  # type: ignore[arg-type]
        labels.append("")
        with pytest.raises(ValidationError):
            items.put(labels, "j", {"v": 2})  # type: ignore[arg-type]
        with pytest.raises(ValidationError) as exc:
            items.put(ns, "bad", {"x": float("nan")})
        assert exc.value.field == "value" and items.get(ns, "bad") is None
        assert [i.value for i in (items.get(ns, "k"), items.get(ns, "j"))] == [{"v": 1}, {"v": 1}]
    finally:
        items.close()
        memory.close()
