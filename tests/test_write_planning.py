"""The write path's planning step and parameter builders, without a database.

``memory/write_plan.py`` decides what a batch does (insert, merge into a stored
record, merge into an earlier record of the batch, or keep apart because of the
lexical veto) and builds the statements' parameters; these tests drive it with
hand-made vectors and stored neighbours.
"""

from __future__ import annotations

import json
import struct
import uuid
from datetime import UTC, datetime
from itertools import count

import numpy as np
import pytest

from hindsight_core.dedup_veto import merge_veto
from hindsight_core.memory import write_cosines
from hindsight_core.memory.write_cosines import PairCosines, exact_neighbours
from hindsight_core.memory.write_plan import Planner, plan_write, write_stages
from hindsight_core.memory.write_rows import insert_params, merge_params, record_row
from hindsight_core.models import parse_experience
from hindsight_core.text import CJK_TEXT_SHARE, cjk_share, is_cjk_text

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
THRESHOLD = 0.92


def same_meaning(a: str, b: str, similarity: float) -> bool:
    return similarity >= THRESHOLD and merge_veto(a, b, covered=True) is None


def ids() -> object:
    numbers = count(1)
    return lambda: uuid.UUID(int=next(numbers))


def rec(lesson: str, scene: str = "general", **fields: object):  # type: ignore[no-untyped-def]
    return parse_experience(
        {"lesson": lesson, "trigger": "t", "scene": scene, **fields},
        lesson_max_chars=50,
        field_max_chars=2000,
    )


def plan(records, sims, neighbours=None):  # type: ignore[no-untyped-def]
    return plan_write(
        records,
        neighbours or {},
        np.asarray(sims, dtype=np.float32),
        threshold=THRESHOLD,
        same_meaning=same_meaning,
        new_id=ids(),
    )


def test_duplicates_inside_a_batch_merge_into_the_first() -> None:
    records = [
        rec("Check the extension first"),
        rec("Verify the extension first"),
        rec("Use UTC timestamps"),
    ]
    p = plan(records, [[1, 0.95, 0.1], [0.95, 1, 0.1], [0.1, 0.1, 1]])
    assert [r.status for r in p.results] == ["inserted", "merged", "inserted"]
    assert p.results[1].id == p.results[0].id and p.results[1].similarity == 0.95
    rows = insert_params(p, records, ns="ns", now=NOW, vectors=lambda i: {"embedding": i})
    assert [r["lesson"] for r in rows] == ["Check the extension first", "Use UTC timestamps"]
    assert [(r["occurrences"], r["last_used_at"]) for r in rows] == [(2, NOW), (1, None)]
    assert [r["embedding"] for r in rows] == [0, 2], "each row gets its own record's vector"
    assert merge_params(p, ns="ns", now=NOW) == ([], [])


def test_the_lexical_veto_keeps_opposites_apart() -> None:
    records = [rec("Increase the timeout"), rec("Decrease the timeout")]
    p = plan(records, [[1, 0.99], [0.99, 1]])
    assert [r.status for r in p.results] == ["inserted", "inserted"]
    assert len(set(p.ids.values())) == 2
    near = [{"id": uuid.uuid4(), "lesson": "Increase the timeout", "similarity": 0.99}]
    p = plan(records, [[1, 0.99], [0.99, 1]], {0: near, 1: near})
    assert p.results[0].status == "merged" and p.results[0].id == near[0]["id"]
    assert p.results[1].status == "inserted", "the veto also guards stored records"


def test_a_scene_is_added_to_a_merged_stored_record() -> None:
    target = uuid.uuid4()
    near = [{"id": target, "lesson": "Check the extension first", "similarity": 0.96}]
    records = [
        rec("Verify the extension first", "other-scene", critical=True),
        rec("Check the extension first!", "file-cleanup", importance=0.4),
        rec("Check the extension first", "other-scene", importance=0.7),
    ]
    p = plan(records, np.eye(3), {0: near, 1: near, 2: near})
    assert all(r.id == target and r.status == "merged" for r in p.results)
    assert not p.inserts
    m = p.merges[target]
    assert (m.added, m.critical, m.importance) == (3, True, 0.7)
    assert m.scenes == ["other-scene", "file-cleanup"], "each scene once, in order"
    updates, events = merge_params(p, ns="ns", now=NOW)
    assert updates == [
        {
            "ns": "ns",
            "id": target,
            "now": NOW,
            "added": 3,
            "critical": True,
            "importance": 0.7,
            "scenes": ["other-scene", "file-cleanup"],
        }
    ]
    assert [json.loads(e["detail"]) for e in events] == [{"added": 3}]
    assert events[0]["kind"] == "merged" and events[0]["record_id"] == target


