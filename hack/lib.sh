# shellcheck shell=bash disable=SC2154 # root and API_PORT are the sourcing script's
# Shell helpers of the hack/ scripts. A script sources it after setting
# root (the repository) and, to call the apiserver, API_PORT.

# state holds the control plane's pid files, logs, certificates and
# kubeconfigs: STATE_DIR, else .local. The node suite (test/node) keeps its
# own, so that it never touches a control plane started by hand.
state=${STATE_DIR:-$root/.local}

# kube_version prints the Kubernetes version to build and run: KUBE_VERSION,
# where a minor (1.34) stands for its version in hack/kube-versions.txt, else
# that file's last (newest) line.
kube_version() {
  local versions; versions=$(grep -v '^#' "$root/hack/kube-versions.txt")
  if [ -z "${KUBE_VERSION:-}" ]; then
    tail -1 <<< "$versions"
  else
    grep -m1 "^${KUBE_VERSION//./\\.}\\." <<< "$versions" || echo "$KUBE_VERSION"
  fi
}

# daemon name command...: runs the command in the background, its output in
# $state/<name>.log and its pid in $state/<name>.pid. In a session of its own,
# so that a Ctrl-C meant for the caller (go test, the demo) does not stop it
# before down stops everything in order.
daemon() {
  local name=$1; shift
  setsid "$@" > "$state/$name.log" 2>&1 &
  echo $! > "$state/$name.pid"
}

# stop_pid name: stops the process of $state/<name>.pid, killing it if it is
# still there after 15 s.
stop_pid() {
  local name=$1 pidfile="$state/$1.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
  echo "stopped $name"
}

# running name: the process of $state/<name>.pid is alive.
running() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }

# api_any path [curl args]: the apiserver as the admin, whatever the status.
api_any() {
  local token; token=$(head -1 "$state/pki/tokens.csv" | cut -d, -f1)
  curl -sk -H "Authorization: Bearer $token" "https://127.0.0.1:$API_PORT$1" "${@:2}"
}

# api path [curl args]: api_any, failing on an HTTP error.
api() { api_any "$1" -f "${@:2}"; }

# create path yaml: POSTs it; 409 (already there) is fine, another error
# prints the API's message.
create() {
  local code out; out=$(mktemp)
  code=$(api_any "$1" -o "$out" -w '%{http_code}' -X POST -H 'Content-Type: application/yaml' --data-binary "$2") || true
  case $code in
    201|409) rm -f "$out" ;;
    *) echo "create $1: HTTP $code: $(jq -r .message "$out" 2>/dev/null)" >&2; rm -f "$out"; return 1 ;;
  esac
}

# wait_for seconds description command...: until the command succeeds.
wait_for() {
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "${0##*/}: timed out waiting for $what" >&2; return 1; fi
    sleep 0.2
  done
}

fail() { echo "FAIL: $*" >&2; exit 1; }

# quietly log command...: runs the command (a function too) under set -e
# with its output in log; if it fails, prints the log and exits with its
# status. The subshell keeps set -e, which a function run as `f || ...`
# would lose.
quietly() {
  local log=$1 rc; shift
  set +e
  (set -e; "$@") > "$log" 2>&1
  rc=$?
  set -e
  [ "$rc" = 0 ] && return
  echo "${0##*/}: $* failed; its output:" >&2
  cat "$log" >&2
  exit "$rc"
}

# since start: the time since $SECONDS was start, as 4m2s or 38s.
since() {
  local s=$((SECONDS - $1))
  if [ "$s" -ge 60 ]; then echo "$((s / 60))m$((s % 60))s"; else echo "${s}s"; fi
}
