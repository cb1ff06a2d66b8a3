#!/usr/bin/env bash
# Build Prometheus Alertmanager from the Go module proxy for the alerting subscriber's tests,
# cached outside the repo and keyed by version, like e2e/build-control-plane.sh:
#
#   e2e/build-alertmanager.sh [vX.Y.Z]          (default: ALERTMANAGER_VERSION of e2e/versions.env)
#
#   $cache/controlplane/alertmanager-<v>/bin/alertmanager
#   where $cache = ${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}
#
# Why not `go install github.com/prometheus/alertmanager/cmd/alertmanager@<v>`: it fails with
# "ui/web.go: pattern app/dist: no matching files found". The web UI's built assets (ui/app/dist,
# made by npm in the release pipeline) are embedded with //go:embed but are not part of the
# module. So: `go mod download` the module, copy it to a work dir, put two placeholder pages
# where the UI's builds go (ui/app/dist/elm and ui/app/dist/mantine: "UI not built: the API is
# whole") and `go build ./cmd/alertmanager` inside the copy, with its own go.mod and go.sum. The
# HTTP API (/api/v2/...), routing, grouping, notifications and /-/ready are all there; only the
# pages at / are placeholders.
#
# What is cached and answers --version is not built again. Any failure exits non-zero with a
# message. stdout: the bin directory (one line).
# Needs: go (>= the go directive of alertmanager's go.mod), access to the Go module proxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
version="${1:-${ALERTMANAGER_VERSION:?not set in e2e/versions.env}}"
case "$version" in
  v[0-9]*.*) ;;
  *) echo "build-alertmanager: ERROR: unknown version '$version' (vX.Y.Z expected)" >&2; exit 1 ;;
esac

cache_root="${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}/controlplane"
dest="$cache_root/alertmanager-$version"
bin="$dest/bin"
work="$dest/work"

log() { echo "build-alertmanager: $*" >&2; }
die() { echo "build-alertmanager: ERROR: $*" >&2; exit 1; }
trap 'rc=$?; [ $rc -eq 0 ] || echo "build-alertmanager: FAILED (exit $rc) building alertmanager ${version} (work dir: $work)" >&2' EXIT

am_ok() { [ -x "$bin/alertmanager" ] && "$bin/alertmanager" --version >/dev/null 2>&1; }

# One build of a thing at a time on this machine: a second call (another test run, a developer's
# make beside CI) waits here for the first and then finds it cached, instead of removing the
# first one's work directory under it. The lock is the file's, released when this shell exits.
mkdir -p "$cache_root"
exec 9>>"$cache_root/.alertmanager-$version.lock"
flock 9

if am_ok; then
  echo "$bin"
  exit 0
fi

# The toolchain's usual place, for an environment whose PATH does not name it.
command -v go >/dev/null 2>&1 || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null 2>&1 || die "go is not installed (needed to build alertmanager)"
export CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
# The copy has its own go.mod and go.sum: build exactly what they pin (no GOFLAGS=-mod=mod).
export GOFLAGS="${GOFLAGS:-}"

start=$(date +%s)
module="github.com/prometheus/alertmanager"
log "downloading ${module}@${version}"
mod_json="$(go mod download -json "${module}@${version}")" \
  || die "go mod download ${module}@${version} failed: ${mod_json:-no output}"
src="$(printf '%s\n' "$mod_json" | sed -n 's/^[[:space:]]*"Dir":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p')"
[ -n "$src" ] && [ -f "$src/go.mod" ] || die "could not locate the module's directory (download said: $mod_json)"

rm -rf "$work"; mkdir -p "$work" "$bin"
cp -R "$src/." "$work/src"
chmod -R u+w "$work/src"   # the module cache is read-only
for ui in elm mantine; do
  mkdir -p "$work/src/ui/app/dist/$ui"
  cat > "$work/src/ui/app/dist/$ui/index.html" <<'HTML'
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Alertmanager</title></head>
<body><p>UI not built: the API is whole (/api/v2/). Built by k8s-event-bridge's e2e/build-alertmanager.sh.</p></body></html>
HTML
done

commit="$(printf '%s\n' "$mod_json" | sed -n 's/^[[:space:]]*"Hash":[[:space:]]*"\([0-9a-f]*\)".*/\1/p' | head -1)"
pkg="github.com/prometheus/common/version"
ldflags="-s -w -X ${pkg}.Version=${version#v} -X ${pkg}.Branch=HEAD"
ldflags+=" -X ${pkg}.BuildUser=k8s-event-bridge -X ${pkg}.BuildDate=19700101-00:00:00"
[ -z "$commit" ] || ldflags+=" -X ${pkg}.Revision=${commit}"
log "compiling alertmanager ${version}"
(cd "$work/src" && go build -trimpath -tags netgo -ldflags "$ldflags" -o "$bin/alertmanager.tmp" ./cmd/alertmanager) \
  || die "go build of ${module}/cmd/alertmanager ${version} failed"
mv -f "$bin/alertmanager.tmp" "$bin/alertmanager"
rm -rf "$work"
am_ok || die "the built $bin/alertmanager does not run --version"
log "built alertmanager ${version} in $(( $(date +%s) - start ))s"
echo "$bin"
