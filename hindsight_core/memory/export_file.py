"""The export file: records as JSON Lines, written and read back (``export`` /
``import_records``, ``hindsight export`` / ``hindsight import``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from ..errors import ImportFormatError
from ..models import Experience


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
