#!/usr/bin/env bash
# Build an OpenTelemetry Collector for the OTLP subscriber's tests from the Go module proxy, with
# the OpenTelemetry Collector Builder of the same release, cached outside the repo and keyed by
# version, like e2e/build-alertmanager.sh:
#
#   e2e/build-otelcol.sh [vX.Y.Z]       (default: OTELCOL_VERSION of e2e/versions.env)
#
#   $cache/controlplane/otelcol-<v>/bin/otelcol
#   where $cache = ${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}
#
# The components are those of e2e/otelcol/builder.yaml (receivers otlp and k8s_events, exporters
# debug and file, the env/file/yaml confmap providers), the versions those of e2e/versions.env
# (OTELCOL_VERSION for every component, OTELCOL_PROVIDERS_VERSION for the providers; the file
# says why that release). Steps: `go install go.opentelemetry.io/collector/cmd/builder@<v>` into
# a work dir, the manifest with the versions put in, then the builder: it generates the main
# package and its go.mod, resolves the modules (failing when one resolves to another version
# than the manifest names) and runs `go build -trimpath -ldflags="-s -w"`. Go's module and
# build caches are the usual ones, shared with the other builds.
#
# What is cached, answers --version and lists the four components the tests use (`otelcol
# components`: otlp, k8s_events, debug, file) is not built again: a component added to the
# manifest goes into that list too (a binary without it is then built again), or comes with a
# new version. Any failure exits non-zero with a message. stdout: the bin directory (one line).
# Needs: go (>= 1.24, the go directive of the generated module), access to the Go module proxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
version="${1:-${OTELCOL_VERSION:?not set in e2e/versions.env}}"
providers="${OTELCOL_PROVIDERS_VERSION:?not set in e2e/versions.env}"
case "$version" in
  v0.[0-9]*.*) ;;
  *) echo "build-otelcol: ERROR: unknown version '$version' (v0.X.Y expected)" >&2; exit 1 ;;
esac

cache_root="${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}/controlplane"
dest="$cache_root/otelcol-$version"
bin="$dest/bin"
work="$dest/work"

log() { echo "build-otelcol: $*" >&2; }
die() { echo "build-otelcol: ERROR: $*" >&2; exit 1; }
trap 'rc=$?; [ $rc -eq 0 ] || echo "build-otelcol: FAILED (exit $rc) building otelcol ${version} (work dir: $work)" >&2' EXIT

# the names `otelcol components` lists for what the tests use
components=(otlp k8s_events debug file)
otelcol_ok() {
  local listed
  [ -x "$bin/otelcol" ] && "$bin/otelcol" --version >/dev/null 2>&1 || return 1
  listed="$("$bin/otelcol" components 2>/dev/null)" || return 1
  for c in "${components[@]}"; do
    grep -Eq "^[[:space:]]*-?[[:space:]]*name: ${c}\$" <<<"$listed" || return 1
  done
}

if otelcol_ok; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null 2>&1 || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null 2>&1 || die "go is not installed (needed to build otelcol)"
export CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" GOFLAGS="${GOFLAGS:-}"

start=$(date +%s)
rm -rf "$work"; mkdir -p "$work/builder" "$work/dist" "$bin"
log "installing the collector builder ${version}"
GOBIN="$work/builder" go install -trimpath -ldflags "-s -w" \
  "go.opentelemetry.io/collector/cmd/builder@${version}" \
  || die "go install go.opentelemetry.io/collector/cmd/builder@${version} failed"

sed -e "s|@OTELCOL_VERSION_NUMBER@|${version#v}|g" -e "s|@OTELCOL_VERSION@|${version}|g" \
    -e "s|@OTELCOL_PROVIDERS_VERSION@|${providers}|g" -e "s|@OUTPUT_PATH@|${work}/dist|g" \
    "$here/otelcol/builder.yaml" > "$work/builder.yaml"
log "building otelcol ${version} (components ${components[*]}, providers ${providers})"
(cd "$work" && "$work/builder/builder" --config "$work/builder.yaml") \
  || die "the collector builder failed (manifest: $work/builder.yaml)"
[ -x "$work/dist/otelcol" ] || die "the builder left no $work/dist/otelcol"
mv -f "$work/dist/otelcol" "$bin/otelcol"
rm -rf "$work"
otelcol_ok || die "the built $bin/otelcol does not run --version or misses one of: ${components[*]}"
log "built otelcol ${version} in $(( $(date +%s) - start ))s"
echo "$bin"
