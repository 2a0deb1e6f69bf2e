#!/usr/bin/env bash
# NODE=1 make demo: the demo with a kubelet node (hack/node.sh), so that the
# injected pods run, and the operator installed as users install it: its own
# image (hack/image) imported into the node's containerd, its chart installed
# with helm, two replicas that the apiserver reaches through their Service.
# It shows the operator's pods, the node Ready, the examples' pod Running with
# every container ready, the fluentd stand-in shipping the app's lines, the
# xxl-job agent's exec allowed by the RoleBinding the operator made and
# refused in another namespace, and a native sidecar started before its app.
# One progress line per step, with its duration.
#   API_PORT, ETCD_PORT: the control plane's ports (6443, 2379)
#   DEMO_KEEP=1 leaves everything running.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export KUBECONFIG="$root/.local/kubeconfig" NODE=1
API_PORT=${API_PORT:-6443}
export API_PORT
operator_ns=sidecar-operator-system
image=sidecar-operator.test/sidecar-operator:dev
ns=demo
other=demo-other
log=.local/demo-node.log # the verbose output of the steps
# shellcheck source=hack/lib.sh
. hack/lib.sh

no_replicasets() { api "/apis/apps/v1/namespaces/$ns/replicasets" | jq -e '.items | length == 0'; }

# step "what": starts a step; done_step prints it with its duration.
step_start=0
# The name is printed first, so that a long step shows what it waits for.
step() { step_start=$(date +%s%N); printf '== %-60s' "$1"; }
done_step() {
  local ms=$((($(date +%s%N) - step_start) / 1000000))
  printf ' %3d.%ds\n' $((ms / 1000)) $((ms % 1000 / 100))
}
total_start=$(date +%s)

cleanup() {
  local rc=$?
  [ $rc = 0 ] || { echo; echo "demo failed; the steps' output: $log; the last lines:" >&2; tail -20 "$log" >&2; }
  if [ "${DEMO_KEEP:-}" = 1 ]; then
    echo "DEMO_KEEP=1: left running. KUBECONFIG=$KUBECONFIG; stop with: \$(hack/tool.sh helm) uninstall sidecar-operator -n $operator_ns; API_PORT=$API_PORT ETCD_PORT=${ETCD_PORT:-2379} make control-plane-down"
    return
  fi
  step "teardown: helm uninstall, node (pods, containerd, cni0), control plane"
  # Else the ReplicaSet recreates the pods that the node's teardown deletes.
  if api "/apis/apps/v1/namespaces/$ns/deployments/orders?propagationPolicy=Background" -X DELETE >/dev/null 2>&1; then
    wait_for 20 "the ReplicaSets to go" no_replicasets || true
  fi
  # Helm deletes the webhook configurations first: the node's pods are then
  # deleted with no webhook to ask.
  "$helm" uninstall sidecar-operator --namespace "$operator_ns" --wait >> "$log" 2>&1 || true
  hack/control-plane.sh down >> "$log" 2>&1
  done_step
  echo "demo done in $(($(date +%s) - total_start))s"
}

mkdir -p .local
: > "$log"

# Built first, so that the line it prints when it builds is a line of its own.
helm=$(hack/tool.sh helm)
step "build the operator's image (hack/image) and bin/demo"
go run ./hack/image -o bin/image -platforms "linux/$(go env GOARCH)" >> "$log"
go build -o bin/demo ./hack/demo
done_step

# The first run builds kubelet and friends, installs containerd and the CNI
# plugins and builds the images: minutes; later runs take seconds.
trap cleanup EXIT
step "control plane and node up (API_PORT=$API_PORT)"
hack/control-plane.sh up >> "$log" 2>&1
done_step
node=$(hostname | tr '[:upper:]' '[:lower:]')
api "/api/v1/nodes/$node" | jq -r '"   node \(.metadata.name): Ready=\(.status.conditions[] | select(.type == "Ready") | .status), kubelet \(.status.nodeInfo.kubeletVersion), \(.status.nodeInfo.containerRuntimeVersion)"'

step "import the image into the node's containerd"
ctr --address /run/containerd/containerd.sock -n k8s.io images import --all-platforms bin/image/sidecar-operator.tar >> "$log"
done_step

# The apiserver presents the client certificate hack/control-plane.sh made
# for it to every webhook (clientAuth); it reaches the Service's ready
# endpoints (--enable-aggregator-routing).
step "helm install charts/sidecar-operator (webhook and controllers, 2 replicas each)"
"$helm" install sidecar-operator charts/sidecar-operator --namespace "$operator_ns" --create-namespace \
  --set image.repository="${image%:*}",image.tag="${image##*:}" \
  --set clientAuth=true --set-file clientCA=.local/pki/webhook-client-ca.crt --wait --timeout 3m >> "$log"
