"""Small text helpers shared by the routes and the templates."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any
from urllib.parse import urlencode


def nsq(ns: Sequence[str] | None, **extra: Any) -> str:
    """The query string for a namespace and extra parameters: ``ns=a&ns=b&page=2``.

    Labels are passed one per ``ns`` parameter, so a label may hold any character.
    """
    pairs = [("ns", label) for label in ns or ()]
    pairs += [(k, str(v)) for k, v in extra.items() if v is not None and v != ""]
    return urlencode(pairs)


def show_ns(ns: Sequence[str]) -> str:
    """A namespace for people: ``acme / agent``."""
    return " / ".join(ns)


def fmt_time(value: Any) -> str:
    """A timestamp as ``2026-11-29 12:44 UTC`` (a dash for None)."""
    if value is None:
        return "—"
    return str(value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def fmt_day(value: Any) -> str:
    """A timestamp's date (UTC) as ``2026-11-29`` (a dash for None)."""
    if value is None:
        return "—"
    return str(value.astimezone(UTC).strftime("%Y-%m-%d"))
