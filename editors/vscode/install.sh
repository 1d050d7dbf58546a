#!/usr/bin/env bash
# Installs the extension's locked npm dependencies (package-lock.json) into
# node_modules, skipping the work when that lock file was installed already.
set -euo pipefail
cd "$(dirname "$0")"
stamp=node_modules/.installed-package-lock.json
if ! cmp -s package-lock.json "$stamp" 2>/dev/null; then
  echo "editors/vscode: npm ci" >&2
  npm ci --no-audit --no-fund
  cp package-lock.json "$stamp"
fi
