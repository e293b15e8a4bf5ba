#!/usr/bin/env bash
# Builds a procd sandbox image with no registry: a root filesystem (a
# directory, e.g. one debootstrap made: tests/container-rootfs.sh) with a
# procd binary put in at /usr/local/bin/procd, imported into docker with
# `docker import` and the image's settings given as --change lines.
#
#   deploy/container/build-image.sh ROOTFS PROCD_BINARY TAG
#
# DOCKER (default `docker`) is the client command, e.g. `docker -H unix:///…`
# for one node of several; run it once per node (no registry moves images).
#
# The image (docs/cluster.md):
# - ENTRYPOINT `procd daemon`: procd's keeper is the container's PID 1: it
#   reaps every orphan, turns SIGTERM into a graceful stop of every session
#   (their kill grace inside the orchestrator's stop timeout) and exits 0
#   after it, and restarts its daemon (sessions kept) if that dies.
# - PROCD_HOME=/var/lib/procd, declared a VOLUME: mount one there to keep
#   logs and exits across the container's replacement.
# - No HEALTHCHECK (`docker import` cannot set one): give the
#   orchestrator `procd status` (Swarm --health-cmd, a Kubernetes probe).
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 ROOTFS PROCD_BINARY TAG" >&2; exit 2; }
rootfs=$1 procd=$2 tag=$3
[ -x "$rootfs/bin/sh" ] || { echo "$rootfs: not a root filesystem (no bin/sh)" >&2; exit 1; }
[ -x "$procd" ] || { echo "$procd: not an executable" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/add/usr/local/bin"
# Debug builds carry ~200 MB of symbols a sandbox does not need.
strip -o "$work/add/usr/local/bin/procd" "$procd" 2>/dev/null || cp "$procd" "$work/add/usr/local/bin/procd"
# What a sandbox never reads: documentation, translations, apt's caches.
tar -C "$rootfs" -cf "$work/image.tar" \
  --exclude=./usr/share/doc --exclude=./usr/share/locale --exclude=./usr/share/man \
  --exclude=./usr/share/info --exclude=./var/cache --exclude=./var/lib/apt \
  --exclude=./.procd-ready .
tar -C "$work/add" -rf "$work/image.tar" ./usr/local/bin/procd
${DOCKER:-docker} import \
  --change 'ENTRYPOINT ["/usr/local/bin/procd", "daemon"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV PROCD_HOME=/var/lib/procd' \
  --change 'VOLUME /var/lib/procd' \
  --change 'WORKDIR /root' \
  "$work/image.tar" "$tag" >/dev/null
echo "$tag"
