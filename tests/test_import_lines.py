"""An import's lines, checked without a database (``memory/export_file.check_import_lines``).

``Memory.import_records`` checks every line before it writes one; these tests give the
check lines directly: how lines are told apart (exported records, new records), grouped
by namespace, counted, and refused or skipped.
"""

from __future__ import annotations

import json

import pytest

from hindsight_core import ImportFormatError
from hindsight_core.memory.export_file import ExportedRecord, ImportLines, check_import_lines
from hindsight_core.models import ExperienceIn

DEFAULT = ("agent", "default")
RID = "8d3f2c1e-8b9a-4a7e-9c1d-2f3e4a5b6c7d"


def _check(
    lines: list[str], *, skip_invalid: bool = False, lesson_max_chars: int = 2000
) -> ImportLines:
    return check_import_lines(
        lines,
        default=DEFAULT,
        lesson_max_chars=lesson_max_chars,
        field_max_chars=4000,
        skip_invalid=skip_invalid,
    )


def _exported(ns: list[str], lesson: str, **extra: object) -> str:
    return json.dumps({"id": RID, "namespace": ns, "trigger": "t", "lesson": lesson, **extra})


def _plain(lesson: str, **extra: object) -> str:
    return json.dumps({"trigger": "t", "lesson": lesson, **extra})


def test_lines_are_grouped_by_kind_and_namespace_in_file_order() -> None:
    lines = [
        _exported(["imp", "b"], "first b", score=0.5, version=2),
        "",
        _plain("new in default"),
        _exported(["imp", "a"], "an a"),
        _plain("new in b", namespace=["imp", "b"]),
        "   ",
        _exported(["imp", "b"], "second b"),
    ]
    checked = _check(lines)
    assert {ns: [r.lesson for r in rs] for ns, rs in checked.restored.items()} == {
        ("imp", "b"): ["first b", "second b"],
        ("imp", "a"): ["an a"],
    }
    first = checked.restored[("imp", "b")][0]
    assert isinstance(first, ExportedRecord) and (first.score, first.version) == (0.5, 2)
    assert str(first.id) == RID and first.namespace == ("imp", "b")
    assert {ns: [r.lesson for r in rs] for ns, rs in checked.plain.items()} == {
        DEFAULT: ["new in default"],
        ("imp", "b"): ["new in b"],
    }
    assert all(type(r) is ExperienceIn for rs in checked.plain.values() for r in rs)
    assert (checked.restoring, checked.total, checked.skipped) == (3, 5, [])


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("{not json", "line 2"),
        ("[1, 2]", "JSON object"),
        (_exported(["imp", "a"], "x", score=-1), "score"),
        (json.dumps({"id": "not-an-id", "namespace": ["a"], "trigger": "t", "lesson": "l"}), "id"),
        (_plain("x", namespace=["a", ""]), "namespace"),
        (_plain(""), "lesson"),
        (_plain("y" * 11), "lesson"),
    ],
)
def test_a_bad_line_is_refused_with_its_number(bad: str, words: str) -> None:
    with pytest.raises(ImportFormatError, match=words) as info:
        _check([_plain("fine"), bad, _plain("never read")], lesson_max_chars=10)
    assert info.value.line == 2
    assert "--skip-invalid" in str(info.value)


def test_skipping_keeps_the_good_lines_and_counts_the_bad() -> None:
    lines = [_exported(["imp", "a"], "good"), "{not json", "", "[]", _plain("also good")]
    checked = _check(lines, skip_invalid=True)
    assert checked.skipped == [2, 4]
    assert (checked.restoring, checked.total) == (1, 2)


def test_no_lines_nothing_to_import() -> None:
    checked = _check(["", "  "])
    assert (checked.restored, checked.plain, checked.skipped, checked.total) == ({}, {}, [], 0)
