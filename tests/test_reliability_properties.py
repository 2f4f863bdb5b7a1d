"""Bad input at scale: hypothesis over namespaces, scenes, lessons, filters, MCP arguments.

Every call either succeeds (and what is stored is what was validated) or raises
:class:`ValidationError` with a message and the offending field; never another
exception, and a rejected call leaves the database exactly as it was.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.errors import ValidationError
from hindsight_core.models import parse_experience

EXAMPLES = hsettings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
short_text = st.text(max_size=60)
label = st.one_of(st.text(min_size=1, max_size=12), st.text(max_size=250), junk)
good_ns = st.builds(
    lambda s: ("prop", s), st.text(alphabet="abcdef0123456789", min_size=4, max_size=8)
)
bad_ns = st.one_of(
    st.lists(label, max_size=4).map(tuple),
    st.text(max_size=20),
    st.just(("prop", "a\x1fb")),
    st.just(("prop", "nul\x00")),
    st.just(()),
    junk,
)


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` three times in four (``one_of`` would flatten and weigh by branch count)."""
    return st.sampled_from([0, 1, 2, 3]).flatmap(lambda i: bad if i == 3 else good)


namespaces = mostly(st.one_of(st.none(), good_ns), bad_ns)
numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["0.8", "1", "abc", "", "nan", "-0.1", "1e309"]),
    junk,
)
GOOD = {
    "trigger": st.text(min_size=1, max_size=60).filter(str.strip),
    "lesson": st.text(min_size=1, max_size=50).filter(str.strip),
    "scene": st.text(min_size=1, max_size=40).filter(str.strip),
    "action": short_text,
    "outcome": short_text,
    "confidence": st.one_of(st.floats(0.6, 1), st.sampled_from(["0.8", "1"])),
    "importance": st.one_of(st.floats(0, 1), st.none()),
    "critical": st.booleans(),
    "source": st.fixed_dictionaries(
        {}, optional={"agent": st.text(max_size=20), "task": st.text(max_size=20)}
    ),
    "created_at": st.sampled_from(["2026-01-02T03:04:05Z", "2026-01-02T03:04:05+02:00"]),
}
BAD = {
    "trigger": st.one_of(
        st.just(""), st.just("  "), st.text(min_size=2001, max_size=2100), st.just("x\x00y"), junk
    ),
    "lesson": st.one_of(
        st.just(""),
        st.text(min_size=51, max_size=80).filter(lambda t: len(t.strip()) > 50),
        st.just("nul\x00"),
        junk,
    ),
    "scene": st.one_of(
        st.just(""),
        st.text(min_size=101, max_size=120).filter(lambda t: len(t.strip()) > 100),
        junk,
    ),
    "action": st.one_of(st.just("a\x00"), junk),
    "outcome": st.one_of(st.just("\x00"), junk),
    "confidence": st.one_of(
        st.floats(allow_nan=True).filter(lambda x: not 0 <= x <= 1),
        st.sampled_from(["abc", "", "nan", "-0.1", "1e309"]),
        junk,
    ),
    "importance": st.one_of(st.just(2.5), st.just("high"), st.just(float("inf"))),
    "critical": st.one_of(st.sampled_from(["maybe", "2"]), st.lists(st.integers(), max_size=1)),
    "source": st.one_of(
        st.text(max_size=5),
        st.integers(),
        st.fixed_dictionaries({"agent": st.text(min_size=201, max_size=210)}),
    ),
    "created_at": st.one_of(
        st.sampled_from(["yesterday", "2026-13-45T00:00:00"]), st.integers(-(10**20), -(10**19))
    ),
    "unknown_field": st.integers(),
}


@st.composite
def records(draw: st.DrawFn) -> Any:
    """A valid record, or one with exactly one bad field, or not a record at all."""
    kind = draw(st.sampled_from(["good", "bad", "bad", "junk"]))
    if kind == "junk":
        return draw(junk)
    rec = {k: draw(GOOD[k]) for k in ("trigger", "lesson")}
    for k in draw(
        st.lists(
            st.sampled_from(sorted(set(GOOD) - {"trigger", "lesson"})), unique=True, max_size=4
        )
    ):
        rec[k] = draw(GOOD[k])
    if kind == "bad":
        k = draw(st.sampled_from(sorted(BAD)))
        rec[k] = draw(BAD[k])
    return rec


filters = st.one_of(
    st.none(),
    junk,
    st.dictionaries(
        st.one_of(
            st.sampled_from(
                [
                    "critical",
                    "outcome",
                    "source.agent",
                    "source.task",
                    "source.tool",
                    "lesson",
                    "ns; DROP TABLE x",
                ]
            ),
            st.text(max_size=8),
        ),
        st.one_of(st.booleans(), short_text, junk),
        max_size=3,
    ),
)


@pytest.fixture(scope="module")
def mem(database_url: str, embedder: Any) -> Iterator[Memory]:
    m = Memory(
        ("prop", uuid.uuid4().hex[:8]),
        settings=Settings(database_url=database_url),
        embedder=embedder,
    )
    m.write({"trigger": "seed", "lesson": "Seed lesson so searches have a hit"})
    yield m
    m.close()


STATE = sa.text(
    "SELECT count(*) AS n, COALESCE(sum(occurrences), 0) AS occ, max(updated_at) AS upd, "
    "(SELECT count(*) FROM hindsight_events) AS events FROM hindsight_experiences"
)


def _state(mem: Memory) -> dict[str, Any]:
    with mem.engine.connect() as conn:
        return dict(conn.execute(STATE).mappings().one())


