# challenge-hook: every command a developer or CI needs. run, test, generate, update, bench and fuzz
# need only Go: their other tools, staticcheck and controller-gen, are pinned by go.mod's tool
# directive. e2e needs openssl, curl and setsid.
SHELL := /bin/bash
GO ?= go
BIN := bin/challenge-hook
# Every go command here builds with -trimpath, as the image does: a package's build-cache key then
# leaves out the module cache's path, so that a warm build cache serves an empty module cache
# (CI's) without compiling again, and the three modules (the hook's, hack/testimages and
# hack/monitoring) share one compiled standard library and toolchain.
export GOFLAGS := -trimpath $(filter-out -trimpath,$(shell $(GO) env GOFLAGS))
# PHASE NAME COMMAND: runs COMMAND and prints its wall time (hack/phase.sh).
PHASE := bash hack/phase.sh
# The flags `make run` serves with: a pinned clock, a demo flag key, a demo TCP gateway and a demo token
# (testdata/dev.token), the same configuration the golden files were computed with, so that curl of
# any testdata request (with that token) answers its response.json.
DEV_FLAGS := $(shell cat testdata/dev.flags 2>/dev/null)

.PHONY: all build run test lint generate update e2e e2e-node bench bench-gateway bench-gateway-attack bench-platform bench-cluster bench-node fuzz clean

all: test build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/challenge-hook

# RUN_FLAGS adds flags, e.g. a golden case's own: make run RUN_FLAGS="$(cat testdata/<case>/hook.flags)"
run:
	$(GO) run ./cmd/challenge-hook --listen=127.0.0.1:8080 --metrics-listen=127.0.0.1:8082 $(DEV_FLAGS) $(RUN_FLAGS)

# Lint, then unit, golden, HTTP (bad-input matrix, auth, graceful shutdown, TLS) tests, the
# monitoring component's tests (hack/monitoring, a module of its own: Prometheus's rule manager,
# at the version its go.mod pins, runs the alerts' rule tests, manifests/components/monitoring/
# *.test.yaml, in-process as promtool would; Prometheus's query engine evaluates every dashboard
# panel over a synthetic event; every query selects only series that exist), then a short run of
# every fuzz target (FUZZTIME each; `make fuzz` runs them longer). Fails first when a CRD under
# manifests/ is not what api/v1alpha1 generates. Prints each phase's wall time, and all of them
# at the end. Needs only Go: no root, Docker or cluster. go test's own vet (a subset of go vet's
# checks) is off: lint has run all of go vet's over the same files and more (LINT_TAGS excludes no
# file go test compiles), and it cost go test 30 of its 65 CPU-seconds from an empty build cache.
test:
	@mkdir -p .cache && : >.cache/phases
	@PHASE_LOG=.cache/phases $(PHASE) lint $(MAKE) --no-print-directory lint
	@PHASE_LOG=.cache/phases $(PHASE) "generate check" env GO=$(GO) bash hack/generate.sh --check
	@PHASE_LOG=.cache/phases $(PHASE) "go test" $(GO) test -vet=off -count=1 ./...
	@PHASE_LOG=.cache/phases $(PHASE) monitoring $(GO) -C hack/monitoring test -count=1 ./...
	@PHASE_LOG=.cache/phases $(PHASE) fuzz env FUZZTIME=$${FUZZTIME:-10s} GO=$(GO) bash hack/fuzz.sh
	@echo "make test passed:" && cat .cache/phases

fuzz:
	bash hack/fuzz.sh

# gofmt, go vet and staticcheck over every package of the three modules, the e2e tests' included:
# their build tags select only files of their own (e2e/, e2e/node/), so one pass with all of them
# checks what a pass per tag set would.
# staticcheck analyses every dependency from source for its facts; with GOGC=400 it collects its
# garbage less often: a quarter less CPU (43 to 33 s over the hook's module, empty staticcheck cache)
# for a peak of 0.8 GB instead of 0.46.
LINT_TAGS := e2e,scale,e2enode,benchnode
STATICCHECK_GOGC := 400
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags $(LINT_TAGS) ./...
	GOGC=$(STATICCHECK_GOGC) $(GO) tool staticcheck -tags $(LINT_TAGS) ./...
	cd hack/testimages && $(GO) vet ./... && GOGC=$(STATICCHECK_GOGC) $$(cd ../.. && $(GO) tool -n staticcheck) ./...
	cd hack/monitoring && $(GO) vet ./... && GOGC=$(STATICCHECK_GOGC) $$(cd ../.. && $(GO) tool -n staticcheck) ./...

# The CRDs under manifests/ from the Go types of api/v1alpha1 and their +kubebuilder markers.
generate:
	GO=$(GO) bash hack/generate.sh

# Regenerate the golden files (testdata/<case>/request.json and hook.flags from its case.yaml, then
# response.json; see testdata/README.md), the NetworkPolicy truth table and the monitoring
# component's list of selected series (hack/monitoring/referenced-series.txt); read every changed
# line before committing.
update:
	$(GO) test ./sync ./prepull -run 'TestGolden|TestNetworkPolicyTruthTable' -update
	cd hack/monitoring && $(GO) test -run TestQueriesSelectExistingSeries -update

