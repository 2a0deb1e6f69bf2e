#!/usr/bin/env bash
# hack/tool.sh controller-gen|golangci-lint|promtool|helm|crd-ref-docs|cyclonedx-gomod: installs the pinned Go
# tool into bin/tools/ and prints its path. go install leaves an up-to-date
# binary alone; when it makes a new one (the first run, a changed pin), one
# line on stderr says which tool, at which version, and how long it took.
# The go command's output shows only if the build fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

# Each tool's module, the directory of the go.mod that pins it, and its main
# package (the module's cmd/<tool> unless said otherwise).
pkg=
case ${1:-} in
  controller-gen) module=sigs.k8s.io/controller-tools dir=$root ;;
  golangci-lint) module=github.com/golangci/golangci-lint/v2 dir=$root/hack/tools ;;
  promtool) module=github.com/prometheus/prometheus dir=$root/hack/monitoring ;;
  helm) module=helm.sh/helm/v4 dir=$root ;;
  crd-ref-docs) module=github.com/elastic/crd-ref-docs dir=$root/hack/crd-ref-docs pkg=$module ;;
  cyclonedx-gomod) module=github.com/CycloneDX/cyclonedx-gomod dir=$root/hack/sbom ;;
  *) echo "usage: $0 controller-gen|golangci-lint|promtool|helm|crd-ref-docs|cyclonedx-gomod" >&2; exit 2 ;;
esac
pkg=${pkg:-$module/cmd/$1}
export GOBIN=$root/bin/tools
bin=$GOBIN/$1
cd "$dir"
# go install touches an up-to-date binary, so its time says nothing: its
# content does. (go tool buildid would first build buildid, since Go 1.25.)
before=$(cksum "$bin" 2>/dev/null || true)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
quietly "$log" go install "$pkg"
if [ "$(cksum "$bin")" != "$before" ]; then
  took=$(since "$start")
  echo "built $1 ($module $(go list -m -f '{{.Version}}' "$module")) in $took" >&2
fi
echo "$bin"
