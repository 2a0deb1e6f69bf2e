#!/usr/bin/env bash
# A kubelet node on the local control plane, so that pods run: containerd run
# by hand (there is no systemd) with a bridge CNI network, a kubelet and a
# kube-scheduler. `NODE=1 hack/control-plane.sh up` calls it.
#   hack/node.sh check -> says why this host cannot run a node, if it cannot
#   hack/node.sh up    -> checks, installs what is missing (apt), builds and
#                         imports the images of test/images, waits for the node
#                         to be Ready
#   hack/node.sh down  -> removes the node and undoes its changes to the host
# Both are safe to repeat. The host has room for one such node: the kubelet's
# ports, the containerd socket, cni0 and the node's name (the hostname) are fixed.
# Facts behind the settings: shared/notes/real-node.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
API_PORT=${API_PORT:-6443}
node=$(hostname | tr '[:upper:]' '[:lower:]')
socket=/run/containerd/containerd.sock
cni_conf=/etc/cni/net.d/10-sidecar-operator.conflist
pod_cidr=10.88.0.0/16
# Our own nat chain: pods reach the apiserver at the kubernetes Service's IP.
chain=SIDECAR-OPERATOR-NODE
# Chains that the kubelet, CNI plugins and this script may add; down removes
# those that were not there before up.
chain_prefixes='^(KUBE-|CNI-|SIDECAR-OPERATOR-NODE$)'
# The sysctls the node changes: the bridge plugin sets ip_forward, the kubelet
# its kernel tunables (pkg/kubelet/cm: protectKernelDefaults false).
sysctls=(net.ipv4.ip_forward vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

assets= # bin/k8s/<kube>-<etcd>, set by up
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
dir="$state/node"

log() { echo "node: $*"; }

# containerd_answers: ctr waits 10 s for a socket that is not there.
containerd_answers() { [ -S "$socket" ] && ctr --connect-timeout 2s --address "$socket" version >/dev/null 2>&1; }

# The Debian packages the node needs and the host lacks, one a line.
missing_packages() {
  command -v containerd >/dev/null || echo containerd
  [ -x /usr/lib/cni/bridge ] || echo containernetworking-plugins
  command -v iptables >/dev/null || echo iptables
  command -v jq >/dev/null || echo jq # reads the node's and pods' status
}

# check fails, saying why, where the node cannot run; it changes nothing.
check() {
  [ "$(id -u)" = 0 ] ||
    fail "the node needs root: containerd, the kubelet, the cni0 bridge, iptables and mounts change the host (running as uid $(id -u))"
  local missing; missing=$(missing_packages | tr '\n' ' ')
  if [ -n "$missing" ] && ! command -v apt-get >/dev/null; then
    fail "the node needs ${missing% }, and apt-get is not here to install them"
  fi
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
    fail "the kernel has no overlay filesystem, which containerd's snapshotter needs"
  [ -d /sys/module/bridge ] || modprobe bridge 2>/dev/null ||
    fail "the kernel has no bridge support, which the pod network (cni0) needs"
  local controller
  for controller in cpu memory pids; do
    awk -v c="$controller" '$1 == c && $4 == 1 {found = 1} END {exit !found}' /proc/cgroups ||
      fail "the kernel has no cgroup controller $controller enabled, which the kubelet needs"
  done
  # One node fits a host: the kubelet's ports, the containerd socket and
  # cni0 are fixed. Another state directory's node is not ours to take over.
  if ! running containerd && command -v ctr >/dev/null && containerd_answers; then
    fail "another node runs on this host: containerd answers on $socket; stop it first (make control-plane-down, with the STATE_DIR it was started with)"
  fi
  if ! running kubelet && curl -s --max-time 2 -o /dev/null http://127.0.0.1:10248/healthz; then
    fail "another kubelet answers on 127.0.0.1:10248; stop it first"
  fi
}

ensure_packages() {
  local missing; mapfile -t missing < <(missing_packages)
  [ ${#missing[@]} = 0 ] && return 0
  log "installing ${missing[*]}"
  apt-get update -qq || fail "apt-get update failed (above), so ${missing[*]} cannot be installed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    fail "apt-get could not install ${missing[*]} (above)"
}

# Records what up changes on the host, once: a second up must not take the
# node's own changes for the host's.
save_host() {
  [ -f "$dir/sysctl.before" ] && return 0
  local s cmd
  for s in "${sysctls[@]}"; do echo "$s=$(sysctl -n "$s")"; done > "$dir/sysctl.before.tmp"
  for cmd in iptables ip6tables; do
    "$cmd-save" 2>/dev/null | awk '/^:/ {print substr($1, 2)}' | sort -u > "$dir/$cmd.before"
  done
  mv "$dir/sysctl.before.tmp" "$dir/sysctl.before"
}

start_containerd() {
  running containerd && return 0
  cat > "$dir/containerd.toml" <<EOF
version = 2
[grpc]
  address = "$socket"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "sidecar-operator.test/pause:dev"
  # Required here: the VM lacks CAP_SYS_RESOURCE, so runc cannot set a
  # negative oom_score_adj and every sandbox would fail to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
EOF
  daemon containerd containerd --config "$dir/containerd.toml"
  wait_for 30 containerd containerd_answers
}

import_images() {
  # Rebuilt only when test/images or the module changed: linking them takes
  # longer than the rest of a warm up.
  local stamp="$root/bin/images/.built"
  if [ ! -f "$stamp" ] || [ -n "$(find "$root/test/images" "$root/go.mod" "$root/go.sum" -newer "$stamp" -print -quit)" ]; then
    mkdir -p "$root/bin/images" && touch "$stamp.new"
    (cd "$root" && go run ./test/images/build -o bin/images)
    mv "$stamp.new" "$stamp"
  fi
  local tar
  for tar in "$root"/bin/images/*.tar; do
    ctr --address "$socket" -n k8s.io images import "$tar" >/dev/null
  done
}

network() {
  mkdir -p "$(dirname "$cni_conf")"
  cat > "$cni_conf" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sidecar-operator",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "loopback"}
  ]
}
EOF
  # The bridge is made here rather than by the plugin's first ADD, so that it
  # may route to loopback before any pod starts: the apiserver listens on
  # 127.0.0.1 only, and in-cluster clients dial the kubernetes Service,
  # 10.0.0.1:443, which no kube-proxy serves here.
  ip link show cni0 >/dev/null 2>&1 || ip link add cni0 type bridge
  ip link set cni0 up
  sysctl -qw net.ipv4.conf.cni0.route_localnet=1
  iptables -t nat -N "$chain" 2>/dev/null || iptables -t nat -F "$chain"
  iptables -t nat -A "$chain" -s "$pod_cidr" -d 10.0.0.1/32 -p tcp --dport 443 \
    -j DNAT --to-destination "127.0.0.1:$API_PORT"
  iptables -t nat -C PREROUTING -j "$chain" 2>/dev/null || iptables -t nat -I PREROUTING -j "$chain"
}

start_kubelet() {
  running kubelet && return 0
  cat > "$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
containerRuntimeEndpoint: unix://$socket
cgroupDriver: cgroupfs
# The machine has cgroup v1 hierarchies; its cgroup2 mount offers only hugetlb.
failCgroupV1: false
failSwapOn: false
# The apiserver presents a client certificate of kubelet-ca (system:masters);
# the kubelet asks the apiserver about bearer tokens and about every request.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $state/pki/kubelet-ca.crt}
authorization:
  mode: Webhook
# A busy shared disk must not evict the test pods or their images.
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  daemon kubelet "$assets/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$state/kubelet.kubeconfig"
}

start_scheduler() {
  running kube-scheduler && return 0
  daemon kube-scheduler "$assets/kube-scheduler" --kubeconfig "$state/scheduler.kubeconfig" --leader-elect=false \
    --bind-address 127.0.0.1
}

# Ready and without the not-ready taint: the scheduler places pods on it.
schedulable() {
  api "/api/v1/nodes/$node" 2>/dev/null | jq -e '
    (.status.conditions[] | select(.type == "Ready") | .status == "True")
    and ([.spec.taints[]? | select(.key == "node.kubernetes.io/not-ready")] | length == 0)' >/dev/null
}

up() {
  [ -f "$state/node-mode" ] || { echo "node: start the control plane with NODE=1 first" >&2; exit 1; }
  check
  local start=$SECONDS
  assets=$(NODE=1 "$root/hack/build-control-plane.sh")
  ensure_packages
  mkdir -p "$dir"
  save_host
  start_containerd
  import_images
  network
  start_kubelet
  start_scheduler
  if ! wait_for 90 "node $node to be Ready" schedulable; then
    tail -20 "$state/kubelet.log" >&2
    exit 1
  fi
  log "$node Ready in $((SECONDS - start))s; logs in $state/{containerd,kubelet,kube-scheduler}.log"
}

no_pods() { [ "$(api "/api/v1/pods?fieldSelector=spec.nodeName=$node" | jq '.items | length')" = 0 ]; }

# Deletes the node's pods and waits until the kubelet has stopped their
# containers and released their volumes and addresses.
delete_pods() {
  local pods
  pods=$(api "/api/v1/pods?fieldSelector=spec.nodeName=$node" 2>/dev/null |
    jq -r '.items[] | "\(.metadata.namespace)/\(.metadata.name)"') || return 0
  [ -n "$pods" ] || return 0
  local pod
  for pod in $pods; do
    api "/api/v1/namespaces/${pod%/*}/pods/${pod#*/}" -X DELETE \
      -H 'Content-Type: application/json' -d '{"gracePeriodSeconds": 1}' >/dev/null || true
  done
  wait_for 60 "the node's pods to be deleted" no_pods || true
  log "deleted $(echo "$pods" | wc -l) pods"
}

# Containers the kubelet left behind (it was gone, or a pod outlived the wait).
kill_tasks() {
  containerd_answers || return 0
  local task
  for task in $(ctr --address "$socket" -n k8s.io tasks ls -q); do
    ctr --address "$socket" -n k8s.io tasks kill -s SIGKILL "$task" 2>/dev/null || true
    ctr --address "$socket" -n k8s.io tasks delete "$task" >/dev/null 2>&1 || true
  done
}

# Removes the chains with our prefixes that were not there before up, after
# the rules that jump to them, in one iptables-restore per table.
remove_chains() {
  local cmd=$1 before=$dir/$1.before
  [ -f "$before" ] || return 0
  "$cmd-save" 2>/dev/null | awk -v prefixes="$chain_prefixes" -v before="$before" '
    BEGIN { while ((getline c < before) > 0) old[c] = 1 }
    /^\*/ { table = $0; n = 0; delete gone; delete dels; next }
    /^:/ { c = substr($1, 2); if (c ~ prefixes && !(c in old)) gone[c] = 1; next }
    /^-A / {
      for (i = 3; i < NF; i++) if (($i == "-j" || $i == "-g") && ($(i + 1) in gone) && !($2 in gone)) {
        sub(/^-A /, "-D "); dels[++n] = $0
      }
      next
    }
    /^COMMIT/ {
      if (length(gone) == 0) next
      print table
      for (i = 1; i <= n; i++) print dels[i]
      for (c in gone) print "-F " c
      for (c in gone) print "-X " c
      print "COMMIT"
    }' > "$dir/$cmd.cleanup"
  if [ -s "$dir/$cmd.cleanup" ]; then
    "$cmd-restore" --noflush < "$dir/$cmd.cleanup"
    log "removed $cmd chains: $(grep '^-X' "$dir/$cmd.cleanup" | cut -d' ' -f2 | sort -u | tr '\n' ' ')"
  fi
  rm -f "$dir/$cmd.cleanup"
}

# Mounts under a directory, deepest first (mountinfo's field 5).
mounts_under() { awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r; }

down() {
  # up makes $dir before it starts or changes anything, and a finished down
  # removes it: without it there is nothing to undo.
  [ -d "$dir" ] || return 0
  local start=$SECONDS
  stop_pid kube-scheduler
  running kubelet && delete_pods
  stop_pid kubelet
  if api "/api/v1/nodes/$node" -X DELETE >/dev/null 2>&1; then log "deleted node $node"; fi
  kill_tasks
  stop_pid containerd
  if ip link show cni0 >/dev/null 2>&1; then ip link delete cni0; log "deleted cni0"; fi
  rm -f "$cni_conf"
  rm -rf /var/lib/cni/networks/sidecar-operator # host-local's leases: none are held now
  rm -rf /var/log/pods/* /var/log/containers/*  # the kubelet's container logs
  remove_chains iptables
  remove_chains ip6tables
  if [ -f "$dir/sysctl.before" ]; then
    local s; while read -r s; do sysctl -qw "$s"; done < "$dir/sysctl.before"
  fi
  # Containers that no containerd will delete now, and their shims, by the
  # pid files in their bundles.
  local pidfile
  for pidfile in /run/containerd/io.containerd.runtime.v2.task/k8s.io/*/{init,shim}.pid; do
    if [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null; then log "killed ${pidfile#/run/containerd/}"; fi
  done
  # containerd 1.6 writes no shim.pid: a shim is found by the bundle it serves.
  local bundle shim
  for bundle in /run/containerd/io.containerd.runtime.v2.task/k8s.io/*/; do
    [ -d "$bundle" ] || continue # no match: the glob itself
    for shim in $(pgrep -f -- "-namespace k8s.io -id $(basename "$bundle") "); do
      if kill -9 "$shim" 2>/dev/null; then log "killed the shim of $(basename "$bundle")"; fi
    done
  done
  # The kubelet's volumes and its shared bind mount of its root, then what
  # containerd left of killed sandboxes: rootfs, shm and network namespaces.
  local m
  for m in $(mounts_under /var/lib/kubelet) $(mounts_under /run/containerd) $(mounts_under /run/netns | grep '/cni-' || true); do
    umount "$m" 2>/dev/null || umount -l "$m"
    case $m in /run/netns/cni-*) rm -f "$m" ;; esac
  done
  # The kubelet's pod cgroups (cgroupfs driver), deepest first.
  find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} + 2>/dev/null || true
  rm -rf "$dir"
  log "down in $((SECONDS - start))s"
}

case "${1:-}" in
  check) check ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 check|up|down" >&2; exit 2 ;;
esac
