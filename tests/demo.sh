#!/usr/bin/env bash
# Set up and run kernel-lsp on the bundled examples: build the release binary, install
# the CPU-side CUDA tools into ./.venv, then check every example (syntax, @bench specs,
# NVRTC compile, ptxas resources).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup.sh
cargo build --release --locked
export VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH"
echo "== kernel-lsp check examples/*" >&2
./target/release/kernel-lsp check examples/*
echo "== no errors in the bundled examples" >&2
