#!/usr/bin/env bash
# Makes sure target/hermes-venv holds hermes-agent 0.19.0 from PyPI (and
# pytest), which tests/hermes.rs runs its own tools in on procd
# (clients/python/tests/hermes), and prints that venv's python. A venv of
# its own: hermes-agent brings many packages the other tests do not need.
# Idempotent and safe to run concurrently; the README's test command runs
# it, and so does the test when the venv is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${PROCD_HERMES_VENV:-$root/target/hermes-venv}"
py="$venv/bin/python"
packages=('hermes-agent==0.19.0' 'pytest==9.2.0')

# The import is tried from / with a throwaway HERMES_HOME: no `tools`
# folder of the caller's shadows hermes's, and hermes writes nothing of
# its own at import into the user's ~/.hermes.
probe() {
  local home rc
  home=$(mktemp -d)
  (cd / && HERMES_HOME="$home" "$py" -c 'import tools.process_registry, tools.terminal_tool, pytest')
  rc=$?
  rm -rf "$home"
  return $rc
}
ready() {
  [ -x "$py" ] && probe 2>/dev/null \
    && [ "$(version)" = 0.19.0 ]
}
# Read whole (a `grep -q` that stops early would fail the pipeline with
# pip's SIGPIPE under pipefail, now and then).
version() { "$py" -m pip show hermes-agent 2>/dev/null | sed -n 's/^Version: //p'; }
if ready; then echo "$py"; exit 0; fi

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if ready; then echo "$py"; exit 0; fi
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  echo "hermes-venv: python3's venv module is missing (run tests/mcp-venv.sh, or apt-get install python3-venv)" >&2
  exit 1
fi
[ -x "$py" ] || python3 -m venv "$venv" >&2
"$py" -m pip install -q --disable-pip-version-check "${packages[@]}" >&2
if ! ready; then
  echo "hermes-venv: hermes-agent did not import after installing it:" >&2
  probe >&2 || true
  exit 1
fi
echo "$py"
