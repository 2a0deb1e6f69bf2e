#!/usr/bin/env bash
# make bench-operator: the operator started on a fresh local control plane that
# already holds 10,000 injected pods in 1,000 namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/sidecar-operator ./cmd/sidecar-operator
go build -o bin/bench ./hack/bench
hack/control-plane.sh down >/dev/null
hack/control-plane.sh up
trap 'hack/control-plane.sh down >/dev/null' EXIT
bin/bench operator -kubeconfig .local/kubeconfig "$@"
