"""The ``hindsight`` command line.

Each group of commands lives in its own module and registers itself on ``app``;
``COMMAND_MODULES`` lists them (imported when the CLI starts, not when the
library is imported).

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
from typing import Any

COMMAND_MODULES = [
    "records",  # write, search, used, forget, stats, maintain, export, import, reindex
    "versions",  # supersede, history
    "db",  # db upgrade | status | backup | restore
    "demo",  # demo
    "reflect",  # reflect FILE, review
    "mcp",  # mcp [--http]
    "ui",  # ui (the memory inspector)
    "worker",  # worker (scheduled maintenance and pending reflections, for docker/)
]


_signalled: list[int] = []


def _stop(signum: int, _frame: Any) -> None:
    _signalled.append(signum)
    raise SystemExit(128 + signum)


def main() -> None:
    """Entry point of the ``hindsight`` script."""
    # First, before the heavy imports; ``exit_on_signals`` (servers, the embedded
    # PostgreSQL) keeps a handler already installed.
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _stop)
    # Once torch is loaded, the interpreter's final garbage collection takes seconds;
    # freezing the heap at exit skips it (the process is ending anyway).
    atexit.register(gc.freeze)
    try:
        for name in COMMAND_MODULES:
            importlib.import_module(f"{__name__}.{name}")
        from ._app import app

        app()
    except SystemExit:
        if _signalled:
            sys.stderr.write(f"hindsight: stopped by {signal.Signals(_signalled[0]).name}\n")
        raise


def __getattr__(name: str) -> Any:
    if name == "app":
        from ._app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["app", "main"]