done_step
api "/api/v1/namespaces/$operator_ns/pods" | jq -r '.items[] | "   pod \(.metadata.name) (\(.spec.serviceAccountName)): \(.status.phase), ready \([.status.containerStatuses[] | select(.ready)] | length)/\(.status.containerStatuses | length), image \(.spec.containers[0].image), IP \(.status.podIP)"'
api "/apis/coordination.k8s.io/v1/namespaces/$operator_ns/leases/sidecar-operator-leader" | jq -r '"   leader: \(.spec.holderIdentity | split("_")[0])"'
api /apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/sidecar-operator | jq -r '.webhooks[] | "   webhook \(.name): Service \(.clientConfig.service.namespace)/\(.clientConfig.service.name):\(.clientConfig.service.port)\(.clientConfig.service.path), caBundle \(.clientConfig.caBundle | length) bytes, failurePolicy \(.failurePolicy)"'
api "/apis/discovery.k8s.io/v1/namespaces/$operator_ns/endpointslices?labelSelector=kubernetes.io/service-name=sidecar-operator" | jq -r '"   its endpoints: \([.items[].endpoints[] | "\(.addresses[0]) ready=\(.conditions.ready)"] | join(", "))"'

# bin/demo waits until the webhook injects both examples, creates the pod
# and waits for the RoleBinding the operator makes for the xxl-agent.
step "apply examples/*.yaml and examples/workloads/pod.yaml"
bin/demo -step apply >> "$log"
done_step

step "apply examples/workloads/deployment.yaml"
# One document at a time: the apiserver takes one object per request.
awk -v out=.local/demo-doc. '/^---$/ {n++; next} {print > (out n)}' examples/workloads/deployment.yaml
for doc in .local/demo-doc.*; do
  kind=$(awk '/^kind:/ {print tolower($2); exit}' "$doc")
  case $kind in
    deployment) path=/apis/apps/v1/namespaces/$ns/deployments ;;
    service) path=/api/v1/namespaces/$ns/services ;;
    *) fail "$doc: unexpected kind $kind" ;;
  esac
  create "$path" "$(cat "$doc")"
done
rm -f .local/demo-doc.*
done_step

# Another namespace, with a pod of the same app that nothing grants on.
step "create namespace $other and its pod bystander"
create /api/v1/namespaces "{apiVersion: v1, kind: Namespace, metadata: {name: $other}}"
wait_for 30 "serviceaccount $other/default" api "/api/v1/namespaces/$other/serviceaccounts/default"
create "/api/v1/namespaces/$other/pods" "
apiVersion: v1
kind: Pod
metadata: {name: bystander}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: orders, image: 'registry.example.com/shop/orders:2.3.1'}]"
done_step

all_ready() { # namespace: at least $2 pods, each Running with every container ready
  api "/api/v1/namespaces/$1/pods" | jq -e --argjson n "$2" '(.items | length) >= $n and all(.items[];
    .status.phase == "Running" and all(.status.containerStatuses[]; .ready))'
}
step "wait for the pods to run, every container ready"
wait_for 120 "the pods of $ns to be ready" all_ready $ns 3
wait_for 60 "$other/bystander to be ready" all_ready $other 1
done_step
api "/api/v1/namespaces/$ns/pods" | jq -r '.items[] | "   pod \(.metadata.namespace)/\(.metadata.name): \(.status.phase), ready \([.status.containerStatuses[] | select(.ready)] | length)/\(.status.containerStatuses | length) (\([.spec.containers[].name] | join(", ")))"'

# The shipper tags each of the app's lines with namespace/pod and file.
step "the fluentd stand-in ships the app's lines"
shipped() { api "/api/v1/namespaces/$ns/pods/orders/log?container=fluentd" | grep -q "^$ns/orders app.log: .* handled request 2$"; }
wait_for 30 "the shipper to ship the app's second line" shipped
done_step
api "/api/v1/namespaces/$ns/pods/orders/log?container=fluentd" | sed -n "1,2s/^/   fluentd: /p"

# The grant is the operator's: its labels, and no Role of anyone else's.
step "the agent execs into its app, by the operator's RoleBinding"
binding=$(api "/apis/rbac.authorization.k8s.io/v1/namespaces/$ns/rolebindings/sidecar-operator:xxl-agent")
jq -e '.metadata.labels["app.kubernetes.io/managed-by"] == "sidecar-operator"' <<< "$binding" >/dev/null ||
  fail "RoleBinding not the operator's: $binding"
