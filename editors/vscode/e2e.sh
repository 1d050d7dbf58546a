#!/usr/bin/env bash
# The extension end to end in a real VS Code: packages the .vsix, installs it into
# code-server (VS Code in the browser) and drives it with headless Chromium
# (test/e2e.test.js): the spec diagnostic in the Problems panel, the hover, the
# "Insert @bench spec" code action, the kernel-lsp commands in the Command Palette, one
# command's answer, the status bar item; then (test/e2e-contract.test.js) the settings,
# commands, progress, cancellation and status against test/contract-server.js, a double
# of the contract's server side. E2E_TESTS picks the test files.
#
# Tools, each from the environment or found here:
#   CODE_SERVER     code-server; else editors/vscode/.e2e/node_modules/.bin/code-server
#                   (e2e-setup.sh installs it there), else `code-server` on PATH
#   CHROMIUM        else `chromium` on PATH (Debian: apt-get install chromium)
#   KERNEL_LSP_BIN  else target/debug/kernel-lsp, then target/release/kernel-lsp
# A missing tool prints SKIP and exits 0, or fails under KERNEL_LSP_REQUIRE_TOOLS=1.
# Screenshots and logs go to editors/vscode/.e2e/out/.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
# code-server writes a config file and data on any run, --version included: keep them
# under .e2e/ rather than in the user's home.
export XDG_CONFIG_HOME="$PWD/.e2e/xdg/config" XDG_DATA_HOME="$PWD/.e2e/xdg/data"
repo=$(cd ../.. && pwd)

skip() {
  if [ "${KERNEL_LSP_REQUIRE_TOOLS:-}" = "1" ]; then
    echo "editors/vscode/e2e.sh: FAIL: $1 (KERNEL_LSP_REQUIRE_TOOLS=1, so this is a failure, not a skip)" >&2
    exit 1
  fi
  echo "SKIP editors/vscode/e2e.sh: $1"
  exit 0
}

code_server=${CODE_SERVER:-}
if [ -z "$code_server" ]; then
  if [ -x "$here/.e2e/node_modules/.bin/code-server" ]; then
    code_server="$here/.e2e/node_modules/.bin/code-server"
  else
    code_server=$(command -v code-server || true)
  fi
fi
[ -n "$code_server" ] || skip "code-server not found (run editors/vscode/e2e-setup.sh, or set CODE_SERVER)"
[ -x "$code_server" ] || skip "CODE_SERVER=$code_server is not an executable file"
chromium=${CHROMIUM:-$(command -v chromium || true)}
[ -n "$chromium" ] || skip "chromium not found (apt-get install chromium, or set CHROMIUM)"
[ -x "$chromium" ] || skip "CHROMIUM=$chromium is not an executable file"
bin=${KERNEL_LSP_BIN:-}
if [ -z "$bin" ]; then
  for b in "$repo/target/debug/kernel-lsp" "$repo/target/release/kernel-lsp"; do
    if [ -x "$b" ]; then bin=$b; break; fi
  done
fi
[ -n "$bin" ] || skip "no kernel-lsp binary in target/ (cargo build, or set KERNEL_LSP_BIN)"
[ -x "$bin" ] || skip "KERNEL_LSP_BIN=$bin is not an executable file"

bash install.sh
version=$(node -p 'require("./package.json").version')
vsix="$here/kernel-lsp-$version.vsix"
if [ ! -f "$vsix" ] || [ -n "$(find src package.json -newer "$vsix" -print -quit)" ]; then
  npm run --silent package >/dev/null
fi
out="$here/.e2e/out"
rm -rf "$out"
mkdir -p "$out"
echo "e2e: code-server $("$code_server" --version | grep -m1 -E '^[0-9]+\.[0-9]+\.[0-9]+ ' || echo '?'), $("$chromium" --version), $("$bin" --version)" >&2
CODE_SERVER="$code_server" CHROMIUM="$chromium" KERNEL_LSP_BIN="$bin" VSIX="$vsix" E2E_OUT="$out" \
  node --test --test-concurrency=1 ${E2E_TESTS:-test/e2e.test.js test/e2e-contract.test.js}
