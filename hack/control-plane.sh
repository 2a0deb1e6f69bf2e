#!/usr/bin/env bash
# Starts or stops a local control plane (etcd, kube-apiserver and
# kube-controller-manager for Deployments and ReplicaSets) on loopback.
#   hack/control-plane.sh up    -> writes an admin kubeconfig to .local/kubeconfig
#   hack/control-plane.sh down  -> stops the apiserver first, then etcd
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.local"
API_PORT=${API_PORT:-6443}
ETCD_PORT=${ETCD_PORT:-2379}

stop() {
  local name=$1 pidfile="$state/$1.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  echo "stopped $name"
}

up() {
  local assets; assets=$("$root/hack/build-control-plane.sh")
  mkdir -p "$state/pki"
  if [ -f "$state/kube-apiserver.pid" ] && kill -0 "$(cat "$state/kube-apiserver.pid")" 2>/dev/null; then
    echo "control plane already running; kubeconfig: $state/kubeconfig"
    return 0
  fi
  rm -rf "$state/etcd"
  [ -f "$state/pki/sa.key" ] || openssl genrsa -out "$state/pki/sa.key" 2048 2>/dev/null
  local token; token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$token,admin,admin,system:masters" > "$state/pki/tokens.csv"

  "$assets/etcd" --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "default=http://127.0.0.1:$((ETCD_PORT + 1))" --unsafe-no-fsync \
    > "$state/etcd.log" 2>&1 &
  echo $! > "$state/etcd.pid"

  "$assets/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --cert-dir "$state/pki" --secure-port "$API_PORT" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$state/pki/sa.key" --service-account-signing-key-file "$state/pki/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --authorization-mode RBAC \
    --token-auth-file "$state/pki/tokens.csv" \
    --disable-admission-plugins ServiceAccount --endpoint-reconciler-type none \
    > "$state/kube-apiserver.log" 2>&1 &
  echo $! > "$state/kube-apiserver.pid"

  cat > "$state/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$API_PORT
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: $token
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
KC
  for _ in $(seq 1 120); do
    if curl -sfk -H "Authorization: Bearer $token" "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1; then
      # No scheduler or kubelet: pods are created (and injected) but never run.
      "$assets/kube-controller-manager" --kubeconfig "$state/kubeconfig" \
        --controllers deployment,replicaset,statefulset,daemonset,garbagecollector \
        --leader-elect=false --secure-port=0 \
        > "$state/kube-controller-manager.log" 2>&1 &
      echo $! > "$state/kube-controller-manager.pid"
      echo "control plane ready; kubeconfig: $state/kubeconfig"
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
  stop kube-controller-manager
  stop kube-apiserver
  stop etcd
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
