#!/usr/bin/env bash
# Starts or stops a local control plane (etcd, kube-apiserver and
# kube-controller-manager for Deployments and ReplicaSets) on loopback.
#   hack/control-plane.sh up    -> writes an admin kubeconfig to .local/kubeconfig,
#                                  and the CA of the apiserver's client
#                                  certificate for webhooks to
#                                  .local/pki/webhook-client-ca.crt
#   hack/control-plane.sh down  -> removes the node if there is one, then stops
#                                  the apiserver first, then etcd
# NODE=1 up also runs a kubelet node with containerd and a scheduler
# (hack/node.sh), so pods run; the apiserver and the controller-manager then
# issue ServiceAccount tokens. API_PORT and ETCD_PORT move the listeners;
# STATE_DIR, where their files go (default .local; see hack/lib.sh).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
API_PORT=${API_PORT:-6443}
ETCD_PORT=${ETCD_PORT:-2379}
NODE=${NODE:-}
export API_PORT NODE

# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

kubeconfig() { # file user token
  cat > "$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$API_PORT
    insecure-skip-tls-verify: true
users:
- name: $2
  user:
    token: $3
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
KC
}

# The kubelet's client CA, and the certificate the apiserver presents to the
# kubelet with it (system:masters, so the kubelet's webhook authorizer lets it
# read logs and exec).
node_pki() {
  local pki="$state/pki"
  [ -f "$pki/kubelet-ca.crt" ] || openssl req -x509 -newkey rsa:2048 -nodes -days 3650 \
    -subj /CN=local-kubelet-client-ca -keyout "$pki/kubelet-ca.key" -out "$pki/kubelet-ca.crt" 2>/dev/null
  [ -f "$pki/apiserver-kubelet-client.crt" ] || openssl req -newkey rsa:2048 -nodes \
    -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" -keyout "$pki/apiserver-kubelet-client.key" 2>/dev/null |
    openssl x509 -req -days 3650 -set_serial "0x$(openssl rand -hex 8)" \
      -CA "$pki/kubelet-ca.crt" -CAkey "$pki/kubelet-ca.key" -out "$pki/apiserver-kubelet-client.crt" 2>/dev/null
}

# The apiserver's client certificate for admission webhooks, and its CA,
# which the operator requires (--client-ca-file "$state/pki/webhook-client-ca.crt"):
# only the apiserver can then send the webhook a review. The
# AdmissionConfiguration names a kubeconfig whose user "*" the apiserver
# presents to every webhook.
webhook_client_pki() {
  local pki="$state/pki"
  [ -f "$pki/webhook-client-ca.crt" ] || openssl req -x509 -newkey rsa:2048 -nodes -days 3650 \
    -subj /CN=local-webhook-client-ca -keyout "$pki/webhook-client-ca.key" -out "$pki/webhook-client-ca.crt" 2>/dev/null
  [ -f "$pki/apiserver-webhook-client.crt" ] || openssl req -newkey rsa:2048 -nodes \
    -subj /CN=kube-apiserver -keyout "$pki/apiserver-webhook-client.key" 2>/dev/null |
    openssl x509 -req -days 3650 -set_serial "0x$(openssl rand -hex 8)" -extfile <(echo extendedKeyUsage=clientAuth) \
      -CA "$pki/webhook-client-ca.crt" -CAkey "$pki/webhook-client-ca.key" -out "$pki/apiserver-webhook-client.crt" 2>/dev/null
  cat > "$state/webhook-client.kubeconfig" <<KC
apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: $pki/apiserver-webhook-client.crt
    client-key: $pki/apiserver-webhook-client.key
KC
  cat > "$state/admission.yaml" <<AC
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $state/webhook-client.kubeconfig
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $state/webhook-client.kubeconfig
AC
}

