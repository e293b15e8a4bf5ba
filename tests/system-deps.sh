#!/usr/bin/env bash
# Installs the Debian packages the suite drives for real, when missing:
# valgrind (callgrind counts the instructions per request in the bench's
# quick test), systemd (tests/systemd.rs runs a real `systemd --user`;
# systemd need not be PID 1) and openssh-server (tests/remote.rs runs a
# real sshd on a loopback port; the package's own service is not started
# where policy-rc.d says so, and the tests never use it), and podman, runc
# and debootstrap (tests/remote.rs runs a real container, its root
# filesystem debootstrapped once by tests/container-rootfs.sh), and tmux
# (a real terminal for `procd attach` through --host), and redis-server
# (tests/stacks.rs starts a real Redis in a stack, on its own port), and
# golang-go (tests/testruns.rs reads a real `go test`'s output),
# ripgrep (the bench's search row measures procd beside `rg`), and nodejs
# and npm (`node --test` runs, the docs' Node examples, and the npm
# packages of tests/mcp-ts-sdk.sh and tests/codex-cli.sh), and docker.io
# (tests/cluster.rs runs a real two-node Docker Swarm; its dockerds are
# the test's own, in network namespaces it makes; the package's service is
# never used), and make (tests/jobserver.rs drives real GNU make builds
# under procd's jobserver). Most are on CI's machine kind already; this
# is for a fresh machine. Needs root and apt-get to install; otherwise it
# says what is missing and fails.
set -euo pipefail
missing=()
command -v valgrind >/dev/null || missing+=(valgrind)
[ -x /lib/systemd/systemd ] || missing+=(systemd)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null || missing+=(openssh-client)
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v tmux >/dev/null || missing+=(tmux)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v go >/dev/null || missing+=(golang-go)
command -v rg >/dev/null || missing+=(ripgrep)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
# Another docker client may be on PATH (without an engine): look for the
# engine itself.
[ -x /usr/sbin/dockerd ] && [ -x /usr/bin/docker ] || missing+=(docker.io)
command -v make >/dev/null || missing+=(make)
# The Swarm test's network namespaces and veth pair.
command -v ip >/dev/null || missing+=(iproute2)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "system-deps: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "system-deps: the suite needs ${missing[*]} (Debian/Ubuntu: apt-get install ${missing[*]})" >&2
  exit 1
fi