ip=$(api "/api/v1/namespaces/$ns/pods/orders" | jq -r .status.podIP)
job() { curl -sf --max-time 20 "http://$ip:9999/run" -H 'Content-Type: application/json' -d "$1"; }
wait_for 30 "the agent to listen on $ip:9999" curl -s --max-time 1 -o /dev/null "http://$ip:9999/"
own=$(job '{"jobId": 1, "glueSource": "/app tail -n 1"}')
jq -e '.code == 200 and (.msg | test("handled request"))' <<< "$own" >/dev/null || fail "exec into its own pod: $own"
done_step
jq -r '"   RoleBinding \(.metadata.namespace)/\(.metadata.name) (labels \(.metadata.labels | to_entries | map("\(.key)=\(.value)") | join(","))): \(.roleRef.kind) \(.roleRef.name) to \([.subjects[] | "\(.kind) \(.namespace)/\(.name)"] | join(", "))"' <<< "$binding"
echo "   Roles in $ns: $(api "/apis/rbac.authorization.k8s.io/v1/namespaces/$ns/roles" | jq '.items | length')"
echo "   job 1, /app tail -n 1 in $ns/orders: $own"

step "the same exec into $other/bystander is refused"
foreign=$(job "{\"jobId\": 2, \"glueSource\": \"/app tail -n 1\", \"executorParams\": \"$other/bystander\"}")
jq -e '.code == 500 and (.msg | test("forbidden"))' <<< "$foreign" >/dev/null || fail "exec into $other was not refused: $foreign"
done_step
echo "   job 2: $foreign"
api "/api/v1/namespaces/$ns/pods/orders/log?container=xxl-agent" | grep -E '^\S+ \S+ job [12]:' | cut -c1-200 | sed 's/^/   agent log: /'

# Not among examples/, which make demo applies whole: a native variant of
# the fluentd example, selected by its own label (its names differ: the
# operator refuses two Sidecars adding one name to pods both may select),
# started before the app
# so that it ships the app's first line and outlives its last.
step "a native-sidecar Sidecar and a pod it selects"
create /apis/sidecar-operator.io/v1alpha1/sidecars "
apiVersion: sidecar-operator.io/v1alpha1
kind: Sidecar
metadata: {name: fluentd-native}
spec:
  nativeSidecar: true
  selector: {matchLabels: {logging: fluentd-native}}
  containers:
  - name: fluentd-native
    image: 'fluent/fluentd:v1.17-1'
    env: [{name: POD_NAMESPACE, value: '{{ .Pod.Namespace }}'}]
    volumeMounts: [{name: varlog-native, mountPath: /var/log, readOnly: true}]
  volumes: [{name: varlog-native, emptyDir: {}}]
  appVolumeMounts: [{name: varlog-native, mountPath: /var/log}]"
native_pod="
apiVersion: v1
kind: Pod
metadata: {name: orders-native, labels: {app: orders, logging: fluentd-native}}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: orders, image: 'registry.example.com/shop/orders:2.3.1'}]"
# The operator sees the new Sidecar through its cache: dry-run until it injects.
injects() { api "/api/v1/namespaces/$ns/pods?dryRun=All" -X POST -H 'Content-Type: application/yaml' \
  --data-binary "$native_pod" | jq -e '.spec.initContainers[0].restartPolicy == "Always"'; }
wait_for 30 "the webhook to inject fluentd-native" injects
create "/api/v1/namespaces/$ns/pods" "$native_pod"
wait_for 60 "$ns/orders-native to be ready" all_ready $ns 4
shipped_first() { api "/api/v1/namespaces/$ns/pods/orders-native/log?container=fluentd-native" | grep -q 'handled request 1$'; }
wait_for 30 "the native shipper to ship the app's first line" shipped_first
done_step
# The containers' first log lines, in the runtime's nanosecond timestamps:
# the kubelet starts the app only once the native sidecar runs.
first_line() { api "/api/v1/namespaces/$ns/pods/orders-native/log?container=$1&timestamps=true" | sed -n 1p; }
api "/api/v1/namespaces/$ns/pods/orders-native" | jq -r '
  (.status.initContainerStatuses[] | "   initContainer \(.name) (restartPolicy Always): started \(.state.running.startedAt), ready \(.ready)"),
  (.status.containerStatuses[] | "   container \(.name): started \(.state.running.startedAt), ready \(.ready)")'
sidecar_first=$(first_line fluentd-native) app_first=$(first_line orders)
echo "   fluentd-native's first line: $sidecar_first"
echo "   orders' first line:          $app_first"
# RFC3339Nano drops trailing zeros, so compare numbers, not strings.
[ "$(date -d "${sidecar_first%% *}" +%s%N)" -lt "$(date -d "${app_first%% *}" +%s%N)" ] || fail "the native sidecar did not start before the app"
