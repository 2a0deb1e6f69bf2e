# sidecar-operator: the two set-up commands are `make demo` and `make test`.
SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := build

# One version per supported Kubernetes minor (hack/kube-versions.txt); the
# newest is the default, and a minor (KUBE_VERSION=1.34) stands for its own.
KUBE_VERSIONS := $(shell grep -v '^\#' hack/kube-versions.txt)
KUBE_VERSION ?= $(lastword $(KUBE_VERSIONS))
override KUBE_VERSION := $(or $(filter $(KUBE_VERSION).%,$(KUBE_VERSIONS)),$(KUBE_VERSION))
ETCD_VERSION ?= 3.6.8
ASSETS = $(CURDIR)/bin/k8s/$(KUBE_VERSION)-$(ETCD_VERSION)
# Pinned Go tools, installed into bin/tools by hack/tool.sh, which says when
# it builds one (the first run: minutes for golangci-lint and promtool).
# golangci-lint (hack/tools/go.mod), promtool (hack/monitoring/go.mod) and
# cyclonedx-gomod (hack/sbom/go.mod) are pinned in modules of their own, so
# that their dependencies don't move the operator's.
CONTROLLER_GEN = $$(hack/tool.sh controller-gen)
GOLANGCI_LINT = $$(hack/tool.sh golangci-lint)
# crd-ref-docs writes docs/api.md from api/v1alpha1; pinned in
# hack/crd-ref-docs/go.mod (its controller-tools is not the operator's).
CRD_REF_DOCS = $$(hack/tool.sh crd-ref-docs)
CYCLONEDX_GOMOD = $$(hack/tool.sh cyclonedx-gomod)
# Pinned in go.mod beside the Helm SDK the integration suite installs the
# chart with, so that both are one version.
HELM = $$(hack/tool.sh helm)
CHART = charts/sidecar-operator
# Every value away from its default at once.
CHART_VALUES = --set replicas=3,image.repository=registry.example.com/so,image.tag=v1,image.pullPolicy=Always \
	--set certMode=cert-manager,clientAuth=true,webhook.failurePolicy=Ignore \
	--set networkPolicy.adminFromNamespaceLabel=kubernetes.io/metadata.name=monitoring,resources.limits.memory=1Gi \
	--set networkPolicy.webhookFrom[0].ipBlock.cidr=172.16.0.0/28 --set-file clientCA=test/testdata/client-ca.crt \
	--set image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef,imagePullSecrets[0].name=regcred \
	--set nodeSelector.pool=system,controller.nodeSelector.pool=system,priorityClassName=system-node-critical \
	--set controller.priorityClassName=system-cluster-critical,podLabels.team=platform,controller.podAnnotations.team=platform \
	--set tolerations[0].key=dedicated,tolerations[0].operator=Exists,extraArgs[0]=--zap-log-level=debug,controller.extraEnv[0].name=GOMEMLIMIT \
	--set controller.extraEnv[0].value=400MiB,podSecurityContext.fsGroup=65532,securityContext.runAsUser=65532 \
	--set webhook.timeoutSeconds=5,webhook.excludeNamespaces[0]=monitoring,serviceMonitor.enabled=true,serviceMonitor.interval=30s \
	--set serviceMonitor.labels.release=prometheus
export KUBE_VERSION ETCD_VERSION
# The version and commit every binary prints (sidecar-operator version): the
# tag (v0.1.0), what git describe says of a later commit, or the short commit.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
# The scripts make runs (demo, bench) build with it too.
GO_LDFLAGS = -X github.com/sidecar-operator/sidecar-operator/internal/version.version=$(VERSION) \
	-X github.com/sidecar-operator/sidecar-operator/internal/version.commit=$(COMMIT)
export GO_LDFLAGS

.PHONY: build
build: ## Build bin/sidecar-operator, stamped with VERSION and COMMIT.
	go build -ldflags "$(GO_LDFLAGS)" -o bin/sidecar-operator ./cmd/sidecar-operator

# The index digest is the last line printed, and bin/image/sidecar-operator.digest.
.PHONY: image
image: ## Build the operator's image without Docker (hack/image): linux/amd64 and linux/arm64 in one OCI archive, bin/image/sidecar-operator.tar, and its SBOM.
	go run ./hack/image -o bin/image -platforms linux/amd64,linux/arm64 -sbom $(CYCLONEDX_GOMOD)

