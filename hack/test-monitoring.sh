#!/usr/bin/env bash
# make test-monitoring: promtool checks config/monitoring's alert rules and
# dashboard queries (check rules) and runs the alerts' unit tests (test
# rules), on the inputs hack/monitoring makes of them. One line on success;
# the output of whatever failed otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

promtool=$("$root/hack/tool.sh" promtool)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
extract() { cd "$root/hack/monitoring" && go run . -config "$root/config/monitoring" -out "$dir" > /dev/null; }
quietly "$dir/log" extract
quietly "$dir/log" "$promtool" check rules --lint-fatal "$dir/prometheusrule.rules.yaml" "$dir/dashboard.rules.yaml"
quietly "$dir/log" "$promtool" test rules "$dir/prometheusrule_test.yaml"
alerts=$(grep -c '^ *- alert:' "$dir/prometheusrule.rules.yaml")
queries=$(grep -c '^ *- record:' "$dir/dashboard.rules.yaml")
echo "monitoring: $alerts alerts pass their promtool tests; $queries dashboard queries parse"
