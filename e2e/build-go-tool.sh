#!/usr/bin/env bash
# Build a Go command-line tool the tests use from the Go module proxy, cached outside the repo
# and keyed by version, like e2e/build-control-plane.sh and e2e/build-alertmanager.sh:
#
#   e2e/build-go-tool.sh promtool [vX.Y.Z]   (default: PROMETHEUS_VERSION of e2e/versions.env)
#   e2e/build-go-tool.sh helm [vX.Y.Z]       (default: HELM_VERSION)
#   e2e/build-go-tool.sh natsauth             (this repo's e2e/natsauth: NATS operator-mode JWTs)
#   e2e/build-go-tool.sh goref                (this repo's bench/goref: the benchmark's Go reference)
#
#   $cache/controlplane/<tool>-<v>/bin/<tool>
#   where $cache = ${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}
#
# promtool and helm build with a plain `go install <module>/cmd/<tool>@<v>` (their go.mod files
# have no replace directives), in module mode with their own go.sum. natsauth and goref are
# local modules (e2e/natsauth, bench/goref; each go.mod and go.sum pin its libraries): `go build
# -mod=readonly` in its directory, and its <v> is a hash of its source (tests/standins/gotools.py
# computes the same), so an edit builds it again. What is cached and answers --version
# (natsauth: `version`) is not built again. Any failure exits non-zero with a message.
# stdout: the bin directory (one line).
# Needs: go (>= the go directive of the tool's go.mod), access to the Go module proxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
tool="${1:-}"
case "$tool" in
  # remove_all_sd: Prometheus' own build tag that leaves out every service discovery plugin
  # (plugins/plugin_*.go: the cloud SDKs, most of the build); `check rules` and `test rules`
  # use none of them (`promtool check service-discovery` would)
  promtool) module="github.com/prometheus/prometheus"; pkg="cmd/promtool"; tags="remove_all_sd"
            version="${2:-${PROMETHEUS_VERSION:?not set in e2e/versions.env}}"
            ver_pkg="github.com/prometheus/common/version"; check=(--version) ;;
  helm)     module="helm.sh/helm/v3"; pkg="cmd/helm"; tags=""
            version="${2:-${HELM_VERSION:?not set in e2e/versions.env}}"
            ver_pkg="helm.sh/helm/v3/internal/version"; check=(version --short) ;;
  # the hash: sha256 of `sha256sum go.mod go.sum main.go` (the files' hashes and names), 16 hex
  natsauth|goref)
            module=""; pkg=""; tags=""
            if [ "$tool" = natsauth ]; then rel="e2e/natsauth"; check=(version)
            else rel="bench/goref"; check=(--version); fi
            src="$(cd "$here/.." && pwd)/$rel"
            [ $# -le 1 ] || { echo "build-go-tool: ERROR: $tool takes no version (its source is)" >&2; exit 1; }
            version="$(cd "$src" && sha256sum go.mod go.sum main.go | sha256sum | cut -c1-16)" ;;
  *) echo "build-go-tool: ERROR: unknown tool '${tool}' (promtool, helm, natsauth or goref)" >&2; exit 1 ;;
esac
case "$tool:$version" in
  natsauth:*|goref:*) ;;
  *:v[0-9]*.*) ;;
  *) echo "build-go-tool: ERROR: unknown version '$version' (vX.Y.Z expected)" >&2; exit 1 ;;
esac

cache_root="${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}/controlplane"
bin="$cache_root/$tool-$version/bin"

log() { echo "build-go-tool: $*" >&2; }
die() { echo "build-go-tool: ERROR: $*" >&2; exit 1; }
trap 'rc=$?; [ $rc -eq 0 ] || echo "build-go-tool: FAILED (exit $rc) building ${tool} ${version}" >&2' EXIT

ok() { [ -x "$bin/$tool" ] && "$bin/$tool" "${check[@]}" >/dev/null 2>&1; }

# One build of a thing at a time on this machine: a second call (another test run, a developer's
# make beside CI) waits here for the first and then finds it cached, instead of removing the
# first one's work directory under it. The lock is the file's, released when this shell exits.
mkdir -p "$cache_root"
exec 9>>"$cache_root/.$tool-$version.lock"
flock 9

if ok; then
  echo "$bin"
  exit 0
fi

command -v go >/dev/null 2>&1 || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null 2>&1 || die "go is not installed (needed to build ${tool})"
export CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" GOFLAGS="${GOFLAGS:-}"

start=$(date +%s)
mkdir -p "$bin"
ldflags="-s -w"
if [ "$tool" = promtool ]; then
  # promtool --version says what it is (Prometheus' own release sets these the same way)
  ldflags+=" -X ${ver_pkg}.Version=${version#v} -X ${ver_pkg}.Branch=HEAD"
  ldflags+=" -X ${ver_pkg}.BuildUser=k8s-event-bridge -X ${ver_pkg}.BuildDate=19700101-00:00:00"
elif [ "$tool" = helm ]; then
  ldflags+=" -X ${ver_pkg}.version=${version}"
fi
if [ -n "${src:-}" ]; then
  # a local module, with the versions its go.sum pins (readonly: a go.mod or go.sum that
  # needs an update fails the build instead of being rewritten)
  log "building ${rel} (${version})"
  (cd "$src" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$bin/$tool" .) \
    || die "go build in $src failed"
else
  log "building ${module}/${pkg}@${version}"
  GOBIN="$bin" go install -trimpath -tags "$tags" -ldflags "$ldflags" "${module}/${pkg}@${version}" \
    || die "go install ${module}/${pkg}@${version} failed"
fi
ok || die "the built $bin/$tool does not run ${check[*]}"
log "built ${tool} ${version} in $(( $(date +%s) - start ))s"
echo "$bin"
