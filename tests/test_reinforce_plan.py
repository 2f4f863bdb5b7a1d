"""Reflection's reinforcement, decided without a database: which candidate repeats
which recalled record (``reinforce.repeats``) and what each record gains
(``reinforce.reinforced``). Pure functions, tested on purpose as internals; the flow
around them (locks, the records still live) is tested on the database in
``test_reflection.py`` and ``test_lock_order.py``."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable

from hindsight_core.reflection.reinforce import reinforced, repeats

A, B = uuid.UUID(int=1), uuid.UUID(int=2)
LIVE = [{"id": A, "lesson": "Check the extension first"}, {"id": B, "lesson": "Back up first"}]


def _at(degrees: float) -> list[float]:
    """A unit vector at ``degrees`` in the plane (cosines are easy to read off)."""
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def _same(threshold: float) -> Callable[[str, str, float], bool]:
    """A dedup rule without a veto: the threshold alone."""
    return lambda a, b, sim: sim >= threshold


def test_a_candidate_repeats_its_most_similar_record_at_the_threshold() -> None:
    # candidate 0 is 5° from A (cos .996) and 40° from B; candidate 1 is 50° from both.
    vectors = [_at(5), _at(45), _at(0), _at(95)]
    found = repeats(["c0", "c1"], LIVE, vectors, _same(0.95), 0.95)
    assert list(found) == [0]
    assert (found[0].id, found[0].status, found[0].similarity) == (A, "merged", 0.9962)


def test_a_veto_on_the_nearest_record_falls_through_to_the_next_one() -> None:
    # A is the nearest (cos .996) but the rule vetoes it; B is next (cos .985).
    vectors = [_at(5), _at(0), _at(15)]
    rule = lambda a, b, sim: sim >= 0.95 and not b.startswith("Check")  # noqa: E731
    found = repeats(["c0"], LIVE, vectors, rule, 0.95)
    assert found[0].id == B and found[0].similarity == 0.9848


def test_nothing_below_the_threshold_is_looked_at() -> None:
    vectors = [_at(30), _at(0), _at(90)]  # cos .866 to A: under .95
    calls: list[float] = []

    def rule(a: str, b: str, sim: float) -> bool:
        calls.append(round(sim, 3))
        return False

    assert repeats(["c0"], LIVE, vectors, rule, 0.95) == {}
    assert calls == [0.866]  # the nearest asked, then the walk stops under the threshold


def test_a_record_repeated_twice_gains_two_and_each_new_scene_once() -> None:
    found = repeats(
        ["c0", "c1", "c2"],
        LIVE,
        [_at(1), _at(2), _at(89), _at(0), _at(90)],
        _same(0.95),
        0.95,
    )
    assert {i: r.id for i, r in found.items()} == {0: A, 1: A, 2: B}
    records = [{"scene": "files"}, {"scene": "files"}, {"scene": "git"}]
    assert reinforced(found, records) == {A: (2, ["files"]), B: (1, ["git"])}
    records[1]["scene"] = "shell"
    assert reinforced(found, records) == {A: (2, ["files", "shell"]), B: (1, ["git"])}
