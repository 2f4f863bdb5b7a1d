"""The ``hindsight`` command line.

Each group of commands lives in its own module and registers itself on ``app``;
``COMMAND_MODULES`` lists them (imported when the CLI starts, not when the
library is imported).
"""

from __future__ import annotations

import atexit
import gc
import importlib

from ._app import app

COMMAND_MODULES = [
    "records",  # write, search, used, forget, stats, maintain, export, import, reindex
    "versions",  # supersede, history
    "db",  # db upgrade | status
    "demo",  # demo
    "reflect",  # reflect FILE, review
    "mcp",  # mcp [--http]
    "ui",  # ui (the memory inspector)
    "worker",  # worker (scheduled maintenance and pending reflections, for docker/)
]


def main() -> None:
    """Entry point of the ``hindsight`` script."""
    # Once torch is loaded, the interpreter's final garbage collection takes seconds;
    # freezing the heap at exit skips it (the process is ending anyway).
    atexit.register(gc.freeze)
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}")
    app()


__all__ = ["app", "main"]
