#!/usr/bin/env bash
# make demo: a local control plane, the operator, the examples and an injected pod.
# DEMO_KEEP=1 leaves the control plane and the operator running. NODE=1 runs
# hack/demo-node.sh instead: the same with a node, so that the pods run.
# WEBHOOK_PORT, METRICS_PORT and PROBE_PORT move the operator's listeners.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "${NODE:-}" = 1 ]; then exec hack/demo-node.sh; fi
WEBHOOK_PORT=${WEBHOOK_PORT:-9443}
METRICS_PORT=${METRICS_PORT:-8443}
PROBE_PORT=${PROBE_PORT:-8081}
export KUBECONFIG="$root/.local/kubeconfig"

cleanup() {
  if [ "${DEMO_KEEP:-}" = 1 ]; then
    echo
    echo "DEMO_KEEP=1: left running. KUBECONFIG=$KUBECONFIG; stop with: make control-plane-down; kill \$(cat .local/operator.pid)"
    return
  fi
  [ -f .local/operator.pid ] && kill "$(cat .local/operator.pid)" 2>/dev/null && rm -f .local/operator.pid
  hack/control-plane.sh down >/dev/null
  echo "demo torn down"
}

echo "== building"
go build -ldflags "${GO_LDFLAGS:-}" -o bin/sidecar-operator ./cmd/sidecar-operator
go build -o bin/demo ./hack/demo
echo "== starting the control plane"
hack/control-plane.sh up
trap cleanup EXIT
bin/demo -step crds

# The webhook answers only the apiserver, by the client certificate
# hack/control-plane.sh gave it; its probes answer on the plain port.
echo "== running the operator: bin/sidecar-operator run --kubeconfig .local/kubeconfig --client-ca-file .local/pki/webhook-client-ca.crt"
bin/sidecar-operator run --kubeconfig .local/kubeconfig --metrics-bind-address "127.0.0.1:$METRICS_PORT" \
  --webhook-addr "127.0.0.1:$WEBHOOK_PORT" --health-probe-bind-address ":$PROBE_PORT" \
  --client-ca-file .local/pki/webhook-client-ca.crt > .local/operator.log 2>&1 &
echo $! > .local/operator.pid
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PROBE_PORT/readyz" >/dev/null 2>&1 && break
  kill -0 "$(cat .local/operator.pid)" 2>/dev/null || { cat .local/operator.log >&2; exit 1; }
  sleep 0.2
done
curl -sf "http://127.0.0.1:$PROBE_PORT/readyz" >/dev/null || { echo "operator not ready" >&2; cat .local/operator.log >&2; exit 1; }
echo "operator ready; webhook registered as MutatingWebhookConfiguration sidecar-operator"

echo "== applying examples/fluentd.yaml, examples/xxl-agent.yaml and examples/workloads/pod.yaml"
bin/demo -step apply

echo
echo "== sidecar-operator verify --sidecar fluentd -n demo   (a server-side dry-run pod: nothing is stored)"
bin/sidecar-operator verify --kubeconfig .local/kubeconfig --sidecar fluentd -n demo

echo
echo "== sidecar-operator status"
for _ in $(seq 1 50); do
  bin/sidecar-operator status --kubeconfig .local/kubeconfig -n demo -o json | grep -q '"current": 1' && break
  sleep 0.2
done
bin/sidecar-operator status --kubeconfig .local/kubeconfig -n demo

echo
echo "== the admin API: GET https://127.0.0.1:$METRICS_PORT/admin/v1/sidecars with the admin's token"
token=$(awk -F, '{print $1}' .local/pki/tokens.csv)
curl -sfk -H "Authorization: Bearer $token" "https://127.0.0.1:$METRICS_PORT/admin/v1/sidecars" | head -20
echo "   ... and without a token: HTTP $(curl -sk -o /dev/null -w '%{http_code}' "https://127.0.0.1:$METRICS_PORT/admin/v1/sidecars")"
