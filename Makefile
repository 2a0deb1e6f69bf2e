# sidecar-operator: the two set-up commands are `make demo` and `make test`.
SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := build

KUBE_VERSION ?= 1.37.0
ETCD_VERSION ?= 3.6.8
ASSETS = $(CURDIR)/bin/k8s/$(KUBE_VERSION)-$(ETCD_VERSION)
CONTROLLER_GEN = go tool controller-gen
export KUBE_VERSION ETCD_VERSION

.PHONY: build
build: ## Build bin/sidecar-operator.
	go build -o bin/sidecar-operator ./cmd/sidecar-operator

.PHONY: generate
generate: ## Regenerate deepcopy code, the CRD and the operator's ClusterRole.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd:maxDescLen=0 paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=sidecar-operator paths=./internal/... output:rbac:artifacts:config=config/rbac
	go run ./hack/gen-webhook

.PHONY: verify-generated
verify-generated: generate ## Fail if generated files differ from the committed ones.
	@changed=$$(git status --porcelain -- api config); \
	if [ -n "$$changed" ]; then echo "generated files are stale; run make generate and commit:"; echo "$$changed"; git diff --stat -- api config; exit 1; fi

.PHONY: control-plane
control-plane: ## Build kube-apiserver and etcd into bin/k8s (cached by version).
	hack/build-control-plane.sh >/dev/null

.PHONY: control-plane-up
control-plane-up: ## Start etcd and kube-apiserver on loopback; kubeconfig in .local/kubeconfig.
	hack/control-plane.sh up

.PHONY: control-plane-down
control-plane-down: ## Stop the local control plane.
	hack/control-plane.sh down

.PHONY: lint
lint: ## gofmt and go vet.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...

FUZZTIME ?= 5s
.PHONY: test
test: lint verify-generated control-plane ## Everything: lint, generated files, unit and integration tests with -race, brief fuzzing.
	KUBEBUILDER_ASSETS=$(ASSETS) go test -race -count=1 ./...
	$(MAKE) --no-print-directory test-fuzz

# Each fuzz target as package:target; go test fuzzes one target at a time.
FUZZ_TARGETS = ./internal/jsonscan:FuzzScanner ./internal/inject:FuzzInjectJSON ./internal/webhook:FuzzMutatePod

.PHONY: fuzz
fuzz: ## Fuzz every target longer (FUZZTIME=10m make fuzz; default 5m each).
	$(MAKE) --no-print-directory test-fuzz FUZZTIME=$${FUZZTIME:-5m}

.PHONY: test-fuzz
test-fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} for $(FUZZTIME)"; \
		go test $${t%%:*} -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

.PHONY: bench
bench: ## Engine benchmarks, then webhook throughput against a null handler (last line: the ratio).
	hack/bench.sh

.PHONY: bench-e2e
bench-e2e: control-plane ## Pod create latency on a local control plane: no webhook, null webhook, injection.
	hack/bench-e2e.sh

.PHONY: bench-operator
bench-operator: control-plane ## The operator on 10,000 injected pods in 1,000 namespaces: convergence, RSS, writes.
	hack/bench-operator.sh

.PHONY: demo
demo: control-plane ## Start a control plane, run the operator, apply the examples, show the injected pod.
	hack/demo.sh

.PHONY: help
help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "%-20s %s\n", $$1, $$2}'