def _check_rejection(exc: ValidationError) -> None:
    assert str(exc).strip(), "empty message"
    assert exc.field, f"no field named: {exc}"
    event(f"rejected: {exc.field.split('.')[0].split('[')[0]}")


@EXAMPLES
@given(record=records(), ns=namespaces)
def test_write_accepts_or_rejects_cleanly(mem: Memory, record: dict[str, Any], ns: Any) -> None:
    before = _state(mem)
    try:
        result = mem.write(record, namespace=ns)
    except ValidationError as exc:
        _check_rejection(exc)
        assert _state(mem) == before, "a rejected write changed the database"
        return
    event(f"accepted: {result.status}")
    stored = mem.get(result.id, namespace=ns)
    if result.status == "inserted":  # stored exactly as validated
        want = parse_experience(
            record,
            lesson_max_chars=mem.settings.lesson_max_chars,
            field_max_chars=mem.settings.field_max_chars,
        )
        for name in ("scene", "trigger", "action", "outcome", "lesson", "critical"):
            assert getattr(stored, name) == getattr(want, name), name
        assert stored.confidence == pytest.approx(want.confidence, rel=1e-6)
    expected_ns = mem.namespace if ns is None else ((ns,) if isinstance(ns, str) else tuple(ns))
    assert stored.namespace == expected_ns


@EXAMPLES
@given(
    query=mostly(
        st.text(min_size=1, max_size=40).filter(str.strip),
        st.one_of(junk, st.just(" " * 3), st.just("a\x00b"), st.just("")),
    ),
    top_k=mostly(
        st.integers(1, 20), st.one_of(st.integers(-3, 150), st.sampled_from(["5", "x", 2.5]), junk)
    ),
    scene=mostly(st.none(), st.one_of(st.text(max_size=10), junk)),
    flt=mostly(
        st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {}, optional={"critical": st.booleans(), "source.agent": st.text(max_size=8)}
            ),
        ),
        filters,
    ),
    ns=namespaces,
)
def test_search_accepts_or_rejects_cleanly(
    mem: Memory, query: Any, top_k: Any, scene: Any, flt: Any, ns: Any
) -> None:
    before = _state(mem)
    try:
        hits = mem.search(query, namespace=ns, scene=scene, top_k=top_k, filters=flt)
    except ValidationError as exc:
        _check_rejection(exc)
        return
    finally:
        assert _state(mem) == before, "search changed the database"
    event("accepted")
    assert len(hits) <= int(top_k)
    for hit in hits:
        assert hit.record.archived_at is None
        assert 0 <= hit.breakdown.semantic <= 1 and 0 <= hit.breakdown.keyword <= 1


@EXAMPLES
@given(
    ids=st.one_of(st.text(max_size=40), junk, st.uuids()),
    helpful=st.one_of(st.booleans(), junk, st.text(max_size=4)),
)
def test_feedback_accepts_or_rejects_cleanly(mem: Memory, ids: Any, helpful: Any) -> None:
    from hindsight_core.errors import NotFoundError

    before = _state(mem)
    try:
        mem.mark_used(ids, helpful=helpful)
    except ValidationError as exc:
        _check_rejection(exc)
    except NotFoundError as exc:
        assert "no record" in str(exc)
    assert _state(mem) == before  # no such record: nothing changed


# ---------------------------------------------------------------------- MCP tool arguments

MCP_GOOD = {
    "search_memory": st.fixed_dictionaries(
        {"query": st.text(min_size=1, max_size=30).filter(str.strip)},
        optional={"top_k": st.integers(1, 10), "scene": GOOD["scene"]},
    ),
    "write_memory": st.fixed_dictionaries(
        {
            "lesson": GOOD["lesson"],
            "trigger": GOOD["trigger"],
            "scene": GOOD["scene"],
            "action": short_text,
            "outcome": short_text,
        },
        optional={"importance": st.floats(0, 1), "critical": st.booleans()},
    ),
    "update_memory_usage": st.fixed_dictionaries(
        {"id": st.uuids().map(str)}, optional={"helpful": st.booleans()}
    ),
    "forget_memory": st.fixed_dictionaries({"id": st.uuids().map(str)}),
}
mcp_bad = st.dictionaries(
    st.sampled_from(
        [
            "query",
            "top_k",
            "scene",
            "lesson",
            "trigger",
            "action",
            "importance",
            "id",
            "helpful",
            "outcome",
            "critical",
            "extra",
        ]
    ),
    st.one_of(short_text, junk, numbers),
    max_size=5,
)
mcp_calls = st.sampled_from(sorted(MCP_GOOD)).flatmap(
    lambda tool: st.tuples(st.just(tool), mostly(MCP_GOOD[tool], mcp_bad))
)


@EXAMPLES
@given(call_args=mcp_calls)
def test_mcp_tools_accept_or_reject_cleanly(
    database_url: str, embedder: Any, call_args: tuple[str, dict[str, Any]]
) -> None:
    tool, args = call_args
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from mcp import Client

    from hindsight_adapters.mcp.server import build_server

    async def call() -> Any:
        amem = AsyncMemory(
            ("prop-mcp", "shared"), settings=Settings(database_url=database_url), embedder=embedder
        )
        try:
            async with Client(build_server(amem)) as client:
                return await client.call_tool(tool, args)
        finally:
            await amem.aclose()

    result = asyncio.run(call())
    text = " ".join(getattr(c, "text", "") for c in result.content)
    event(f"{tool}: {'error' if result.is_error else 'ok'}")
    if result.is_error:
        assert text.strip(), "an error without a message"
        assert "Traceback" not in text and "Internal" not in text, text
