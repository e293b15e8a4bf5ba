#!/usr/bin/env bash
# Makes sure target/container-rootfs holds a minimal Debian root filesystem
# for tests/remote.rs's real container (podman with runc, overlaid so every
# run starts clean), and prints its path. No registry is needed: it is
# debootstrapped from the Debian mirror apt already uses. Built once
# (about a minute, ~220 MB); idempotent and safe to run concurrently.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rootfs="${PROCD_CONTAINER_ROOTFS:-$root/target/container-rootfs}"
ready() { [ -x "$rootfs/bin/sh" ] && [ -f "$rootfs/.procd-ready" ]; }
if ready; then echo "$rootfs"; exit 0; fi
mkdir -p "$(dirname "$rootfs")"
exec 9>"$rootfs.lock"
flock 9
if ready; then echo "$rootfs"; exit 0; fi
mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | grep -m1 -oE 'https?://[^ ]*/debian/?' || true)
mirror="${mirror:-http://deb.debian.org/debian}"
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
rm -rf "$rootfs"
echo "container-rootfs: debootstrap $suite from $mirror (once)" >&2
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >&2
touch "$rootfs/.procd-ready"
echo "$rootfs"
