"""The LlamaIndex example runs end to end, offline (scripted chat model, real embedder)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from hindsight_core import Memory, Settings

pytest.importorskip("llama_index.core", reason="needs the llamaindex extra")

EXAMPLE = Path(__file__).resolve().parents[1] / "integrations" / "llamaindex" / "example.py"


@pytest.mark.slow
def test_example_runs_offline(database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINDSIGHT_LLM_")}
    env["HINDSIGHT_DATABASE_URL"] = database_url
    namespace = f"examples/li-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--namespace", namespace],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=EXAMPLE.parents[2],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"in {namespace}" in out
    assert out.count("I'll check each file's extension first") == 2
    assert "OK: both acted on the recalled lesson" in out
    assert "dropped namespace" not in out  # a namespace of your own is kept


@pytest.mark.slow
def test_example_drops_its_fresh_namespace(database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HINDSIGHT_LLM_")}
    env["HINDSIGHT_DATABASE_URL"] = database_url
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=EXAMPLE.parents[2],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (name,) = re.findall(r"dropped namespace (\S+)", proc.stdout)
    with Memory(("x",), settings=Settings(database_url=database_url)) as mem:
        assert mem.namespaces(prefix=tuple(name.split("/"))) == []
