#!/usr/bin/env bash
# Checks a node brought up by `NODE=1 hack/control-plane.sh up`: one pod as the
# examples' Sidecars would make it (the app, the fluentd stand-in sharing its
# /var/log emptyDir, the xxl-job agent stand-in), run from the local images
# with imagePullPolicy Never. It must reach Running; the shipper's log must
# hold the app's lines; the agent, with the pod's ServiceAccount token and a
# RoleBinding like the one the operator makes, must exec into the app, and be
# forbidden to exec into a pod of another namespace. Prints the timings.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
API_PORT=${API_PORT:-6443}
ns=node-check
other=node-check-other
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

phase() { api "/api/v1/namespaces/$1/pods/$2" | jq -e --arg p "$3" '.status.phase == $p'; }
gone() { ! api "/api/v1/namespaces/$1/pods/$2" >/dev/null; }

for n in $ns $other; do
  create /api/v1/namespaces "{apiVersion: v1, kind: Namespace, metadata: {name: $n}}"
  # The ServiceAccount admission plugin refuses pods until the controller
  # has made the namespace's default ServiceAccount.
  wait_for 30 "serviceaccount $n/default" api "/api/v1/namespaces/$n/serviceaccounts/default"
done
for p in "$ns/orders" "$other/bystander"; do
  api "/api/v1/namespaces/${p%/*}/pods/${p#*/}" -X DELETE -d '{"gracePeriodSeconds": 0}' \
    -H 'Content-Type: application/json' >/dev/null || true
  wait_for 60 "old pod $p to go" gone "${p%/*}" "${p#*/}"
done

# What examples/xxl-agent.yaml's rbac makes the operator grant in the namespace.
create "/apis/rbac.authorization.k8s.io/v1/namespaces/$ns/roles" "
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: xxl-agent}
rules:
- {apiGroups: [''], resources: [pods], verbs: [get, list]}
- {apiGroups: [''], resources: [pods/exec], verbs: [get, create]}"
create "/apis/rbac.authorization.k8s.io/v1/namespaces/$ns/rolebindings" "
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: xxl-agent}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: xxl-agent}
subjects: [{kind: ServiceAccount, name: default, namespace: $ns}]"

start=$SECONDS
# The containers as examples/fluentd.yaml and examples/xxl-agent.yaml render them.
create "/api/v1/namespaces/$ns/pods" "
apiVersion: v1
kind: Pod
metadata: {name: orders, labels: {app: orders}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: orders
    image: sidecar-operator.test/app:dev
    imagePullPolicy: Never
    args: [-interval, 200ms]
    volumeMounts: [{name: varlog, mountPath: /var/log}]
  - name: fluentd
    image: sidecar-operator.test/logshipper:dev
    imagePullPolicy: Never
    env:
    - {name: FLUENTD_ARGS, value: --no-supervisor -q}
    - {name: POD_NAMESPACE, value: $ns}
    volumeMounts: [{name: varlog, mountPath: /var/log, readOnly: true}]
  - name: xxl-agent
    image: sidecar-operator.test/xxl-agent:dev
    imagePullPolicy: Never
    ports: [{name: http-xxl-agent, containerPort: 9999}]
    env:
    - {name: XXL_JOB_ADDR, value: 'http://xxl-job-admin.xxl-job:8080/xxl-job-admin'}
    - {name: CONTAINER_NAME, value: orders}
    - {name: XXL_JOB_NAME, value: orders-reconcile}
    - {name: NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
  volumes: [{name: varlog, emptyDir: {}}]"
create "/api/v1/namespaces/$other/pods" "
apiVersion: v1
kind: Pod
metadata: {name: bystander}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: orders, image: sidecar-operator.test/app:dev, imagePullPolicy: Never}]"
wait_for 60 "pod $ns/orders to run" phase $ns orders Running
running_after=$((SECONDS - start))
echo "pod $ns/orders Running ${running_after}s after create"
wait_for 60 "pod $other/bystander to run" phase $other bystander Running

# The shipper tags each of the app's lines with namespace/pod and file.
shipped() { api "/api/v1/namespaces/$ns/pods/orders/log?container=fluentd" | grep -q "^$ns/orders app.log: .* handled request 3$"; }
wait_for 30 "the shipper to ship the app's third line" shipped || fail "fluentd's log: $(api "/api/v1/namespaces/$ns/pods/orders/log?container=fluentd")"
echo "fluentd (logshipper) log, first lines:"
api "/api/v1/namespaces/$ns/pods/orders/log?container=fluentd" | head -3 | sed 's/^/  /'

ip=$(api "/api/v1/namespaces/$ns/pods/orders" | jq -r .status.podIP)
job() { curl -sf --max-time 20 "http://$ip:9999/run" -H 'Content-Type: application/json' -d "$1"; }
wait_for 30 "the agent to listen on $ip:9999" curl -s --max-time 1 -o /dev/null "http://$ip:9999/"
own=$(job '{"jobId": 1, "glueSource": "/app tail -n 2"}')
echo "agent job 1 (exec /app tail -n 2 in $ns/orders/orders): $own"
jq -e '.code == 200 and (.msg | test("handled request"))' <<< "$own" >/dev/null || fail "exec into its own pod"
foreign=$(job "{\"jobId\": 2, \"glueSource\": \"/app tail -n 2\", \"executorParams\": \"$other/bystander\"}")
echo "agent job 2 (the same in $other/bystander): $foreign"
jq -e '.code == 500 and (.msg | test("forbidden"))' <<< "$foreign" >/dev/null || fail "exec into another namespace was not forbidden"
echo "agent's log:"
api "/api/v1/namespaces/$ns/pods/orders/log?container=xxl-agent" | sed 's/^/  /'
echo "node check passed: Running in ${running_after}s"
