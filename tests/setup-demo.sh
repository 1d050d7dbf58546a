#!/usr/bin/env bash
# Installs into ./.venv only what tests/demo.sh uses, from pip wheels, with no root and
# no Node: NVRTC, ptxas and the CUDA headers (the compile checks of examples/*, on the
# CPU), and torch, triton and numpy (the optimize run; with no GPU, Triton's CPU
# interpreter runs the kernels). About 5 GB, mostly torch's CUDA libraries. Safe to run
# again; it only adds what is missing. tests/setup.sh runs it, then adds the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python3 ]; then
  "$py" -m venv .venv
fi
want=(nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-cccl-cu12
      torch triton numpy "$@")
missing=()
for p in "${want[@]}"; do
  .venv/bin/python3 -m pip show -q "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} into .venv" >&2
  .venv/bin/python3 -m pip install -q --disable-pip-version-check "${missing[@]}"
fi
