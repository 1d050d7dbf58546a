#!/usr/bin/env bash
# The VS Code extension's checks, as CI runs them: install the locked dependencies,
# typecheck, unit tests (no VS Code needed), package the .vsix and check what is in it.
# Needs Node 20+ and unzip.
set -euo pipefail
cd "$(dirname "$0")"
for tool in node npm unzip; do
  command -v "$tool" >/dev/null || { echo "editors/vscode/test.sh: $tool is not installed" >&2; exit 1; }
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "editors/vscode/test.sh: Node $(node --version) is too old; vsce and the tests need Node 20+" >&2
  exit 1
fi
bash install.sh
echo "== typecheck" >&2
npx --no-install tsc --noEmit -p .
echo "== unit tests" >&2
rm -rf out
npx --no-install tsc -p tsconfig.test.json
node --test out/test/*.test.js
echo "== package" >&2
version=$(node -p 'require("./package.json").version')
rm -f "kernel-lsp-$version.vsix"
npm run --silent package
echo "== check kernel-lsp-$version.vsix" >&2
VSIX="kernel-lsp-$version.vsix" node --test test/vsix.test.js
