#!/usr/bin/env bash
# make bench: the engine's Go benchmarks, then HTTP throughput and latency of
# `sidecar-operator serve` against a null handler and the standard
# controller-runtime route (bin/bench standard) behind the same TLS server.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wrk >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "installing wrk from Debian's packages"
		apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq wrk >/dev/null 2>&1; } || true
	fi
fi

echo "== Go benchmarks (ns/op, allocs/op)"
go test -run '^$' -bench . -benchmem ./internal/jsonscan ./internal/inject ./internal/webhook ./test/bench |
	awk '/^Benchmark/ { printf "  %-55s %12s ns/op %8s allocs/op\n", $1, $3, $(NF-1) }'

echo "== HTTP: $(nproc) cores, wrk 1 thread or the Go load generator"
go build -ldflags "${GO_LDFLAGS:-}" -o bin/sidecar-operator ./cmd/sidecar-operator
go build -o bin/bench ./test/bench
bin/bench -binary bin/sidecar-operator "$@"
