#!/usr/bin/env bash
# Makes sure target/peers/codex holds Codex's CLI, pinned (its npm package
# brings the linux binary), whose `codex exec-server --listen stdio` the
# differential test (tests/codex.rs) runs beside `procd exec-server`, and
# prints the path of its `codex`. Idempotent and safe to run concurrently;
# the README's test command runs it, and so does the test.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${PROCD_CODEX_DIR:-$root/target/peers/codex}"
version='0.171.0'
bin="$dir/node_modules/.bin/codex"

ready() { [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qx "codex-cli $version"; }
if ready; then echo "$bin"; exit 0; fi

mkdir -p "$dir"
exec 9>"$dir.lock"
flock 9
if ready; then echo "$bin"; exit 0; fi
if ! command -v npm >/dev/null; then
  echo "codex-cli: npm is needed for @openai/codex (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
echo "codex-cli: installing @openai/codex@$version from npm (~420 MB, once)" >&2
npm install --prefix "$dir" --ignore-scripts --no-audit --no-fund --silent "@openai/codex@$version" >&2
ready || { echo "codex-cli: @openai/codex@$version did not install" >&2; exit 1; }
echo "$bin"
