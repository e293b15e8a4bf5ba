#!/usr/bin/env bash
# Makes sure target/mcp-venv holds the Python packages the suite uses —
# the official MCP SDK that tests/mcp.rs drives `procd mcp` with,
# kubernetes-validate, which checks docs/cluster.md's manifest, and
# pytest, mypy and build for clients/python — and prints that venv's
# python.
#
# The SDK goes into a virtual environment the project owns, never into the
# system's python3 (stock Debian and Ubuntu refuse `pip install` there:
# externally managed). Idempotent and safe to run concurrently; the README's
# test command runs it, and the MCP test runs it when the venv is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${PROCD_MCP_VENV:-$root/target/mcp-venv}"
sdk='mcp>=2,<3' # the major version tests/mcp_client.py is written for
validate='kubernetes-validate==1.37.0' # Kubernetes 1.37 schemas, offline
# clients/python's tests, its type check and its wheel (built without
# isolation, so from these pinned tools, offline).
pytools=('pytest==9.2.0' 'mypy==2.4.1' 'build==1.6.1' 'setuptools==84.2.1' 'wheel==0.45.1')
py="$venv/bin/python"

ready() { [ -x "$py" ] && "$py" -c 'import mcp, kubernetes_validate, pytest, mypy, build, setuptools, wheel' 2>/dev/null; }
if ready; then echo "$py"; exit 0; fi

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ready; then echo "$py"; exit 0; fi

if ! command -v python3 >/dev/null; then
  echo "mcp-venv: python3 is needed for the MCP test (Debian/Ubuntu: apt-get install python3 python3-venv)" >&2
  exit 1
fi
# Debian splits venv's pip bootstrap (ensurepip) into python3-venv.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "mcp-venv: installing python3-venv" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null && command -v apt-get >/dev/null; then
    echo "mcp-venv: installing python3-venv" >&2
    sudo -n apt-get update -qq >&2 && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
  else
    echo "mcp-venv: python3's venv module is missing; install it (Debian/Ubuntu: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
[ -x "$py" ] || python3 -m venv "$venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$sdk" "$validate" "${pytools[@]}" >&2
ready || { echo "mcp-venv: the packages did not import after installing them" >&2; exit 1; }
echo "$py"
