#!/usr/bin/env bash
# Build kube-apiserver, kubectl and etcd for the e2e tier from the Go module proxy, cached
# outside the repo and keyed by version:
#
#   ${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}/controlplane/<k8s>-<etcd>/bin
#
# kube-apiserver and kubectl come from k8s.io/kubernetes at KUBERNETES_VERSION through a
# generated wrapper module that replaces every staging module (k8s.io/api, k8s.io/client-go, ...)
# listed in kubernetes' own go.mod with the published k8s.io/<name> v0.<minor>.<patch>.
# etcd comes from a five-line wrapper main calling go.etcd.io/etcd/server/v3/etcdmain.Main.
#
# If all three binaries exist and answer --version it exits 0 at once. Any failure exits non-zero
# with a message. The last line printed on stdout is the bin directory.
# Needs: go (>= the go directive of kubernetes' go.mod), network access to the Go module proxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
: "${KUBERNETES_VERSION:?not set in e2e/versions.env}"
: "${ETCD_VERSION:?not set in e2e/versions.env}"

cache_root="${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}"
dest="$cache_root/controlplane/${KUBERNETES_VERSION}-${ETCD_VERSION}"
bin="$dest/bin"
work="$dest/work"

log() { echo "build-control-plane: $*" >&2; }
die() { echo "build-control-plane: ERROR: $*" >&2; exit 1; }
trap 'rc=$?; [ $rc -eq 0 ] || echo "build-control-plane: FAILED (exit $rc) building control plane ${KUBERNETES_VERSION}/etcd ${ETCD_VERSION}; work dir: $work" >&2' EXIT

binaries_ok() {
  [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kubectl" ] && [ -x "$bin/etcd" ] || return 1
  "$bin/kube-apiserver" --version >/dev/null 2>&1 || return 1
  "$bin/kubectl" version --client >/dev/null 2>&1 || return 1
  "$bin/etcd" --version >/dev/null 2>&1 || return 1
}

if binaries_ok; then
  echo "$bin"
  exit 0
fi

# The toolchain's usual place, for an environment whose PATH does not name it.
command -v go >/dev/null 2>&1 || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null 2>&1 || die "go is not installed (needed to build the control plane)"
start=$(date +%s)
mkdir -p "$bin" "$work"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

# ---------------------------------------------------------------- kube-apiserver + kubectl
k8s_mod_json="$(go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}")" \
  || die "go mod download k8s.io/kubernetes@${KUBERNETES_VERSION} failed"
k8s_gomod="$(printf '%s\n' "$k8s_mod_json" | sed -n 's/^[[:space:]]*"GoMod":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p')"
[ -f "$k8s_gomod" ] || die "could not locate kubernetes' go.mod (download said: $k8s_mod_json)"

# Staging modules: every `k8s.io/<name> => ./staging/src/k8s.io/<name>` replace in kubernetes' go.mod.
mapfile -t staging < <(go mod edit -json "$k8s_gomod" \
  | tr -d ' \t\n' \
  | grep -o '"Old":{"Path":"[^"]*"[^}]*},"New":{"Path":"\./staging/[^"]*"' \
  | sed 's/^"Old":{"Path":"\([^"]*\)".*/\1/' | sort -u)
[ "${#staging[@]}" -gt 10 ] || die "found only ${#staging[@]} staging replaces in $k8s_gomod"
go_directive="$(go mod edit -json "$k8s_gomod" | sed -n 's/^[[:space:]]*"Go":[[:space:]]*"\([^"]*\)".*/\1/p' | head -1)"
[ -n "$go_directive" ] || die "no go directive in $k8s_gomod"

ver="${KUBERNETES_VERSION#v}"
major="${ver%%.*}"; rest="${ver#*.}"; minor="${rest%%.*}"
staging_version="v0.${rest}"   # v1.36.3 -> v0.36.3
log "kubernetes ${KUBERNETES_VERSION}: ${#staging[@]} staging modules -> ${staging_version} (go ${go_directive})"

kw="$work/kubernetes"
rm -rf "$kw"; mkdir -p "$kw"
{
  echo "module k8s-event-bridge.local/controlplane/kubernetes"
  echo
  echo "go ${go_directive}"
  echo
  echo "require k8s.io/kubernetes ${KUBERNETES_VERSION}"
  echo
  echo "replace ("
  for m in "${staging[@]}"; do echo "	$m => $m ${staging_version}"; done
  echo ")"
} > "$kw/go.mod"

log "resolving kube-apiserver and kubectl dependencies"
(cd "$kw" && go get "k8s.io/kubernetes/cmd/kube-apiserver@${KUBERNETES_VERSION}" "k8s.io/kubernetes/cmd/kubectl@${KUBERNETES_VERSION}") \
  || die "go get of k8s.io/kubernetes ${KUBERNETES_VERSION} commands failed"

commit="$(printf '%s\n' "$k8s_mod_json" | sed -n 's/^[[:space:]]*"Hash":[[:space:]]*"\([0-9a-f]*\)".*/\1/p' | head -1)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${KUBERNETES_VERSION} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
  [ -z "$commit" ] || ldflags+=" -X ${pkg}.gitCommit=${commit}"
done

for cmd in kube-apiserver kubectl; do
  log "compiling $cmd"
  (cd "$kw" && go build -trimpath -ldflags "$ldflags" -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd") \
    || die "go build k8s.io/kubernetes/cmd/$cmd failed"
  mv -f "$bin/$cmd.tmp" "$bin/$cmd"
done

# ---------------------------------------------------------------- etcd
ew="$work/etcd"
rm -rf "$ew"; mkdir -p "$ew"
cat > "$ew/main.go" <<'GO'
package main

import ("os"; "go.etcd.io/etcd/server/v3/etcdmain")

func main() { etcdmain.Main(os.Args) }
GO
gofmt -w "$ew/main.go"
printf 'module k8s-event-bridge.local/controlplane/etcd\n\ngo %s\n' "$go_directive" > "$ew/go.mod"
log "resolving etcd ${ETCD_VERSION}"
(cd "$ew" && go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" && go mod tidy) \
  || die "resolving go.etcd.io/etcd/server/v3@${ETCD_VERSION} failed"
log "compiling etcd"
(cd "$ew" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" .) || die "go build etcd failed"
mv -f "$bin/etcd.tmp" "$bin/etcd"

binaries_ok || die "built binaries do not run --version (see $bin)"
log "built in $(( $(date +%s) - start ))s: $("$bin/kube-apiserver" --version), $("$bin/etcd" --version | head -1)"
echo "$bin"
