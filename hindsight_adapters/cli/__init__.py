"""The ``hindsight`` command line.

Each group of commands lives in its own module and registers itself on ``app``;
``COMMAND_MODULES`` lists them (imported when the CLI starts, not when the
library is imported). A command line naming a command imports only the module of
that command (``COMMANDS``): ``hindsight mcp`` does not load what ``hindsight
search`` needs; ``hindsight --help`` and anything unknown import them all.

Importing this package is cheap (``app`` is loaded on first access), so that
:func:`main` installs its signal handlers before the heavy imports: SIGINT or
SIGTERM at any moment of a command ends it with one line and exit code 130/143,
its clean-up (the embedded PostgreSQL's release) included.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import app

COMMAND_MODULES = [
    "records",  # write, search, used, feedback, forget, stats, maintain, export, import, ...
    "versions",  # supersede, history
    "db",  # db upgrade | status | backup | restore
    "demo",  # demo
    "reflect",  # reflect FILE, review
    "mcp",  # mcp [--http]
    "ui",  # ui (the memory inspector)
    "worker",  # worker (scheduled maintenance and pending reflections, for docker/)
]

COMMANDS = {  # each command and the module that registers it
    **dict.fromkeys(
        (
            "write",
            "search",
            "used",
            "feedback",
            "forget",
            "stats",
            "maintain",
            "export",
            "import",
            "reindex",
        ),
        "records",
    ),
    "supersede": "versions",
    "history": "versions",
    "db": "db",
    "demo": "demo",
    "reflect": "reflect",
    "review": "reflect",
    "mcp": "mcp",
    "ui": "ui",
    "worker": "worker",
}


_signalled: list[int] = []


def _stop(signum: int, _frame: Any) -> None:
    _signalled.append(signum)
    raise SystemExit(128 + signum)


def main() -> None:
    """Entry point of the ``hindsight`` script."""
    if sys.argv[1:] == ["--version"]:  # answered before Typer, Rich and the core load
        from hindsight_core import __version__

        sys.stdout.write(f"hindsight {__version__}\n")
        return
    # Then, before the heavy imports, the signal handlers; ``exit_on_signals`` (servers,
    # the embedded PostgreSQL) keeps a handler already installed.
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _stop)
    # Once torch is loaded, the interpreter's final garbage collection takes seconds;
    # freezing the heap at exit skips it (the process is ending anyway).
    atexit.register(gc.freeze)
    try:
        command = COMMANDS.get(sys.argv[1]) if len(sys.argv) > 1 else None
        for name in [command] if command else COMMAND_MODULES:
            importlib.import_module(f"{__name__}.{name}")
        from ._app import app

        app()
    except SystemExit:
        if _signalled:
            sys.stderr.write(f"hindsight: stopped by {signal.Signals(_signalled[0]).name}\n")
        raise


if not TYPE_CHECKING:  # type checkers read the import above instead

    def __getattr__(name: str) -> object:
        if name == "app":  # the Typer app, imported on first use (``main`` imports it too)
            from ._app import app

            return app
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]