def test_a_scene_is_added_to_a_batch_insert() -> None:
    records = [
        rec("Check the extension first", "a"),
        rec("Verify the extension first", "b"),
        rec("Check the extension first.", "a"),
    ]
    sims = np.full((3, 3), 0.97)
    p = plan(records, sims)
    assert p.inserts == [0]
    assert p.scenes[0] == ["b"], "the insert's own scene is not repeated"
    (row,) = insert_params(p, records, ns="ns", now=NOW, vectors=lambda i: {})
    assert row["scene"] == "a" and row["also_scenes"] == ["b"] and row["occurrences"] == 3


def test_the_more_similar_of_stored_and_batch_wins() -> None:
    stored_id = uuid.uuid4()
    records = [rec("Check the extension first"), rec("Verify the extension first")]
    near = {1: [{"id": stored_id, "lesson": "Check the extension first", "similarity": 0.93}]}
    p = plan(records, [[1, 0.98], [0.98, 1]], near)
    assert p.results[1].id == p.ids[0], "the batch record at .98 beats the stored one at .93"
    near[1][0]["similarity"] = 0.99
    p = plan(records, [[1, 0.98], [0.98, 1]], near)
    assert p.results[1].id == stored_id and stored_id in p.merges
    assert p.absorbed[0] == 0


def test_of_two_equally_similar_batch_records_the_earlier_wins() -> None:
    records = [
        rec("Check the extension first"),
        rec("Verify the extension first"),
        rec("Check the extension first."),
    ]
    sims = [[1, 0.5, 0.95], [0.5, 1, 0.95], [0.95, 0.95, 1]]
    p = plan(records, sims)
    assert p.inserts == [0, 1] and p.results[2].id == p.ids[0]
    sims[2][1] = sims[1][2] = 0.96
    assert plan(records, sims).results[2].id == plan(records, sims).ids[1], "the closer wins"


def test_below_the_threshold_nothing_merges() -> None:
    records = [rec("Check the extension first"), rec("Verify the extension first")]
    near = {1: [{"id": uuid.uuid4(), "lesson": "Check the extension first", "similarity": 0.91}]}
    p = plan(records, [[1, 0.919], [0.919, 1]], near)
    assert [r.status for r in p.results] == ["inserted", "inserted"]


def test_created_at_of_a_record_is_kept() -> None:
    when = datetime(2025, 5, 1, tzinfo=UTC)
    records = [rec("Use UTC timestamps", created_at=when.isoformat())]
    (row,) = insert_params(plan(records, [[1]]), records, ns="ns", now=NOW, vectors=lambda i: {})
    assert (row["created_at"], row["updated_at"]) == (when, NOW)


def test_record_row_state_overrides_the_defaults() -> None:
    r = rec("Use UTC timestamps", "time", source={"agent": "a1"})
    rid = uuid.uuid4()
    row = record_row(
        r,
        ns="ns",
        id=rid,
        vector={"embedding": "[1]", "embed_key": "k"},
        critical=True,
        score=0.5,
        merged_from=[rid],
    )
    assert (row["critical"], row["score"], row["merged_from"]) == (True, 0.5, [rid])
    assert (row["use_count"], row["occurrences"], row["also_scenes"]) == (0, 1, [])
    assert json.loads(row["source"]) == {"agent": "a1"}
    assert row["embed_key"] == "k"
    assert "'utc'" in row["search_tsv"] and "'time'" in row["search_tsv"]


def _blob(vectors: list[list[float]]) -> bytes:
    """Vectors in pgvector's binary form (2-byte dim, 2 unused bytes, big-endian floats)."""
    return b"".join(struct.pack(">hh", len(v), 0) + np.asarray(v, ">f4").tobytes() for v in vectors)


