#!/usr/bin/env bash
# Installs the peers `procd-bench --only peers` measures procd beside, into
# DIR (the bench passes target/peers): pueue and watchexec from crates.io, pm2 and
# Desktop Commander from npm, supervisor from PyPI into a venv of its own. Versions are pinned, so runs compare the same
# programs. Idempotent and safe to run concurrently. Install scripts are
# not run (Desktop Commander's would report the install over the network;
# puppeteer's would download a browser), and nothing here needs them.
set -euo pipefail
dir="${1:?usage: install-peers.sh DIR}"
mkdir -p "$dir"
exec 9>"$dir.lock"
flock 9

if [ ! -x "$dir/pueue/bin/pueued" ] || [ ! -x "$dir/pueue/bin/pueue" ]; then
  echo "install-peers: building pueue 4.0.4 (a few minutes, once)" >&2
  cargo install --locked --quiet --root "$dir/pueue" pueue@4.0.4 >&2
fi

if [ ! -x "$dir/watchexec/bin/watchexec" ]; then
  echo "install-peers: building watchexec 2.3.2 (a few minutes, once)" >&2
  cargo install --locked --quiet --root "$dir/watchexec" watchexec-cli@2.3.2 >&2
fi

if [ ! -f "$dir/npm/node_modules/@wonderwhy-er/desktop-commander/dist/index.js" ] \
  || [ ! -x "$dir/npm/node_modules/.bin/pm2" ]; then
  if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
    echo "install-peers: node and npm are needed for pm2 and Desktop Commander (Debian: apt-get install nodejs npm)" >&2
    exit 1
  fi
  echo "install-peers: installing pm2 and Desktop Commander from npm" >&2
  PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix "$dir/npm" --ignore-scripts --no-audit --no-fund --silent \
    pm2@7.0.4 @wonderwhy-er/desktop-commander@0.2.52 >&2
fi

if ! "$dir/venv/bin/python" -c 'import supervisor' 2>/dev/null; then
  echo "install-peers: installing supervisor from PyPI into $dir/venv" >&2
  rm -rf "$dir/venv"
  python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/python" -m pip install -q --disable-pip-version-check supervisor==4.3.0 >&2
fi
