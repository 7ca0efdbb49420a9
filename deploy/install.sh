#!/usr/bin/env bash
# Set up swarm in ./.venv: torch first (CPU build 2.13.0 without a GPU, the CUDA build with one),
# then the project with its test extras. Safe to re-run; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        echo "install: GPU found, installing the CUDA build of torch"
        "${PIP[@]}" install torch
    else
        echo "install: no GPU, installing the CPU build torch==2.13.0"
        "${PIP[@]}" install torch==2.13.0
    fi
fi
"${PIP[@]}" install -e ".[test]"
echo "install: ready (.venv/bin/swarm)"