def test_exact_neighbours_keeps_those_at_the_threshold_most_similar_first() -> None:
    a, b, c, d = (uuid.uuid4() for _ in range(4))
    stored = [[1, 0, 0], [0.95, 0.3122, 0], [0, 1, 0], [0, 0, 0]]
    row = {"ids": [a, b, c, d], "lessons": ["A", "B", "C", "D"], "vectors": _blob(stored)}
    matrix = np.asarray([[1, 0, 0], [0, 0, 1]], dtype=np.float32)
    found = exact_neighbours(matrix, row, threshold=THRESHOLD, most=3)
    assert [n["id"] for n in found[0]] == [a, b]
    assert found[0][0]["similarity"] == pytest.approx(1.0)
    assert found[0][1]["similarity"] == pytest.approx(0.95, abs=1e-3)
    assert 1 not in found, "a record with no stored record at the threshold has none"
    assert [n["id"] for n in exact_neighbours(matrix, row, threshold=THRESHOLD, most=1)[0]] == [a]
    empty = {"ids": [], "lessons": [], "vectors": b""}
    assert exact_neighbours(matrix, empty, threshold=THRESHOLD, most=3) == {}


@pytest.mark.parametrize(
    ("n", "stages"),
    [
        (1, [(0, 1)]),
        (100, [(0, 100)]),
        (101, [(0, 100), (100, 101)]),
        (600, [(0, 100), (100, 350), (350, 600)]),
        (601, [(0, 100), (100, 350), (350, 600), (600, 601)]),
    ],
)
def test_write_stages(n: int, stages: list[tuple[int, int]]) -> None:
    assert write_stages(n, 100, 250) == stages


@pytest.mark.parametrize(
    ("text", "cjk"),
    [
        ("用 pandas 读取 CSV 文件", True),
        ("清理下载文件夹", True),
        ("Use the 数据 module for reading", False),
        ("Check the extension", False),
    ],
)
def test_which_text_counts_as_cjk_for_the_dedup_coverage(text: str, cjk: bool) -> None:
    assert is_cjk_text(text) is cjk
    assert (cjk_share(text) > CJK_TEXT_SHARE) is cjk


def test_planning_in_stages_decides_what_planning_at_once_does() -> None:
    """``Planner.plan_stage`` a stage at a time, in ``Planner.order``: the records with
    no other record of the batch at the threshold first (1, 2, 3, 5: each row final at
    once), then the others in batch order (record 4 merges into record 0, whose row
    waits for it). The same results as planning at once, and as the batch in order
    (record 1 merges into a stored record), and the rows built a stage at a time equal
    the rows built at once."""
    records = [
        rec("Check the extension first", "a"),
        rec("Use UTC timestamps"),
        rec("Pin the dependency versions"),
        rec("Quote the SQL parameters"),
        rec("Check the extension first!", "b"),
        rec("Rotate the API token"),
    ]
    sims = np.eye(6, dtype=np.float32)
    sims[0, 4] = sims[4, 0] = 0.97
    stored = uuid.uuid4()
    neighbours = {1: [{"id": stored, "lesson": "Use UTC timestamps", "similarity": 0.99}]}
    at_once = plan(records, sims, neighbours)
    planner = Planner(records, sims, threshold=THRESHOLD, same_meaning=same_meaning, new_id=ids())
    assert planner.order == [1, 2, 3, 5, 0, 4]
    ready = [
        planner.plan_stage(planner.order[lo:hi], neighbours) for lo, hi in ((0, 2), (2, 5), (5, 6))
    ]
    # record 0 waits for record 4 (at the threshold of it), then comes out with it
    assert ready == [[2], [3, 5], [0]]
    staged = planner.plan
    assert staged.results == at_once.results
    statuses = [r.status for r in staged.results]
    assert statuses == ["inserted", "merged", "inserted", "inserted", "merged", "inserted"]
    assert staged.results[4].id == staged.ids[0] and staged.results[1].id == stored
    assert staged.merges == at_once.merges and staged.absorbed == at_once.absorbed
    rows = [
        r
        for stage in ready
        for r in insert_params(staged, records, ns="ns", now=NOW, vectors=lambda i: {}, which=stage)
    ]
    whole = insert_params(at_once, records, ns="ns", now=NOW, vectors=lambda i: {})
    key = lambda r: r["id"]  # noqa: E731
    assert sorted(rows, key=key) == sorted(whole, key=key)
    assert next(r for r in rows if r["id"] == staged.ids[0])["occurrences"] == 2
    assert next(r for r in rows if r["id"] == staged.ids[0])["also_scenes"] == ["b"]


