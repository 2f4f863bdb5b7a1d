"""Defensive parsing of model output: JSON in code fences, with chatter around it,
numbers as strings.

Models asked for JSON still wrap it in ```json fences, add "Here is the answer:"
before it or an explanation after it, and write ``"confidence": "0.8"`` or
``"80%"``. This module accepts all of that and raises :class:`ParseError` (with a
message fit to send back to the model) for anything else.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import LLMError

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
_NO_LESSON = re.compile(
    r"^\W*(no new lessons?|none|nothing( new)?( to learn)?|n/a)\W*$", re.IGNORECASE
)
RECORD_KEYS = ("scene", "trigger", "action", "outcome", "lesson", "confidence", "steps", "evidence")


class ParseError(LLMError, ValueError):
    """The model's answer is not the JSON asked for; the message says why."""


def extract_json(text: str) -> Any:
    """The first JSON object or array in ``text`` (fenced or not, trailing text ignored).

    Raises:
        ParseError: no JSON value could be read.
    """
    if not isinstance(text, str) or not text.strip():
        raise ParseError("the answer was empty; expected a JSON object")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    first_error: str | None = None
    for candidate in candidates:
        for start, ch in enumerate(candidate):
            if ch not in "{[":
                continue
            try:
                value, _ = decoder.raw_decode(candidate, start)
                return value
            except json.JSONDecodeError as exc:
                first_error = first_error or f"{exc.msg} at line {exc.lineno} column {exc.colno}"
                # a '[' inside prose may precede the real object: keep looking
                continue
    if first_error:
        raise ParseError(f"the answer is not valid JSON ({first_error})")
    raise ParseError("the answer contains no JSON object")


def flagged_json(text: str, flag: str, true_words: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object of a model's yes/no answer, its ``flag`` made a bool (a small
    model writes ``"true"`` or ``"yes"`` as a string: true when one of ``true_words``).

    Raises:
        ParseError: no JSON object with ``flag`` in the answer.
    """
    data = extract_json(text)
    if not isinstance(data, dict) or flag not in data:
        raise ParseError(f'expected {{"{flag}": true|false, ...}}')
    said = data[flag]
    data[flag] = said.strip().lower() in true_words if isinstance(said, str) else bool(said)
    return data


def coerce_number(value: Any, field: str) -> float:
    """A number from ``0.8``, ``"0.8"``, ``"80%"`` or ``80`` (read as a percentage).

    Raises:
        ParseError: the value is not a number in 0..1 (or 0..100 as a percentage).
    """
    original = value
    if isinstance(value, bool):
        raise ParseError(f"{field} must be a number from 0 to 1, got {original!r}")
    percent = False
    if isinstance(value, str):
        text = value.strip()
        percent = text.endswith("%")
        try:
            value = float(text.rstrip("%").strip())
        except ValueError:
            raise ParseError(f"{field} must be a number from 0 to 1, got {original!r}") from None
    if not isinstance(value, int | float) or value != value:  # NaN
        raise ParseError(f"{field} must be a number from 0 to 1, got {original!r}")
    number = float(value)
    if percent or 1 < number <= 100:
        number /= 100
    if not 0 <= number <= 1:
        raise ParseError(f"{field} must be a number from 0 to 1, got {original!r}")
    return number


def parse_records(
    text: str, *, max_records: int = 3, defaults: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The records in a distiller answer, and the entries that were dropped.

    Accepts ``{"records": [...]}`` (also under ``lessons``), a bare list, one record
    object, ``{"records": []}`` and a plain "no new lesson" as "nothing to learn".

    Args:
        text: the model's answer.
        max_records: more entries than this are dropped.
        defaults: for a rewrite, the records asked about: entry ``i`` of the answer
            keeps the fields of ``defaults[i]`` it leaves out (its citations,
            confidence...).

    Returns:
        ``(records, dropped)``: records as dicts with string fields and a float
        confidence; dropped as ``{"record": ..., "reason": ...}``.

    Raises:
        ParseError: the answer is not JSON of that shape.
    """
    if isinstance(text, str) and _NO_LESSON.match(text.strip()):
        return [], []
    data = extract_json(text)
    if isinstance(data, dict):
        for key in ("records", "lessons", "items", "experiences"):
            if key in data:
                data = data[key]
                break
        else:
            if "lesson" in data:
                data = [data]
            else:
                raise ParseError(
                    'expected {"records": [...]} (an empty list when there is '
                    f"no new lesson); got an object with keys {sorted(data)}"
                )
    if data is None:
        return [], []
    if not isinstance(data, list):
        raise ParseError(f'"records" must be a list, got {type(data).__name__}')
    records: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            dropped.append({"record": item, "reason": f"records[{i}] is not an object"})
            continue
        if defaults is not None and i < len(defaults):
            item = {**defaults[i], **{k: v for k, v in item.items() if v not in ("", [], None)}}
        if len(records) >= max_records:
            dropped.append({"record": item, "reason": f"more than {max_records} records"})
            continue
        record = {k: item[k] for k in RECORD_KEYS if item.get(k) is not None}
        for key in ("scene", "trigger", "action", "outcome", "lesson", "evidence"):
            if key in record and not isinstance(record[key], str):
                record[key] = (
                    json.dumps(record[key], ensure_ascii=False)
                    if isinstance(record[key], dict | list)
                    else str(record[key])
                )
        try:
            record["confidence"] = coerce_number(item.get("confidence"), f"records[{i}].confidence")
        except ParseError as exc:
            dropped.append({"record": item, "reason": str(exc)})
            continue
        if not str(record.get("lesson", "")).strip():
            dropped.append({"record": item, "reason": f"records[{i}] has no lesson"})
            continue
        records.append(record)
    return records, dropped


def parse_lesson(text: str) -> str:
    """The lesson of a phrasing answer: ``{"lesson": "..."}`` (also the first record of
    ``{"records": [...]}``); ``""`` for an empty one (``{"records": []}``, "none"),
    which the screen then rejects like any other unusable lesson.

    Raises:
        ParseError: no lesson in the answer.
    """
    if isinstance(text, str) and _NO_LESSON.match(text.strip()):
        return ""
    data = extract_json(text)
    if isinstance(data, dict) and not isinstance(data.get("lesson"), str):
        for key in ("records", "lessons", "items"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if isinstance(data, list):
        data = next((d for d in data if isinstance(d, dict)), {})
    if data == {} or data == []:
        return ""
    lesson = data.get("lesson") if isinstance(data, dict) else None
    if not isinstance(lesson, str):
        raise ParseError('expected {"lesson": "..."}')
    return lesson.strip()
