#!/usr/bin/env bash
# Build the real parts of the e2e tier from the Go module proxy, cached outside the repo and keyed
# by version:
#
#   e2e/build-control-plane.sh [--living] [--node] [newest|oldest|all|vX.Y.Z ...]   (default: newest)
#
#   $cache/controlplane/kubernetes-<k8s>/bin   kube-apiserver kubectl (the control plane), with
#                                              --living also kube-scheduler kube-controller-manager
#                                              (the living cluster), with --node also kubelet
#                                              kube-proxy (a real node: tests/node), and symlinks to:
#   $cache/controlplane/etcd-<etcd>/bin/etcd
#   $cache/controlplane/kwok-<kwok>/bin/kwok   (--living only)
#   where $cache = ${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}
#
# Without --living it builds what a control plane runs (etcd, kube-apiserver, kubectl): the e2e
# tier on the oldest version needs no more (docs/e2e.md says why); the living cluster of
# tests/standins/cluster.py (the newest version's tier, make demo-cluster) needs --living.
#
# The Kubernetes commands come from k8s.io/kubernetes through a generated wrapper module that
# replaces every staging module (k8s.io/api, k8s.io/client-go, ...) listed in kubernetes' own
# go.mod with the published k8s.io/<name> v0.<minor>.<patch>; one `go build` compiles them,
# sharing every package. etcd comes from a five-line wrapper main calling etcdmain.Main; kwok is
# `go install`ed (its go.mod has no replaces). Versions: e2e/versions.env.
#
# What is cached and answers --version is not built again (a version built with --living serves
# a plain call too; asked for more commands than are cached, it builds only those missing). Any
# failure exits non-zero with a message. stdout: one bin directory per version asked for, in
# order (the last line is the last).
# Needs: go (>= the go directive of kubernetes' go.mod), access to the Go module proxy.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
: "${KUBERNETES_NEWEST:?not set in e2e/versions.env}"
: "${KUBERNETES_OLDEST:?not set in e2e/versions.env}"
: "${ETCD_VERSION:?not set in e2e/versions.env}"
: "${KWOK_VERSION:?not set in e2e/versions.env}"

cache_root="${K8S_EVENT_BRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-event-bridge}/controlplane"

log() { echo "build-control-plane: $*" >&2; }
die() { echo "build-control-plane: ERROR: $*" >&2; exit 1; }
current="setup"
trap 'rc=$?; [ $rc -eq 0 ] || echo "build-control-plane: FAILED (exit $rc) building $current" >&2' EXIT

living=""; node=""
while [ $# -gt 0 ]; do
  case "$1" in
    --living) living=1; shift ;;
    --node) node=1; shift ;;
    *) break ;;
  esac
done
cmds=(kube-apiserver kubectl)
[ -z "$living" ] || cmds+=(kube-scheduler kube-controller-manager)
[ -z "$node" ] || cmds+=(kubelet kube-proxy)

wanted=()
[ $# -gt 0 ] || set -- newest
for a in "$@"; do
  case "$a" in
    newest) wanted+=("$KUBERNETES_NEWEST") ;;
    oldest) wanted+=("$KUBERNETES_OLDEST") ;;
    all) wanted+=("$KUBERNETES_NEWEST" "$KUBERNETES_OLDEST") ;;
    v1.*) wanted+=("$a") ;;
    *) die "unknown version '$a' (newest, oldest, all or vX.Y.Z)" ;;
  esac
done

cmd_ok() {
  local bin="$1" c="$2"
  [ -x "$bin/$c" ] || return 1
  if [ "$c" = kubectl ]; then "$bin/kubectl" version --client >/dev/null 2>&1
  else "$bin/$c" --version >/dev/null 2>&1; fi
}
k8s_ok() {
  local bin="$1" c
  for c in "${cmds[@]}"; do cmd_ok "$bin" "$c" || return 1; done
}
# the commands asked for that are not cached (or do not run)
missing() {
  local bin="$1" c
  for c in "${cmds[@]}"; do cmd_ok "$bin" "$c" || echo "$c"; done
}
etcd_bin="$cache_root/etcd-${ETCD_VERSION}/bin"
kwok_bin="$cache_root/kwok-${KWOK_VERSION}/bin"
etcd_ok() { [ -x "$etcd_bin/etcd" ] && "$etcd_bin/etcd" --version >/dev/null 2>&1; }
kwok_ok() { [ -z "$living" ] || { [ -x "$kwok_bin/kwok" ] && "$kwok_bin/kwok" --version >/dev/null 2>&1; }; }

go_ready=""
need_go() {
  [ -z "$go_ready" ] || return 0
  # The toolchain's usual place, for an environment whose PATH does not name it.
  command -v go >/dev/null 2>&1 || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
  command -v go >/dev/null 2>&1 || die "go is not installed (needed to build the control plane)"
  export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod" GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
  go_ready=1
}

