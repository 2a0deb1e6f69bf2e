#!/usr/bin/env bash
# Builds the Kyverno that hack/kyverno/go.mod pins into bin/kyverno/<version>/,
# once per version (cold, about 20 minutes on 2 cores), and prints the binary's
# path. The integration suite runs it beside the webhook (test/integration,
# TestCoexistsWithKyverno); on stderr, one line says what was built and how
# long it took. The go command's output shows only if the build fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
cd "$root/hack/kyverno"
export GOTOOLCHAIN=local
version=$(go list -m -f '{{.Version}}' github.com/kyverno/kyverno)
out="$root/bin/kyverno/$version"
if [ ! -x "$out/kyverno" ]; then
  mkdir -p "$out"
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  start=$SECONDS
  # No cgo, stripped: the binary is only run, never debugged here.
  quietly "$log" env CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/kyverno.tmp" github.com/kyverno/kyverno/cmd/kyverno
  mv "$out/kyverno.tmp" "$out/kyverno"
  echo "built kyverno (github.com/kyverno/kyverno $version) in $(since "$start")" >&2
fi
echo "$out/kyverno"
