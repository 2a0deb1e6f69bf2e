#!/usr/bin/env bash
# make bench-e2e: sequential pod creates against a local kube-apiserver with
# no webhook, null webhooks, the injection webhook and, when Kyverno is built
# (KYVERNO, or hack/build-kyverno.sh's binary), Kyverno injecting the same
# sidecars by a policy, interleaved.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -ldflags "${GO_LDFLAGS:-}" -o bin/sidecar-operator ./cmd/sidecar-operator
go build -o bin/bench ./test/bench
kyverno=${KYVERNO:-}
if [ -z "$kyverno" ]; then
  version=$(cd hack/kyverno && GOTOOLCHAIN=local go list -m -f '{{.Version}}' github.com/kyverno/kyverno)
  if [ -x "bin/kyverno/$version/kyverno" ]; then kyverno=bin/kyverno/$version/kyverno; fi
fi
hack/control-plane.sh up
trap 'hack/control-plane.sh down >/dev/null' EXIT
bin/bench e2e -kubeconfig .local/kubeconfig -kyverno "$kyverno" "$@"
