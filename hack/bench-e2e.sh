#!/usr/bin/env bash
# make bench-e2e: sequential pod creates against a local kube-apiserver with
# no webhook, a null webhook and the injection webhook, interleaved.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/sidecar-operator ./cmd/sidecar-operator
go build -o bin/bench ./test/bench
hack/control-plane.sh up
trap 'hack/control-plane.sh down >/dev/null' EXIT
bin/bench e2e -kubeconfig .local/kubeconfig "$@"