build_kubernetes() {
  local version="$1" dest="$cache_root/kubernetes-$1"
  local bin="$dest/bin" kw="$dest/work"
  local todo
  mapfile -t todo < <(missing "$bin")
  current="kubernetes ${version} (work dir: $kw)"
  need_go
  mkdir -p "$bin"
  local mod_json gomod go_directive ver major rest minor staging_version commit ldflags pkg
  mod_json="$(go mod download -json "k8s.io/kubernetes@${version}")" \
    || die "go mod download k8s.io/kubernetes@${version} failed"
  gomod="$(printf '%s\n' "$mod_json" | sed -n 's/^[[:space:]]*"GoMod":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p')"
  [ -f "$gomod" ] || die "could not locate kubernetes' go.mod (download said: $mod_json)"
  # Staging modules: every `k8s.io/<name> => ./staging/src/k8s.io/<name>` replace in its go.mod.
  local staging
  mapfile -t staging < <(go mod edit -json "$gomod" \
    | tr -d ' \t\n' \
    | grep -o '"Old":{"Path":"[^"]*"[^}]*},"New":{"Path":"\./staging/[^"]*"' \
    | sed 's/^"Old":{"Path":"\([^"]*\)".*/\1/' | sort -u)
  [ "${#staging[@]}" -gt 10 ] || die "found only ${#staging[@]} staging replaces in $gomod"
  go_directive="$(go mod edit -json "$gomod" | sed -n 's/^[[:space:]]*"Go":[[:space:]]*"\([^"]*\)".*/\1/p' | head -1)"
  [ -n "$go_directive" ] || die "no go directive in $gomod"
  ver="${version#v}"; major="${ver%%.*}"; rest="${ver#*.}"; minor="${rest%%.*}"
  staging_version="v0.${rest}"   # v1.37.2 -> v0.37.2
  log "kubernetes ${version}: ${#staging[@]} staging modules -> ${staging_version} (go ${go_directive})"

  rm -rf "$kw"; mkdir -p "$kw"
  {
    echo "module k8s-event-bridge.local/controlplane/kubernetes"
    echo
    echo "go ${go_directive}"
    echo
    echo "require k8s.io/kubernetes ${version}"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do echo "	$m => $m ${staging_version}"; done
    echo ")"
  } > "$kw/go.mod"
  local pkgs=() c
  for c in "${todo[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  log "resolving ${todo[*]} ${version}"
  (cd "$kw" && go get "${pkgs[@]/%/@${version}}") || die "go get of k8s.io/kubernetes ${version} commands failed"

  commit="$(printf '%s\n' "$mod_json" | sed -n 's/^[[:space:]]*"Hash":[[:space:]]*"\([0-9a-f]*\)".*/\1/p' | head -1)"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
    [ -z "$commit" ] || ldflags+=" -X ${pkg}.gitCommit=${commit}"
  done
  log "compiling ${todo[*]} ${version}"
  rm -rf "$kw/out"; mkdir -p "$kw/out"
  (cd "$kw" && go build -trimpath -ldflags "$ldflags" -o "$kw/out/" "${pkgs[@]}") \
    || die "go build of k8s.io/kubernetes ${version} commands failed"
  for c in "${todo[@]}"; do mv -f "$kw/out/$c" "$bin/$c"; done
  rm -rf "$kw"
}

build_etcd() {
  current="etcd ${ETCD_VERSION}"
  need_go
  local ew="$cache_root/etcd-${ETCD_VERSION}/work"
  rm -rf "$ew"; mkdir -p "$ew" "$etcd_bin"
  cat > "$ew/main.go" <<'GO'
package main

import ("os"; "go.etcd.io/etcd/server/v3/etcdmain")

func main() { etcdmain.Main(os.Args) }
GO
  gofmt -w "$ew/main.go"
  printf 'module k8s-event-bridge.local/controlplane/etcd\n\ngo 1.24\n' > "$ew/go.mod"
  log "resolving etcd ${ETCD_VERSION}"
  (cd "$ew" && go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" && go mod tidy) \
    || die "resolving go.etcd.io/etcd/server/v3@${ETCD_VERSION} failed"
  log "compiling etcd ${ETCD_VERSION}"
  (cd "$ew" && go build -trimpath -ldflags "-s -w" -o "$etcd_bin/etcd.tmp" .) || die "go build etcd failed"
  mv -f "$etcd_bin/etcd.tmp" "$etcd_bin/etcd"
  rm -rf "$ew"
}

build_kwok() {
  current="kwok ${KWOK_VERSION}"
  need_go
  mkdir -p "$kwok_bin"
  log "compiling kwok ${KWOK_VERSION}"
  GOBIN="$kwok_bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}" || die "go install sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION} failed"
}

# One build of a thing at a time on this machine: a second call (another test run, a developer's
# make beside CI) waits for the first and then finds it cached, instead of removing the first
# one's work directory under it (a build of each version holds its own lock, on fd 9).
take_lock() { mkdir -p "$cache_root"; exec 9>>"$cache_root/.$1.lock"; flock 9; }
drop_lock() { flock -u 9; exec 9>&-; }

start=$(date +%s)
built=""
take_lock "etcd-${ETCD_VERSION}"
etcd_ok || { build_etcd; built+=" etcd"; }
drop_lock
take_lock "kwok-${KWOK_VERSION}"
kwok_ok || { build_kwok; built+=" kwok"; }
drop_lock
for version in "${wanted[@]}"; do
  bin="$cache_root/kubernetes-$version/bin"
  take_lock "kubernetes-$version"
  k8s_ok "$bin" || { build_kubernetes "$version"; built+=" kubernetes-$version"; }
  drop_lock
  ln -sfn "$etcd_bin/etcd" "$bin/etcd"
  [ -z "$living" ] || ln -sfn "$kwok_bin/kwok" "$bin/kwok"
  current="kubernetes ${version}"
  k8s_ok "$bin" && etcd_ok && kwok_ok || die "built binaries do not run --version (see $bin)"
done
[ -z "$built" ] || log "built${built} in $(( $(date +%s) - start ))s"
for version in "${wanted[@]}"; do echo "$cache_root/kubernetes-$version/bin"; done
