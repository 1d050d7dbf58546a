#!/usr/bin/env bash
# Installs what e2e.sh needs: code-server from npm into editors/vscode/.e2e/, and from
# Debian Chromium (driven by playwright-core, a devDependency) plus the headers and
# tools code-server's native modules build with. Safe to run again; it only adds what
# is missing.
set -euo pipefail
cd "$(dirname "$0")"
# code-server writes a config file and data on any run, --version included: keep them
# under .e2e/ rather than in the user's home.
export XDG_CONFIG_HOME="$PWD/.e2e/xdg/config" XDG_DATA_HOME="$PWD/.e2e/xdg/data"
# The last code-server on Node 20 (it bundles VS Code 1.100.3); newer ones need Node 22+.
version=4.100.3
cs=.e2e/node_modules/.bin/code-server
if [ -x "$cs" ] && [ "$("$cs" --version 2>/dev/null | grep -m1 -oE '^[0-9]+\.[0-9]+\.[0-9]+ ')" = "$version " ] && command -v chromium >/dev/null; then
  echo "editors/vscode/e2e-setup.sh: code-server $version and chromium ready" >&2
  exit 0
fi

debs=(chromium ripgrep libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev pkg-config g++ make python3)
missing=()
for p in "${debs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "editors/vscode/e2e-setup.sh: apt-get install ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

mkdir -p .e2e/tmp
[ -f .e2e/package.json ] || echo '{ "private": true, "description": "code-server for editors/vscode/e2e.sh" }' > .e2e/package.json
# code-server's @vscode/ripgrep (1.15.11 in this release) downloads its rg binary from
# GitHub while installing, which this network cannot reach. It first looks in a cache in
# the temp folder: put Debian's rg there, packed as the asset it would download.
rg_cache=.e2e/tmp/vscode-ripgrep-cache-1.15.11
mkdir -p "$rg_cache" .e2e/tmp/rg
cp "$(command -v rg)" .e2e/tmp/rg/rg
tar czf "$rg_cache/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" -C .e2e/tmp/rg rg

echo "editors/vscode/e2e-setup.sh: npm install code-server@$version (builds native modules; a few minutes)" >&2
# unsafe_perm: code-server's postinstall refuses to run as root without it.
# yes: node-pty's postinstall runs `npx node-gyp`, which would otherwise ask.
(cd .e2e && TMPDIR="$PWD/tmp" npm_config_unsafe_perm=true npm_config_yes=true \
  npm install --no-audit --no-fund --no-save "code-server@$version")
"$cs" --version | grep -m1 -E '^[0-9]+\.[0-9]+\.[0-9]+ '
[ -x .e2e/node_modules/code-server/lib/vscode/node_modules/@vscode/ripgrep/bin/rg ] || {
  echo "editors/vscode/e2e-setup.sh: code-server installed without its rg binary" >&2
  exit 1
}
