#!/usr/bin/env bash
# A STAND-IN for the Dockerfile's official base (python:3.11-slim), for machines where no image
# registry can be reached: a Debian root filesystem from Debian's own packages, with the same
# Python minor (bookworm's python3 is 3.11), as a tarball that `docker import` takes:
#
#   e2e/build-image-base.sh            -> prints the tarball's path (one line on stdout)
#
#   $cache/images/base-standin-bookworm-<key>.tar      (+ .packages: what dpkg has in it)
#   where $cache = ${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}
#
# tools/image.py imports it (`docker import`) and builds the image on it with --build-arg
# BASE=<that tag>, saying STAND-IN wherever it does; users build on the official base.
#
# What it holds: `debootstrap --variant=minbase` of bookworm with python3, python3-venv (the
# build stage's `python -m venv` gets pip from it) and ca-certificates; `python` and `python3`
# at /usr/local/bin like the official base; this machine's CA bundle as the system one (pip in
# the build stage reaches the package index through this machine's TLS setup); no apt lists or
# .debs. <key> is a hash of what decides that content: this script, the suite, the packages, the
# architecture and the CA bundle; a cached tarball is not built again. The Debian mirror is the
# one apt uses here, read from apt's sources at run time (never written into a file). Needs root
# and debootstrap (installed with apt-get when missing). About 4 minutes cold.
set -euo pipefail

suite=bookworm
packages=python3,python3-venv,ca-certificates
python_minor=3.11
ca_bundle=/etc/ssl/certs/ca-certificates.crt

log() { echo "build-image-base: $*" >&2; }
die() { echo "build-image-base: ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "debootstrap needs root"
[ -r "$ca_bundle" ] || die "no CA bundle at $ca_bundle (ca-certificates)"
arch="$(dpkg --print-architecture)"
key="$( { sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1; echo "$suite $packages $arch"
          sha256sum "$ca_bundle" | cut -d' ' -f1; } | sha256sum | cut -c1-16)"
cache="${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}/images"
tarball="$cache/base-standin-$suite-$key.tar"
if [ -s "$tarball" ]; then
  touch "$tarball"  # in use: see the pruning below
  echo "$tarball"
  exit 0
fi

# The mirror apt itself uses for $suite: deb822 .sources stanzas (URIs:/Suites:) or one-line
# `deb [options] URI suite components` entries.
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v suite="$suite" '
      function flush() { if (uri != "" && types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ")) { print uri; exit } uri = ""; suites = ""; types = "" }
      /^[ \t]*$/ { flush(); next }
      /^Types:/  { sub(/^Types:[ \t]*/, ""); types = $0 }
      /^URIs:/   { sub(/^URIs:[ \t]*/, ""); split($0, u, /[ \t]+/); uri = u[1] }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      END { flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    sed -e 's/\[[^]]*\]//' "$f" | awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2 }'
  done
}
url="$(mirror | head -n1)"
[ -n "$url" ] || die "no Debian mirror for $suite in apt's sources (/etc/apt/sources.list*)"

if ! command -v debootstrap >/dev/null 2>&1; then
  log "installing debootstrap (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2 \
    || die "debootstrap is missing and apt-get could not install it"
fi

mkdir -p "$cache"
work="$(mktemp -d "$cache/.base-standin.XXXXXX")"
rootfs="$work/rootfs"
cleanup() {
  rc=$?
  # debootstrap mounts proc and sys in the target; a failed run may leave them
  for m in $(awk -v r="$rootfs" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$work"
  [ $rc -eq 0 ] || echo "build-image-base: FAILED (exit $rc) building the stand-in base" >&2
}
trap cleanup EXIT

start=$(date +%s)
log "building the STAND-IN base: debootstrap --variant=minbase $suite ($packages, $arch)"
debootstrap --variant=minbase --arch="$arch" --include="$packages" "$suite" "$rootfs" "$url" \
  > "$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed"; }

ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python3"
install -m 0644 "$ca_bundle" "$rootfs/etc/ssl/certs/ca-certificates.crt"
have="$(chroot "$rootfs" /usr/local/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[ "$have" = "$python_minor" ] || die "the stand-in has Python $have, the official base $python_minor"
chroot "$rootfs" dpkg-query -W -f '${Package} ${Version}\n' > "$work/packages"
# nothing of the build host's apt state, logs or mirror in the image
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
       "$rootfs"/var/log/* "$rootfs"/debootstrap "$rootfs"/tmp/*
: > "$rootfs/etc/apt/sources.list"
rm -f "$rootfs"/etc/apt/sources.list.d/* "$rootfs/etc/hostname" "$rootfs/etc/resolv.conf"

tar --numeric-owner -C "$rootfs" -cf "$work/base.tar" .
mv "$work/packages" "$tarball.packages"
mv "$work/base.tar" "$tarball"
# other stand-ins (another checkout's version of this script) unused for a week
find "$cache" -maxdepth 1 -name "base-standin-$suite-*.tar" ! -path "$tarball" -mtime +7 \
  -exec rm -f {} {}.packages \;
log "STAND-IN base built in $(( $(date +%s) - start )) s: $tarball ($(du -m "$tarball" | cut -f1) MiB, Python $have)"
echo "$tarball"