up() {
  # Before anything is built or started: a host that cannot run the node says why.
  [ "$NODE" = 1 ] && "$root/hack/node.sh" check
  local assets; assets=$("$root/hack/build-control-plane.sh")
  mkdir -p "$state/pki"
  if [ -f "$state/kube-apiserver.pid" ] && kill -0 "$(cat "$state/kube-apiserver.pid")" 2>/dev/null; then
    if [ "$NODE" = 1 ] && [ ! -f "$state/node-mode" ]; then
      echo "the control plane runs without NODE=1; run $0 down first" >&2
      exit 1
    fi
    echo "control plane already running; kubeconfig: $state/kubeconfig"
    [ "$NODE" = 1 ] && "$root/hack/node.sh" up
    return 0
  fi
  rm -rf "$state/etcd"
  [ -f "$state/pki/sa.key" ] || openssl genrsa -out "$state/pki/sa.key" 2048 2>/dev/null
  local token; token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$token,admin,admin,system:masters" > "$state/pki/tokens.csv"
  webhook_client_pki

  # Without a node, nothing creates ServiceAccounts, so the ServiceAccount
  # admission plugin would refuse every pod ("serviceaccount default not
  # found"), as envtest's default does; with one, the controller-manager makes
  # them and pods get tokens. The Node authorizer confines the kubelet's token.
  local node_flags=(--disable-admission-plugins ServiceAccount --authorization-mode RBAC)
  rm -f "$state/node-mode"
  if [ "$NODE" = 1 ]; then
    node_pki
    local node; node=$(hostname | tr '[:upper:]' '[:lower:]')
    local kubelet_token scheduler_token
    kubelet_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    scheduler_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    echo "$kubelet_token,system:node:$node,system:node:$node,system:nodes" >> "$state/pki/tokens.csv"
    echo "$scheduler_token,system:kube-scheduler,system:kube-scheduler" >> "$state/pki/tokens.csv"
    kubeconfig "$state/kubelet.kubeconfig" "system:node:$node" "$kubelet_token"
    kubeconfig "$state/scheduler.kubeconfig" system:kube-scheduler "$scheduler_token"
    # The apiserver reaches webhooks behind a Service at a ready endpoint of
    # its EndpointSlices (the endpointslice controller's, below), a pod IP
    # on cni0: no kube-proxy serves ClusterIPs here.
    node_flags=(--authorization-mode "Node,RBAC"
      --kubelet-client-certificate "$state/pki/apiserver-kubelet-client.crt"
      --kubelet-client-key "$state/pki/apiserver-kubelet-client.key"
      --enable-aggregator-routing)
    touch "$state/node-mode"
  fi

  daemon etcd "$assets/etcd" --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "default=http://127.0.0.1:$((ETCD_PORT + 1))" --unsafe-no-fsync

  daemon kube-apiserver "$assets/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --cert-dir "$state/pki" --secure-port "$API_PORT" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$state/pki/sa.key" --service-account-signing-key-file "$state/pki/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 "${node_flags[@]}" \
    --token-auth-file "$state/pki/tokens.csv" --endpoint-reconciler-type none \
    --admission-control-config-file "$state/admission.yaml"

  kubeconfig "$state/kubeconfig" admin "$token"
  for _ in $(seq 1 120); do
    if curl -sfk -H "Authorization: Bearer $token" "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1; then
      local controllers=deployment,replicaset,statefulset,daemonset,garbagecollector cm_flags=()
      if [ "$NODE" = 1 ]; then
        # Pods get a token from the default ServiceAccount and the apiserver's
        # CA (the second certificate of its self-signed chain) from the
        # kube-root-ca.crt ConfigMap; node-lifecycle lifts the node's
        # not-ready taint once it is Ready.
        awk '/BEGIN/ {n++} n == 2' "$state/pki/apiserver.crt" > "$state/pki/apiserver-ca.crt"
        controllers+=,serviceaccount-controller,serviceaccount-token-controller
        controllers+=,root-ca-certificate-publisher-controller,node-lifecycle-controller,endpointslice-controller
        cm_flags=(--service-account-private-key-file "$state/pki/sa.key" --root-ca-file "$state/pki/apiserver-ca.crt")
      fi
      # Without NODE=1, no scheduler or kubelet: pods are created (and
      # injected) but never run.
      daemon kube-controller-manager "$assets/kube-controller-manager" --kubeconfig "$state/kubeconfig" \
        --controllers "$controllers" "${cm_flags[@]}" \
        --leader-elect=false --secure-port=0
      echo "control plane ready (Kubernetes $(basename "$assets" | cut -d- -f1)); kubeconfig: $state/kubeconfig"
      [ "$NODE" = 1 ] && "$root/hack/node.sh" up
      return 0
    fi
    if ! kill -0 "$(cat "$state/kube-apiserver.pid")" 2>/dev/null; then
      tail -20 "$state/kube-apiserver.log" >&2; down; exit 1
    fi
    sleep 0.5
  done
  echo "kube-apiserver not ready after 60s; see $state/kube-apiserver.log" >&2
  down
  exit 1
}

down() {
  "$root/hack/node.sh" down
  stop_pid kube-controller-manager
  stop_pid kube-apiserver
  stop_pid etcd
  rm -f "$state/node-mode"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
