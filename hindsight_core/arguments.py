"""Checks of plain call arguments, shared by every front end: ids, whole numbers, paging,
and :func:`remember_passed`, which remembers the checks a value passed.

The records' and items' own fields are validated by their models (``models``); these
are the arguments around them (an id to get, a limit and offset to page by). Each
raises :class:`~hindsight_core.errors.ValidationError` naming the argument.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from .errors import ValidationError


def parse_id(value: object, *, field: str = "id") -> uuid.UUID:
    """Parse a record id (UUID, as object or string) or raise naming the field."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value).strip())
    except (ValueError, AttributeError, TypeError):
        raise ValidationError(f"{field} is not a valid record id: {value!r}", field=field) from None


MAX_TOP_K = 100
"""The most results one search returns (here, not in ``memory.inputs``, so that the MCP
server can advertise it without importing the engine)."""

MAX_OFFSET = 2**53
"""Paging past this (an offset no store reaches) is refused rather than sent to
PostgreSQL, where a bigint overflow would read as a database failure."""


def check_int(value: object, field: str, low: int, high: int) -> int:
    """A whole number from ``low`` to ``high`` (not a bool, not a string)."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValidationError(
            f"{field} must be an integer from {low} to {high}, got {value!r}", field=field
        )
    return value


def check_page(
    limit: object, offset: object, *, min_limit: int = 1, max_limit: int = 10_000
) -> tuple[int, int]:
    """The one paging check of every surface: ``limit`` and ``offset`` (at most
    :data:`MAX_OFFSET`)."""
    return check_int(limit, "limit", min_limit, max_limit), check_int(
        offset, "offset", 0, MAX_OFFSET
    )


def unique_ids(ids: Iterable[object], field: str = "ids") -> list[uuid.UUID]:
    """Parse a list of ids, keeping order and dropping repeats."""
    out: dict[uuid.UUID, None] = {}
    for i, value in enumerate(ids):
        out.setdefault(parse_id(value, field=f"{field}[{i}]"), None)
    return list(out)


R = TypeVar("R")


def remember_passed(check: Callable[[Any], R], max_size: int = 4096) -> Callable[[Any], R]:
    """``check`` with its answers remembered for the tuples that passed it.

    For checks of immutable values that give the same answer every time (a namespace's
    labels): 60,000 gathered calls of LangGraph's store test use a handful of
    namespaces, each otherwise checked label by label on every call. Only values
    of type ``tuple`` are remembered (a list could change after its check); an
    unhashable one (a list label) and one that fails are checked every time, so the
    check says what is wrong. At most ``max_size`` answers are kept (then forgotten
    all at once: the namespaces a process uses are few).
    """
    known: dict[Any, R] = {}

    def checked(value: Any) -> R:
        try:
            return known[value]
        except KeyError:
            pass
        except TypeError:  # unhashable: not remembered
            return check(value)
        answer = check(value)
        if type(value) is tuple:
            if len(known) >= max_size:
                known.clear()
            known[value] = answer
        return answer

    return checked
