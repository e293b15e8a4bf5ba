#!/usr/bin/env bash
# Makes sure target/mcp-node holds the official TypeScript MCP SDK, pinned,
# that tests/mcp_ts_client.mjs drives `procd mcp` with (progress with
# resetTimeoutOnProgress, cancellation, and the channel push, which the
# Python SDK drops before a handler sees it), and prints the SDK's folder.
# Idempotent and safe to run concurrently; the README's test command runs
# it, and so does the test when the folder is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${PROCD_MCP_NODE:-$root/target/mcp-node}"
sdk='@modelcontextprotocol/sdk@1.32.2'
found="$dir/node_modules/@modelcontextprotocol/sdk"

ready() { grep -q '"version": "1.32.2"' "$found/package.json" 2>/dev/null; }
if ready; then echo "$found"; exit 0; fi

mkdir -p "$dir"
exec 9>"$dir.lock"
flock 9
if ready; then echo "$found"; exit 0; fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "mcp-ts-sdk: node and npm are needed for the TypeScript MCP SDK (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
npm install --prefix "$dir" --ignore-scripts --no-audit --no-fund --silent "$sdk" >&2
ready || { echo "mcp-ts-sdk: $sdk did not install" >&2; exit 1; }
echo "$found"