# The hook on a loopback control plane, under the project's simulator in Metacontroller's part (a
# test double), or under a real Metacontroller: METACONTROLLER_BIN=/path/to/metacontroller (v4.17+).
# METACONTROLLER_CRDS: Metacontroller's release file manifests/production/metacontroller-crds-v1.yaml
# (default: its copy in ../shared/metacontroller/ beside the checkout, when there is one).
e2e:
	bash hack/e2e.sh

# The hook on a REAL node (containerd, runc, kubelet, kube-proxy, kube-network-policies): the
# player's loop, failure reasons, the securityContext from inside, and isolation with real packets
# across an instance's life. Root and Linux; installs its Debian packages. Under the simulator or
# METACONTROLLER_BIN, with METACONTROLLER_CRDS, as e2e.
e2e-node:
	bash hack/e2e-node.sh

# A scale run (BENCH_CHALLENGES, default 500); not part of CI. Under a real Metacontroller with
# METACONTROLLER_BIN (and METACONTROLLER_CRDS, as e2e); without it under the simulator, whose figures
# are the simulator's, not Metacontroller's.
bench-cluster:
	bash hack/bench-cluster.sh

# An event's peak on the real node of make e2e-node (BENCH_INSTANCES, default 300, at once and at
# BENCH_RATE a second); not part of CI. Root and Linux, like e2e-node, whose lock and controller
# (the simulator, or METACONTROLLER_BIN) it shares.
bench-node:
	bash hack/bench-node.sh

# Go benchmarks: decode + sync + encode and their parts (sync), then the served handler on recorded
# requests, one at a time and in parallel on 1 and 2 cores (cmd/challenge-hook), then the TCP
# gateway against a direct connection (internal/tcpgateway) and its load run (bench-gateway), and
# the platform component's load run (bench-platform). A report; docs/benchmarks.md records a run.
# BENCH_FLAGS adds go test flags, e.g. -count=5.
bench: bench-gateway bench-platform
	$(GO) test ./sync -run '^$$' -bench . -benchmem $(BENCH_FLAGS)
	$(GO) test ./cmd/challenge-hook -run '^$$' -bench . -benchmem -cpu 1,2 $(BENCH_FLAGS)
	$(GO) test ./internal/tcpgateway -run '^$$' -bench . -benchmem $(BENCH_FLAGS)

# The TCP gateway's loopback load run: the built binary's tcp-gateway as a child process in front
# of an echo instance, and HAProxy in plain TCP mode in front of the same instance (the usual
# proxy; its column is skipped, with how to install it, when haproxy is not on PATH), each figure
# against a direct connection in the same run, alternating (latency, bulk throughput, connection
# rate, memory per idle connection), then the gateway's targets against them, PASS or FAIL; and
# hack/tcpgateway-ceiling, the least a gateway that asks for a token does, as a column of its own
# (what any such gateway can reach against HAProxy). GATEWAY_LOAD_FLAGS adds flags, e.g. -idle
# 1000,10000 (lowered to what RLIMIT_NOFILE's hard limit holds: two descriptors per connection in
# the proxy, two in the load run).
bench-gateway: build
	$(GO) build -o bin/tcpgateway-ceiling ./hack/tcpgateway-ceiling
	$(GO) run ./hack/tcpgateway-load -binary $(BIN) -ceiling bin/tcpgateway-ceiling $(GATEWAY_LOAD_FLAGS)

# The platform component under rCTF's polling (hack/platform-load): the component built in-process
# as `challenge-hook platform` builds it (informer cache over a fake dynamic client holding 20
# marked ChallengeDefinitions and 1,000 teams' Challenges, its instancer and handler behind
# net/http on 127.0.0.1), and a floor (a net/http server answering a fixed JSON body of the same
# size), each polled as rCTF polls every team (every 2 s while starting, every 10 s while
# running) over one keep-alive pool, alternating in 3 s phases after a warm-up phase of each, 60 s
# each: count, errors, p50, p99 and max of both, the component's p99 above the floor's, and the
# target (p99 at most 5 ms), PASS or FAIL; then the time of a start (PUT) through the fake client.
# Exits non-zero only when a request failed. About 2 minutes. PLATFORM_LOAD_FLAGS adds flags, e.g.
# -rate-multiplier 10 -duration 30s.
bench-platform:
	$(GO) run ./hack/platform-load $(PLATFORM_LOAD_FLAGS)

# The TCP gateway under attack, measured: honest players (from their own addresses and from one
# shared address) while each attack class runs from 250 addresses on 127.0.0.0/8 (bad tokens,
# silent connections, silent connections whose address presents its own valid token twice per
# eviction, one byte a second, connect-and-close churn, oversized lines, the attacker's own valid
# token), each against a fresh gateway at its defaults with --max-connections=2000:
# success rate and handshake p99 per class, the gateway's RSS before, during and after, PASS or
# FAIL per target. About 6 minutes; a report, not a test. GATEWAY_ATTACK_FLAGS adds flags, e.g.
# -attack-classes none,silent -attack-for 30s.
bench-gateway-attack: build
	$(GO) run ./hack/tcpgateway-load -binary $(BIN) -attack $(GATEWAY_ATTACK_FLAGS)

clean:
	rm -rf bin .cache
