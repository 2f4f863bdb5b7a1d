"""``hindsight worker``: scheduled maintenance (and pending reflections) for a deployment.

Each sweep runs ``Memory.maintain()`` over every namespace (decayed records are
archived, expired items and task logs removed) and then reflects at most
``HINDSIGHT_WORKER_BATCH`` ended task logs still waiting for reflection (see
``hindsight_core.worker``). Sweeps repeat every ``HINDSIGHT_WORKER_INTERVAL``
seconds; SIGTERM or SIGINT stops the loop between steps (the wait is interrupted
at once), so ``docker stop`` is quick and never cuts a sweep in half.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import typer

from hindsight_core.errors import HindsightError
from hindsight_core.memory import Memory
from hindsight_core.settings import Settings

from ._app import app, cli_errors, parse_namespace

log = logging.getLogger("hindsight.worker")


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM/SIGINT while inside (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        log.warning("received %s: stopping after the current step", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def sweep(
    memory: Memory, settings: Settings, *, grace: float = 60.0, skip: set[uuid.UUID] | None = None
) -> dict[str, Any]:
    """One bounded round of work: maintenance, then at most ``worker_batch`` reflections."""
    from hindsight_core.reflection import llm_from_settings
    from hindsight_core.worker import reflect_pending

    started = time.monotonic()
    report: dict[str, Any] = {"maintenance": memory.maintain().model_dump()}
    try:
        report["reflections"] = reflect_pending(
            memory,
            llm=llm_from_settings(settings),
            limit=settings.worker_batch,
            grace=timedelta(seconds=grace),
            skip=skip,
        )
    except HindsightError as exc:  # reflection trouble must not stop maintenance
        log.warning("pending reflections failed: %s", exc)
        report["reflection_error"] = str(exc)
    report["seconds"] = round(time.monotonic() - started, 3)
    return report


@app.command()
def worker(
    once: bool = typer.Option(False, "--once", help="Run one sweep and exit."),
    interval: float | None = typer.Option(
        None,
        "--interval",
        min=0.01,
        help="Seconds between sweeps (default: HINDSIGHT_WORKER_INTERVAL or 300).",
    ),
    max_sweeps: int | None = typer.Option(
        None, "--max-sweeps", min=1, help="Stop after this many sweeps."
    ),
    grace: float = typer.Option(
        60.0,
        "--grace",
        min=0,
        help="Reflect on ended tasks only this many seconds after they ended.",
    ),
    as_json: bool = typer.Option(  # the output is JSON lines either way
        False, "--json", help="One JSON line per sweep (the output is that either way)."
    ),
) -> None:
    """Run scheduled maintenance (decay/eviction sweep) and pending reflections."""
    with cli_errors():
        settings = Settings()
        wait = interval if interval is not None else settings.worker_interval
        memory = Memory(parse_namespace(settings.namespace), settings=settings)
        stop = threading.Event()
        done = 0
        skip: set[uuid.UUID] = set()
        with _stop_on_signals(stop):
            try:
                while not stop.is_set():
                    try:
                        report = sweep(memory, settings, grace=grace, skip=skip)
                    except HindsightError as exc:
                        if once:
                            raise
                        log.error("sweep failed (will retry in %ss): %s", wait, exc)
                        report = {"error": str(exc)}
                    sys.stdout.write(json.dumps({"sweep": done + 1, **report}) + "\n")
                    sys.stdout.flush()
                    done += 1
                    if once or (max_sweeps is not None and done >= max_sweeps):
                        break
                    stop.wait(wait)
            finally:
                memory.close()
