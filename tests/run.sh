#!/usr/bin/env bash
# The test suite: installs the test tools (tests/setup.sh; quick when they are there),
# then every Rust test (unit, LSP sessions, CLI, real Neovim) with the tools from ./.venv
# on PATH. Under CI=true a missing tool fails the tests that need it instead of skipping
# them.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
bash tests/setup.sh
t1=$SECONDS
if [ -d .venv ]; then
  export VIRTUAL_ENV="$PWD/.venv"
  export PATH="$VIRTUAL_ENV/bin:$PATH"
fi
if [ "${CI:-}" = "true" ]; then
  export KERNEL_LSP_REQUIRE_TOOLS=1
fi
# Checks use NVRTC unless a test asks for nvcc (tools::test_nvcc), so results do not
# depend on whether this machine has a CUDA toolkit on PATH.
export KERNEL_LSP_NVCC="${KERNEL_LSP_NVCC:-none}"
# The release profile, so the tests reuse the dependencies tests/demo.sh built (the
# build and the run apart, so the time of each is printed). A test that cannot run here
# prints SKIP and counts as passed: the last lines say how many.
cargo test --release --workspace --locked --no-run
t2=$SECONDS
log=target/test-output.log
mkdir -p target
status=0
cargo test --release --workspace --locked 2>&1 | tee "$log" || status=$?
t3=$SECONDS
bash tests/skipped.sh "$log"
[ "$status" = 0 ] || exit "$status"

# The VS Code extension: typecheck, unit tests, the .vsix and its contents; then the
# .vsix in code-server + headless Chromium against the kernel-lsp cargo just built.
bash editors/vscode/test.sh
bash editors/vscode/e2e.sh
echo "== tests done in $((SECONDS - t0)) s: setup $((t1 - t0)) s, test build $((t2 - t1)) s, Rust tests $((t3 - t2)) s, VS Code extension $((SECONDS - t3)) s" >&2
