"""The ``hindsight`` command line.

Each group of commands lives in its own module and registers itself on ``app``;
``COMMAND_MODULES`` lists them (imported when the CLI starts, not when the
library is imported). A command line naming a command imports only the module of
that command (``COMMANDS``): ``hindsight mcp`` does not load what ``hindsight
search`` needs; ``hindsight --help`` and anything unknown import them all.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._app import app

COMMAND_MODULES = [
    "records",  # write, search, used, forget, stats, maintain, export, import, reindex
    "db",  # db upgrade | status
    "demo",  # demo
    "reflect",  # reflect FILE, review
    "mcp",  # mcp [--http]
    "ui",  # ui (the memory inspector)
    "worker",  # worker (scheduled maintenance and pending reflections, for docker/)
]

COMMANDS = {  # each command and the module that registers it
    **dict.fromkeys(
        ("write", "search", "used", "forget", "stats", "maintain", "export", "import", "reindex"),
        "records",
    ),
    "db": "db",
    "demo": "demo",
    "reflect": "reflect",
    "review": "reflect",
    "mcp": "mcp",
    "ui": "ui",
    "worker": "worker",
}


def main() -> None:
    """Entry point of the ``hindsight`` script."""
    if sys.argv[1:] == ["--version"]:  # answered before Typer, Rich and the core load
        from hindsight_core import __version__

        sys.stdout.write(f"hindsight {__version__}\n")
        return
    # Once torch is loaded, the interpreter's final garbage collection takes seconds;
    # freezing the heap at exit skips it (the process is ending anyway).
    atexit.register(gc.freeze)
    command = COMMANDS.get(sys.argv[1]) if len(sys.argv) > 1 else None
    for name in [command] if command else COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}")
    from ._app import app

    app()


if not TYPE_CHECKING:  # type checkers read the import above instead

    def __getattr__(name: str) -> object:
        if name == "app":  # the Typer app, imported on first use (``main`` imports it too)
            from ._app import app

            return app
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]
