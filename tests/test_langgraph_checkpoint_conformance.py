"""LangGraph's official checkpointer conformance suite against HindsightCheckpointer.

Our bar is the full level with every capability detected and passing
(``Result: FULL (8/8)``): ``report.passed_all()`` alone would also be true for a
saver that implements nothing, so each capability is checked to be detected.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="langgraph-checkpoint-conformance (the dev extra) is not installed",
)

from _lg_checkpoint_util import async_saver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from hindsight_core import Settings

ALL_CAPABILITIES = {
    "put",
    "put_writes",
    "get_tuple",
    "list",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
}


async def test_conformance_full_level(settings: Settings) -> None:
    @checkpointer_test(name="HindsightCheckpointer")
    async def hindsight_saver():  # type: ignore[no-untyped-def]
        async with async_saver(settings) as saver:
            yield saver

    report = await validate(hindsight_saver, progress=ProgressCallbacks.quiet())
    results = report.results
    assert set(results) == ALL_CAPABILITIES, report.to_dict()
    for name, result in results.items():
        assert result.detected, f"{name} not detected: {report.to_dict()}"
        assert result.passed is True, f"{name}: {result.failures}"
        assert result.tests_failed == 0 and result.tests_passed > 0, name
    assert report.passed_all()
    assert report.conformance_level() == "FULL"
