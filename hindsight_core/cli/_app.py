"""The Typer app, shared options and output helpers used by every command module."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape

from ..errors import HindsightError
from ..memory import Memory
from ..settings import Settings

app = typer.Typer(
    name="hindsight",
    help="Hindsight: lessons your agents learned, in PostgreSQL + pgvector.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console(soft_wrap=True)  # long lines stay whole when piped (no terminal width)
err_console = Console(stderr=True)

T = TypeVar("T")

NamespaceOpt = typer.Option(
    "default", "--namespace", "-n", help="Namespace labels joined by '/', e.g. acme/agent."
)
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


def parse_namespace(text: str) -> tuple[str, ...]:
    """'acme/agent' -> ('acme', 'agent')."""
    return tuple(part for part in text.split("/"))


def open_memory(namespace: str = "default") -> Memory:
    """A Memory configured from the environment."""
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


@contextmanager
def cli_errors() -> Iterator[None]:
    """Print Hindsight errors as one clear line and exit 1 (2 for bad input)."""
    from ..errors import ValidationError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        yield
    except ValidationError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    except HindsightError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(1) from None


def run(func: Callable[[], T]) -> T:
    with cli_errors():
        return func()
