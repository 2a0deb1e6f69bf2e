#!/usr/bin/env bash
# make bench-operator: the operator started on a fresh local control plane that
# already holds PODS injected pods (10,000) in NAMESPACES namespaces (1,000).
set -euo pipefail
cd "$(dirname "$0")/.."
go build -ldflags "${GO_LDFLAGS:-}" -o bin/sidecar-operator ./cmd/sidecar-operator
go build -o bin/bench ./test/bench
hack/control-plane.sh down >/dev/null
hack/control-plane.sh up
trap 'hack/control-plane.sh down >/dev/null' EXIT
bin/bench operator -kubeconfig .local/kubeconfig -pods "${PODS:-10000}" -namespaces "${NAMESPACES:-1000}" "$@"