.PHONY: release
release: ## make release VERSION=vX.Y.Z: dist/ holds the image archive and digest, its SBOM, the chart, install.yaml, crds.yaml and checksums.txt, the same bytes each run.
	@[[ "$(VERSION)" =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || { echo "make release needs VERSION=vX.Y.Z, not '$(VERSION)'"; exit 2; }
	go run ./hack/release -version $(VERSION) -o dist -sbom $(CYCLONEDX_GOMOD)
	cat dist/checksums.txt

.PHONY: generate
generate: ## Regenerate deepcopy code, the CRD, the ClusterRoles of the webhook and the controllers, the webhook configurations, the Helm chart and docs/api.md.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd:maxDescLen=0 paths=./api/... output:crd:artifacts:config=config/crd/bases
	go run ./hack/gen-crd-quantities
	$(CONTROLLER_GEN) rbac:roleName=sidecar-operator-webhook paths=./internal/webhook output:rbac:artifacts:config=config/rbac/webhook
	$(CONTROLLER_GEN) rbac:roleName=sidecar-operator-controller \
		paths="$$(go list ./internal/... | grep -vx '.*/internal/webhook' | sed 's|^github.com/sidecar-operator/sidecar-operator|.|' | paste -sd';')" \
		output:rbac:artifacts:config=config/rbac/controller
	go run ./hack/gen-webhook
	go run ./hack/gen-chart
	$(CRD_REF_DOCS) --log-level ERROR --config hack/crd-ref-docs/config.yaml --source-path api/v1alpha1 \
		--renderer markdown --output-path docs/api.md

.PHONY: verify-generated
verify-generated: generate ## Fail if generated files differ from the committed ones.
	@changed=$$(git status --porcelain -- api config $(CHART) docs/api.md); \
	if [ -n "$$changed" ]; then echo "generated files are stale; run make generate and commit:"; echo "$$changed"; git diff --stat -- api config $(CHART) docs/api.md; exit 1; fi

# NODE=1 (given to make or in the environment) asks for a kubelet node too;
# API_PORT and ETCD_PORT move the control plane off 6443 and 2379.
.PHONY: control-plane
control-plane: ## Build kube-apiserver, kube-controller-manager and etcd into bin/k8s (cached by version); NODE=1 adds kubelet and kube-scheduler.
	@hack/build-control-plane.sh >/dev/null

.PHONY: control-plane-up
control-plane-up: ## Start etcd and kube-apiserver on loopback; kubeconfig in .local/kubeconfig. NODE=1 adds a node (hack/node.sh).
	hack/control-plane.sh up

.PHONY: control-plane-down
control-plane-down: ## Stop the local control plane; a node goes first, undoing its changes to the host.
	hack/control-plane.sh down

.PHONY: node-check
node-check: ## With a node up: run a pod of test/images' stand-ins; check Running, shipped logs and the agent's exec (hack/node-check.sh).
	hack/node-check.sh

.PHONY: lint
lint: ## gofmt, go vet and golangci-lint (.golangci.yml: kubebuilder's linter set).
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(GOLANGCI_LINT) run
	cd hack/monitoring && $$(../tool.sh golangci-lint) run

.PHONY: test-chart
test-chart: ## helm lint --strict and helm template of the chart, with the default values and with every value changed.
	@helm=$(HELM); for values in "" "$(CHART_VALUES)"; do \
		out=$$($$helm lint --strict $(CHART) $$values 2>&1 && \
			$$helm template sidecar-operator $(CHART) --namespace sidecar-operator-system $$values 2>&1 >/dev/null) || \
			{ echo "$$out"; exit 1; }; \
	done; echo "chart: helm lint and helm template pass, default and changed values"

# test/node and test/install bring up a kubelet node (hack/node.sh, as root),
# one at a time: its kubelet and kube-scheduler, and the images and charts
# test/install installs (hack/release-images.sh), are built here, outside go
# test's timeout.
.PHONY: test
test: lint verify-generated control-plane test-monitoring test-chart ## Everything: lint, generated files, monitoring, the chart, unit and integration tests with -race (test/node and test/install on a real node), brief fuzzing.
	@NODE=1 hack/build-control-plane.sh >/dev/null
	@hack/release-images.sh >/dev/null
	KUBEBUILDER_ASSETS=$(ASSETS) KYVERNO=$$(hack/build-kyverno.sh) CHROMIUM=$$(hack/ensure-chromium.sh) go test -race -count=1 -timeout 30m ./...
	$(MAKE) --no-print-directory test-fuzz
	go run ./hack/compat -versions $(firstword $(KUBE_VERSIONS))

# Below the range: the newest 1.33, whose apiserver run must refuse.
KUBE_BELOW = 1.33.13

.PHONY: test-compat
test-compat: ## Against every supported Kubernetes minor (hack/kube-versions.txt): the compatibility subset (hack/compat/subset.go) of test/integration and test/node, and run's refusal of 1.33; writes the support matrix into docs/install.md.
	go run ./hack/compat -versions $(shell echo $(KUBE_VERSIONS) | tr ' ' ,) -below $(KUBE_BELOW) -doc docs/install.md

.PHONY: test-monitoring
test-monitoring: ## config/monitoring: promtool checks the alert rules and the dashboard's queries, and runs the alerts' unit tests.
	@hack/test-monitoring.sh

# Each fuzz target as package:target:executions (about 5 s each here). Counts,
# not durations: Go 1.26's fuzz coordinator can fail a run bounded by time with
# "context deadline exceeded" and no crasher (golang/go#75804, fixed in 1.27).
FUZZ_TARGETS = ./internal/jsonscan:FuzzScanner:50000 ./internal/jsonscan:FuzzSkip:50000 ./internal/jsonscan:FuzzAppendQuote:50000 ./internal/inject:FuzzInjectJSON:3000 ./internal/inject:FuzzPodViewReset:10000 ./internal/inject:FuzzAppendRecord:10000 ./internal/inject:FuzzParseStatus:20000 ./internal/jsonscan:FuzzCount:50000 ./internal/inject:FuzzTemplateLanguage:5000 ./internal/webhook:FuzzMutatePod:1000 ./internal/cli:FuzzConfigFile:1000 ./internal/inject:FuzzReadQuantity:2000 ./internal/webhookconfig:FuzzRecordsValidated:2000 ./internal/offline:FuzzKeepFormat:5000
FUZZ_SCALE ?= 1
# The apiserver's own validation as the oracle (test/apiserveroracle, a module
# of its own, which needs k8s.io/kubernetes): whatever pod it accepts, the
# webhook judges.
ORACLE_FUZZ = FuzzWebhookJudgesWhatTheApiserverAccepts
ORACLE_FUZZ_EXECUTIONS = 3000

.PHONY: fuzz
fuzz: ## Fuzz every target 60 times longer than make test does (FUZZ_SCALE=600 for about an hour).
	$(MAKE) --no-print-directory test-fuzz FUZZ_SCALE=$${FUZZ_SCALE:-60}

.PHONY: test-fuzz
test-fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$$(( $${rest#*:} * $(FUZZ_SCALE) )); \
		echo "fuzz $$name for $$n executions"; start=$$(date +%s); \
		go test $$pkg -run '^$$' -fuzz "^$$name$$" -fuzztime $${n}x || exit 1; \
		echo "fuzz $$name: $$n executions in $$(( $$(date +%s) - start ))s"; \
	done
	@n=$$(( $(ORACLE_FUZZ_EXECUTIONS) * $(FUZZ_SCALE) )); echo "fuzz $(ORACLE_FUZZ) for $$n executions"; start=$$(date +%s); \
	cd test/apiserveroracle && go test . -run '^$$' -fuzz '^$(ORACLE_FUZZ)$$' -fuzztime $${n}x && \
	echo "fuzz $(ORACLE_FUZZ): $$n executions in $$(( $$(date +%s) - start ))s"

.PHONY: bench
bench: ## Engine benchmarks, then webhook throughput against a null handler and the standard controller-runtime route (last line: inject/null ratio).
	hack/bench.sh

.PHONY: bench-e2e
bench-e2e: control-plane ## Pod create latency on a local control plane: no webhook, null webhooks answering chosen patches, injection, Kyverno if built; the apiserver's admission metrics.
	hack/bench-e2e.sh

.PHONY: bench-operator
bench-operator: control-plane ## The operator on PODS (10,000) injected pods in NAMESPACES (1,000) namespaces: convergence, RSS, writes; churn; a rollout in place.
	hack/bench-operator.sh

.PHONY: demo
demo: control-plane ## Start a control plane, run the operator, apply the examples, show the injected pod, verify and status. NODE=1: with a node, the pods run (hack/demo-node.sh).
	hack/demo.sh

.PHONY: help
help:
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "%-20s %s\n", $$1, $$2}'
