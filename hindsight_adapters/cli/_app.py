"""The Typer app, shared options and output helpers used by every command module."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape

from hindsight_core.errors import HindsightError, NotFoundError

if TYPE_CHECKING:  # the core's engine is imported by the commands that open a memory
    from hindsight_core.memory import Memory
    from hindsight_core.models import Namespace
    from hindsight_core.settings import Settings

app = typer.Typer(
    name="hindsight",
    help="Hindsight: lessons your agents learned, in PostgreSQL + pgvector.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console(soft_wrap=True)  # long lines stay whole when piped (no terminal width)
err_console = Console(stderr=True, soft_wrap=True)  # an error stays on one line

T = TypeVar("T")

NamespaceOpt = typer.Option(
    "default", "--namespace", "-n", help="Namespace labels joined by '/', e.g. acme/agent."
)
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")
KNOWN_SHOWN = 20


def _version(value: bool) -> None:
    if value:
        from hindsight_core import __version__

        console.print(f"hindsight {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Hindsight: lessons your agents learned, in PostgreSQL + pgvector."""


def parse_namespace(text: str) -> tuple[str, ...]:
    """'acme/agent' -> ('acme', 'agent')."""
    return tuple(part for part in text.split("/"))


def unknown_namespace(mem: Memory, namespace: Namespace) -> NotFoundError | None:
    """An error naming ``namespace`` and listing the known ones, if it holds no records
    (neither it nor any namespace under it); else None."""
    from hindsight_core.models import show_namespace

    if mem.namespaces(prefix=namespace, limit=1):
        return None
    known = [show_namespace(n.namespace) for n in mem.namespaces(limit=KNOWN_SHOWN + 1)]
    listed = ", ".join(known[:KNOWN_SHOWN]) + (", ..." if len(known) > KNOWN_SHOWN else "")
    return NotFoundError(
        f"no namespace {show_namespace(namespace)}: "
        + (f"known namespaces are {listed}" if known else "no lessons are stored yet")
    )


def load_server_settings() -> Settings:
    """Settings for a long-running server, with the database URL checked now: a
    malformed one is a one-line error at start, not a server that cannot work.

    Raises:
        ConfigurationError: the URL is malformed or not PostgreSQL's.
    """
    from hindsight_core.settings import Settings

    settings = Settings()
    if settings.database_url is not None:  # else nothing to check: the embedded server's
        from hindsight_core.storage.urls import parse_database_url

        parse_database_url(settings.database_url)
    return settings


def open_memory(namespace: str = "default") -> Memory:
    """A Memory configured from the environment."""
    from hindsight_core.memory import Memory
    from hindsight_core.settings import Settings

    return Memory(parse_namespace(namespace), settings=Settings())


def to_jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(value), ensure_ascii=False, indent=2) + "\n")


def emit_json_line(value: Any) -> None:
    """One compact JSON line, flushed (long-running servers announce themselves so)."""
    sys.stdout.write(json.dumps(to_jsonable(value), ensure_ascii=False) + "\n")
    sys.stdout.flush()


@contextmanager
def cli_errors() -> Iterator[None]:
    """Print Hindsight errors as one clear line and exit 1 (2 for bad input)."""
    from hindsight_core.errors import ImportFormatError, ValidationError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        yield
    except pydantic.ValidationError as exc:  # Settings() read a bad HINDSIGHT_* value
        err_console.print(f"[red]error:[/red] {escape(settings_error(exc))}", highlight=False)
        raise typer.Exit(2) from None
    except (ValidationError, ImportFormatError) as exc:  # bad input: 2
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    except HindsightError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from None


def settings_error(exc: pydantic.ValidationError) -> str:
    """A settings error on one line, naming the environment variables."""
    parts = [
        f"HINDSIGHT_{'_'.join(str(p) for p in e['loc']).upper()}: "
        f"{e['msg'].removeprefix('Value error, ')}"
        for e in exc.errors()
    ]
    return "invalid setting " + "; ".join(parts)


def run(func: Callable[[], T]) -> T:
    with cli_errors():
        return func()