def test_merges_into_a_stored_record_take_the_batch_in_order() -> None:
    """Records planned out of batch order (a linked one after solo ones) merge into a
    stored record as in batch order: its scenes, and the merges' order (rows and
    events), follow the batch."""
    records = [
        rec("Use UTC timestamps", "s0"),
        rec("Use UTC timestamps!", "s1"),
        rec("Use UTC timestamps always", "s2"),
        rec("Rotate the API token", "s3"),
        rec("Rotate the API token now", "s4"),
    ]
    sims = np.eye(5, dtype=np.float32)
    sims[0, 1] = sims[1, 0] = 0.95  # 0 and 1 are linked; 2 is not (0.90 to both)
    sims[0, 2] = sims[2, 0] = sims[1, 2] = sims[2, 1] = 0.90
    a, b = uuid.uuid4(), uuid.uuid4()
    near_a = [{"id": a, "lesson": "Use UTC timestamps", "similarity": 0.99}]
    neighbours = {
        0: near_a,
        1: near_a,
        2: near_a,
        3: [{"id": b, "lesson": "Rotate the API token", "similarity": 0.98}],
    }
    p = plan(records, sims, neighbours)
    planner = Planner(records, sims, threshold=THRESHOLD, same_meaning=same_meaning, new_id=ids())
    assert planner.order == [2, 3, 4, 0, 1]
    assert list(p.merges) == [a, b], "merges in the order of their first batch record"
    assert p.merges[a].scenes == ["s0", "s1", "s2"] and p.merges[a].added == 3
    assert [r.id for r in p.results[:4]] == [a, a, a, b]
    assert p.inserts == [4]


def test_records_are_looked_up_and_inserted_in_a_chain_of_near_neighbours() -> None:
    """``Planner.order`` takes the solo records as a chain of near neighbours (each
    next the most similar left, below the threshold here), so that consecutive HNSW
    inserts and lookups walk one part of the graph; ``chained`` orders any rows so."""
    records = [rec(f"Lesson number {n}") for n in range(5)]
    sims = np.eye(5, dtype=np.float32)
    for a, b, s in ((0, 3, 0.8), (3, 1, 0.7), (1, 4, 0.6), (0, 1, 0.5)):
        sims[a, b] = sims[b, a] = s
    planner = Planner(records, sims, threshold=THRESHOLD, same_meaning=same_meaning, new_id=ids())
    assert planner.order == [0, 3, 1, 4, 2]
    assert planner.chained([4, 2, 1]) == [4, 1, 2]
    assert plan(records, sims).inserts == [0, 1, 2, 3, 4], "the plan keeps batch order"


@pytest.mark.parametrize("paired", [False, True])
def test_merge_from_decides_what_testing_every_linked_pair_does(
    paired: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose records are nearly all linked (e5's crowded cosines above its
    candidate floor): the planner given the merge test's threshold (``merge_from``)
    tests only the pairs at it, and plans exactly what testing every pair does, with
    lesson vectors screened a block of rows at a time (``PairCosines``), repeats too."""
    monkeypatch.setattr(write_cosines, "SCREEN_ROWS", 16)  # blocks taken in turn
    rng = np.random.default_rng(5)
    words = ["timeout", "cache", "index", "token", "schema", "header", "retry", "lock"]
    verbs = ["Check", "Raise", "Pin", "Rotate", "Quote", "Trim"]
    n = 160
    lessons = [f"{verbs[rng.integers(6)]} the {words[rng.integers(8)]} first" for _ in range(n)]
    records = [rec(lesson, f"s{k % 3}") for k, lesson in enumerate(lessons)]
    common = rng.standard_normal(16)

    def crowded(spread: float) -> np.ndarray:
        v = common + spread * rng.standard_normal((n, 16))
        for k in range(1, n, 7):  # some rewordings, near an earlier record
            v[k] = v[k - 1] + 0.02 * rng.standard_normal(16)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    whole, own = crowded(0.3), crowded(0.5)
    sims = whole @ whole.T
    keys = [(lesson.split()[2], "t") for lesson in lessons] if paired else None
    plans = []
    for merge_from in (None, THRESHOLD):
        planner = Planner(
            records,
            sims,
            threshold=0.8,
            same_meaning=same_meaning,
            new_id=ids(),
            keys=keys,
            merge_from=merge_from,
        )
        assert len(planner.linked) > n * 0.9
        planner.decide = PairCosines({i: own[i] for i in planner.linked})
        for lo in range(0, n, 50):
            planner.plan_stage(planner.order[lo : lo + 50], {})
        plans.append(planner.plan)
    every, screened = plans
    assert screened.results == every.results
    assert screened.absorbed == every.absorbed and screened.scenes == every.scenes
    assert sum(r.status == "merged" for r in every.results) >= 10
