"""The package surface: exports, light import, CLI help matches the docs."""

from __future__ import annotations

import subprocess
import sys

import hindsight_core


def test_all_is_complete() -> None:
    public = {name for name in dir(hindsight_core) if not name.startswith("_")}
    modules = {name for name in public
               if type(getattr(hindsight_core, name)).__name__ == "module"}
    assert set(hindsight_core.__all__) - {"__version__"} == public - modules


def test_import_loads_no_optional_dependency() -> None:
    code = (
        "import sys, hindsight_core, hindsight_core.cli;"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'sentence_transformers', 'langgraph', 'langchain_core', 'llama_index', "
        "'mcp', 'transformers')];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
