"""The export file: records as JSON Lines, written and read back (``export`` /
``import_records``, ``hindsight export`` / ``hindsight import``). Pure (no database):
:func:`check_import_lines` checks an import's lines before anything is written."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

import pydantic
from pydantic import Field

from ..errors import ImportFormatError, ValidationError
from ..models import (
    Experience,
    ExperienceIn,
    Namespace,
    parse_experience,
    raise_validation,
    to_utc,
    validate_namespace,
)


class ExportedRecord(ExperienceIn):
    """One line of an export file: a record with its identity and lifecycle state."""

    id: uuid.UUID
    namespace: tuple[str, ...]
    score: float = Field(default=1.0, ge=0)
    use_count: int = Field(default=0, ge=0)
    occurrences: int = Field(default=1, ge=1)
    last_used_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    archived_at: datetime | None = None
    merged_into: uuid.UUID | None = None
    merged_from: list[uuid.UUID] = Field(default_factory=list)
    scenes: list[str] = Field(default_factory=list)
    # its place in a chain of versions (docs/versions.md)
    version: int = Field(default=1, ge=1)
    lineage: uuid.UUID | None = None
    supersedes: uuid.UUID | None = None
    superseded_by: uuid.UUID | None = None
    superseded_at: datetime | None = None
    superseded_reason: str | None = None
    superseded_actor: str | None = None

    @pydantic.field_validator("last_used_at", "updated_at", "archived_at", "superseded_at")
    @classmethod
    def _utc_more(cls, value: datetime | None) -> datetime | None:
        return to_utc(value) if value is not None else None


def export_line(record: Experience) -> str:
    """A record as one JSON line (every field but the embedding and decayed score)."""
    data = record.model_dump(mode="json", exclude={"decayed_score"})
    data["namespace"] = list(record.namespace)
    return json.dumps(data, ensure_ascii=False)


def write_export(target: str | Path | IO[str], records: list[Experience]) -> int:
    """Write ``records`` as export lines (JSON Lines) to a path or an open text file;
    returns how many (shared by ``Memory.export`` and ``AsyncMemory.export``)."""
    if isinstance(target, str | Path):
        with open(target, "w", encoding="utf-8") as fh:
            return write_export(fh, records)
    for record in records:
        target.write(export_line(record) + "\n")
    return len(records)


def read_import_lines(source: str | Path | Iterable[str]) -> list[str]:
    """The lines of an import: from a path, or any iterable of strings as given."""
    if isinstance(source, str | Path):
        raw = Path(source).read_bytes()
        try:
            return raw.decode("utf-8").splitlines()
        except UnicodeDecodeError as exc:  # a Latin-1 export, a binary file
            line = raw.count(b"\n", 0, exc.start) + 1
            raise ImportFormatError(
                f"line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}). Nothing was "
                "imported; save the file as UTF-8 (as `hindsight export` writes it).",
                line=line,
            ) from None
    return list(source)


@dataclass
class ImportLines:
    """An import's lines, checked and grouped by namespace (:func:`check_import_lines`).

    Attributes:
        restored: exported records (lines with an ``id``), restored as they were.
        plain: new records (lines without one), written through the write path.
        skipped: the numbers (from 1) of the lines left out as invalid.
    """

    restored: dict[Namespace, list[ExportedRecord]] = field(default_factory=dict)
    plain: dict[Namespace, list[ExperienceIn]] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)

    @property
    def restoring(self) -> int:
        """How many exported records the lines hold."""
        return sum(map(len, self.restored.values()))

    @property
    def total(self) -> int:
        """How many records the lines hold (skipped lines not counted)."""
        return self.restoring + sum(map(len, self.plain.values()))


def check_import_lines(
    lines: Iterable[str],
    *,
    default: Namespace,
    lesson_max_chars: int,
    field_max_chars: int,
    skip_invalid: bool = False,
) -> ImportLines:
    """Check every line of an import (blank lines are passed over): a line with an
    ``id`` is an :class:`ExportedRecord`, one without a new record in its
    ``namespace`` or ``default``.

    Raises:
        ImportFormatError: a bad line (its number in the message and ``line``),
            unless ``skip_invalid``: then it is counted in ``skipped``.
    """
    checked = ImportLines()
    limits = {"lesson_max_chars": lesson_max_chars, "field_max_chars": field_max_chars}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValidationError("a line must hold a JSON object", field="(line)")
            if "id" not in data:
                raw_ns = data.pop("namespace", None)
                ns = default if raw_ns is None else validate_namespace(raw_ns)
                checked.plain.setdefault(ns, []).append(parse_experience(data, **limits))
                continue
            data["namespace"] = list(validate_namespace(data.get("namespace")))
            record = ExportedRecord.model_validate(data, context=limits)
        except (ValueError, ValidationError) as exc:
            if isinstance(exc, pydantic.ValidationError):
                exc = raise_validation(exc)
            if skip_invalid:
                checked.skipped.append(number)
                continue
            raise ImportFormatError(
                f"line {number}: {exc}. Nothing was imported; fix the line or pass "
                "--skip-invalid to import the other lines.",
                line=number,
            ) from None
        checked.restored.setdefault(tuple(record.namespace), []).append(record)
    return checked
