"""``arguments.remember_passed``: the one memo of the core's and the LangGraph adapter's
namespace checks. It remembers only tuples that passed, bounded."""

from __future__ import annotations

import pytest

from hindsight_core.arguments import remember_passed
from hindsight_core.errors import ValidationError
from hindsight_core.items.ops import namespace_key


def test_only_tuples_that_passed_are_remembered() -> None:
    calls: list[object] = []

    def check(value: object) -> str:
        calls.append(value)
        if not isinstance(value, tuple | list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"bad {value!r}")
        return "/".join(value)

    checked = remember_passed(check, max_size=2)
    assert checked(("a", "b")) == checked(("a", "b")) == "a/b"
    assert len(calls) == 1  # the second answer was remembered
    assert checked(["a", "b"]) == checked(["a", "b"]) == "a/b"  # a list: checked each time
    assert len(calls) == 3
    for _ in range(2):  # a failure is never remembered: it says what is wrong every time
        with pytest.raises(ValueError, match="bad"):
            checked(("a", 1))
    with pytest.raises(ValueError, match="bad"):  # unhashable: checked, its error comes out
        checked(("a", ["b"]))
    assert len(calls) == 6
    checked(("c",))
    checked(("d",))  # over max_size: forgotten all at once, then remembered again
    checked(("a", "b"))
    assert calls[-3:] == [("c",), ("d",), ("a", "b")]


def test_the_cores_namespace_key_remembers_only_what_passed() -> None:
    """(The LangGraph adapter's checks: ``test_langgraph_store_gathered.py``.)"""
    assert namespace_key(("acme", "agent")) == namespace_key(("acme", "agent"))
    with pytest.raises(ValidationError, match="namespace"):
        namespace_key(("acme", ""))
    with pytest.raises(ValidationError):
        namespace_key(["acme", 3])
