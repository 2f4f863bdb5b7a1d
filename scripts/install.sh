#!/usr/bin/env bash
# Set up Hindsight on a fresh machine: a virtualenv in .venv with everything installed.
#   bash scripts/install.sh          the library, CLI, local model and all adapters
#   bash scripts/install.sh --dev    plus test and benchmark tools (and Chromium for UI tests)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
pip install -q --upgrade pip
# The CPU build of torch first: a plain `torch` requirement would pull a multi-GB CUDA build
# (see scripts/install-torch.sh: PyTorch's CPU index, else a CPU wheel pip already finds).
bash scripts/install-torch.sh .venv/bin/python
if [ "${1:-}" = "--dev" ]; then
  pip install -q -e ".[all,dev]"
  if [ -x scripts/install-browser.sh ]; then bash scripts/install-browser.sh; fi
else
  pip install -q -e ".[all]"
fi
echo "installed: $(.venv/bin/hindsight --help >/dev/null && echo 'hindsight CLI ready in .venv/bin')"
