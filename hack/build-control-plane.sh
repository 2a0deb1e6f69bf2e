#!/usr/bin/env bash
# Builds kube-apiserver and kube-controller-manager (from the k8s.io/kubernetes
# module) and etcd (from go.etcd.io/etcd/server/v3) into bin/k8s/<kube>-<etcd>/,
# once per version pair. The controller-manager runs Deployments for the tests
# of verify --workload and rollout. With NODE=1 it also builds kubelet,
# kube-scheduler and kubectl (test/install re-applies the install with it, as
# users do) from the same module, adding them to an existing directory.
# Prints the directory, which is what KUBEBUILDER_ASSETS should point at, and
# on stderr one line per build: what, from which module, how long. The go
# command's output shows only if a build fails.
set -euo pipefail

ETCD_VERSION=${ETCD_VERSION:-3.6.8}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
KUBE_VERSION=$(kube_version)
out="$root/bin/k8s/$KUBE_VERSION-$ETCD_VERSION"

kube_cmds=(kube-apiserver kube-controller-manager)
[ "${NODE:-}" = 1 ] && kube_cmds+=(kubelet kube-scheduler kubectl)
# Each reports the version it was built as (-ldflags below); one that does
# not, built before they were stamped, is built again.
stamped() {
  if [ "$1" = kubectl ]; then "$out/$1" version --client 2>/dev/null; else "$out/$1" --version 2>/dev/null; fi |
    grep -q "v$KUBE_VERSION\b"
}
missing=()
for cmd in "${kube_cmds[@]}"; do { [ -x "$out/$cmd" ] && stamped "$cmd"; } || missing+=("$cmd"); done

if [ ${#missing[@]} = 0 ] && [ -x "$out/etcd" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

build_etcd() {
  mkdir -p "$work/etcd" && cd "$work/etcd"
  go mod init control-plane/etcd
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  go mod tidy
  CGO_ENABLED=0 go build -trimpath -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$out/etcd.tmp" "$out/etcd"
}

build_kube() {
  mkdir -p "$work/kube" && cd "$work/kube"
  go mod init control-plane/kube
  # Only the missing commands: tidy then keeps what they need, and no more.
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${missing[@]}"
    printf ')\n'
  } > tools.go
  go mod edit -require "k8s.io/kubernetes@v$KUBE_VERSION"
  # A dependent module ignores upstream's "=> ./staging/..." replaces: map each
  # staging module to its own v0.Y.Z release instead.
  go mod download "k8s.io/kubernetes@v$KUBE_VERSION"
  upstream_mod=$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$KUBE_VERSION.mod
  staging_version="v0.${KUBE_VERSION#1.}"
  awk '/=> \.\/staging\// {print $1}' "$upstream_mod" | sort -u | while read -r mod; do
    go mod edit -replace "$mod=$mod@$staging_version"
  done
  go mod tidy
  # As Kubernetes' own build stamps them: /version, the node's kubeletVersion
  # and --version say the version, not v0.0.0-master.
  local minor=${KUBE_VERSION#1.} ldflags=()
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=("-X $pkg.gitVersion=v$KUBE_VERSION" "-X $pkg.gitMajor=1" "-X $pkg.gitMinor=$minor" "-X $pkg.gitTreeState=clean")
  done
  for cmd in "${missing[@]}"; do
    CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags[*]}" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
}

if [ ! -x "$out/etcd" ]; then
  start=$SECONDS
  quietly "$work/etcd.log" build_etcd
  echo "built etcd (go.etcd.io/etcd/server/v3 v$ETCD_VERSION) in $(since "$start")" >&2
fi
if [ ${#missing[@]} != 0 ]; then
  start=$SECONDS
  quietly "$work/kube.log" build_kube
  printf -v names '%s, ' "${missing[@]}"
  echo "built ${names%, } (k8s.io/kubernetes v$KUBE_VERSION) in $(since "$start")" >&2
fi
echo "$out"
