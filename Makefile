# challenge-hook: every command a developer or CI needs. run, test, test-ci, generate, update, bench
# and fuzz need only Go: their other tools, staticcheck and controller-gen, are pinned by go.mod's
# tool directive. e2e needs openssl, curl and setsid.
SHELL := /bin/bash
GO ?= go
BIN := bin/challenge-hook
# Every go command here builds with -trimpath, as the image does: a package's build-cache key then
# leaves out the module cache's path, so that a warm build cache serves an empty module cache
# (CI's) without compiling again, and the three modules (the hook's, hack/testimages and
# hack/monitoring) share one compiled standard library and toolchain.
export GOFLAGS := -trimpath $(filter-out -trimpath,$(shell $(GO) env GOFLAGS))
# PHASE NAME COMMAND: runs COMMAND and prints its wall time (hack/phase.sh); TEST_PHASE and
# CI_PHASE also log it for make test's and make test-ci's summaries.
PHASE := bash hack/phase.sh
TEST_PHASE := PHASE_LOG=.cache/phases $(PHASE)
CI_PHASE := PHASE_LOG=.cache/phases-ci $(PHASE)
# The flags `make run` serves with: a pinned clock, a demo flag key, a demo TCP gateway and a demo token
# (testdata/dev.token), the same configuration the golden files were computed with, so that curl of
# any testdata request (with that token) answers its response.json.
DEV_FLAGS := $(shell cat testdata/dev.flags 2>/dev/null)

.PHONY: all xterm build run test test-ci lint lint-ci generate update e2e e2e-node bench bench-gateway bench-gateway-attack bench-platform bench-cluster bench-node fuzz clean

all: test build

# xterm.js for the player page's terminal, fetched at its pinned version and integrity into a
# gitignored directory the binary embeds (hack/fetch-xterm.sh). Offline, or without curl, build and
# run go on without it: the page then offers the WebSocket commands and no terminal (make e2e and
# the Dockerfile, which ship or test the terminal, fail instead).
xterm:
	@bash hack/fetch-xterm.sh || echo "make: no xterm.js (registry.npmjs.org unreachable?): building without the player page's terminal" >&2

build: xterm
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/challenge-hook

# RUN_FLAGS adds flags, e.g. a golden case's own: make run RUN_FLAGS="$(cat testdata/<case>/hook.flags)"
run: xterm
	$(GO) run ./cmd/challenge-hook --listen=127.0.0.1:8080 --metrics-listen=127.0.0.1:8082 $(DEV_FLAGS) $(RUN_FLAGS)

# What a newcomer runs, and CI first: lint of the hook's module (gofmt, go vet), then unit, golden
# and HTTP (bad-input matrix, auth, graceful shutdown, TLS) tests; these run every fuzz target on
# its seed corpus and on the failing inputs kept under testdata/fuzz (fuzzing proper is test-ci's).
# Prints each phase's wall time, and all of them at the end. Needs only Go: no root, Docker or
# cluster. What compiles more than the hook's tests need (controller-gen for the CRD check,
# staticcheck's analysis of every dependency, the e2e tests' packages, Prometheus, the test
# images) or fuzzes is test-ci's. go test's own vet (a subset of go
# vet's checks) is off: lint has run all of go vet's over the same files, and it cost go test 30 of
# its 65 CPU-seconds from an empty build cache.
test:
	@mkdir -p .cache && : >.cache/phases
	@$(TEST_PHASE) lint $(MAKE) --no-print-directory lint
	@$(TEST_PHASE) "go test" $(GO) test -vet=off -count=1 ./...
	@echo "make test passed:" && cat .cache/phases

# What CI runs after make test (.ci/run), the checks make test leaves out: first that every CRD
# under manifests/ is what api/v1alpha1 generates (controller-gen; make generate rewrites them),
# then lint-ci, then the
# monitoring component's tests (hack/monitoring, a module of its own: Prometheus's rule manager,
# at the version its go.mod pins, runs the alerts' rule tests, manifests/components/monitoring/
# *.test.yaml, in-process as promtool would; Prometheus's query engine evaluates every dashboard
# panel over a synthetic event; every query selects only series that exist), then every fuzz
# target for FUZZTIME (default 10s; make fuzz runs them longer). Prints each phase's wall time,
# and all of them at the end. Needs only Go, as make test.
test-ci:
	@mkdir -p .cache && : >.cache/phases-ci
	@$(CI_PHASE) "generate check" env GO=$(GO) bash hack/generate.sh --check
	@$(CI_PHASE) lint-ci $(MAKE) --no-print-directory lint-ci
	@$(CI_PHASE) monitoring $(GO) -C hack/monitoring test -count=1 ./...
	@$(CI_PHASE) fuzz env FUZZTIME=$${FUZZTIME:-10s} GO=$(GO) bash hack/fuzz.sh
	@echo "make test-ci passed:" && cat .cache/phases-ci

fuzz:
	bash hack/fuzz.sh

# make test's: gofmt of every Go file of the three modules, and go vet of every package of the
# hook's module that go test compiles.
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# make test-ci's: go vet of the hook's module again with the e2e tests' build tags, then
# staticcheck over it, then go vet and staticcheck (the hook module's, pinned by its go.mod) over
# the two modules under hack/. The tags select only files of their own (e2e/, e2e/node/), so one
# pass with all of them checks what a pass per tag set would.
# staticcheck analyses every dependency from source for its facts; with GOGC=400 it collects its
# garbage less often: a quarter less CPU (43 to 33 s over the hook's module, empty staticcheck cache)
# for a peak of 0.8 GB instead of 0.46.
LINT_TAGS := e2e,scale,e2enode,benchnode
STATICCHECK_GOGC := 400
lint-ci:
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
# Real etcd, kube-apiserver, controller-manager and scheduler and a kwok fake node; it tests the
# admission of the CRDs and of every Challenge and ChallengeDefinition in the README, docs/,
# examples/ and the golden requests, Pod Security, every golden case replayed against the binary,
# instances Running with nothing written over three resyncs, expiry, errors, a missing definition,
# the hook down, deletion (orphan and foreground refused), a changed definition recreating only its
# Pod, the NetworkPolicy created before the Pod and kept while a Pod is Terminating, the examples
# of several pods as written, the platform's calls of docs/platform.md and its stop on solve, a
# quota's hard cap, the owner label and limit, definitions of another namespace (refused, or run
# when granted), the pre-pull component, the activity stamper, and the player page in a headless
# Chromium (TestPlayerPage, chromedp; hack/e2e.sh installs Debian's chromium when missing).
e2e:
	bash hack/e2e.sh

# The hook on a REAL node (containerd, runc, kubelet, kube-proxy, kube-network-policies): the
# player's loop, failure reasons, the securityContext from inside, and isolation with real packets
# across an instance's life. Root and Linux; installs its Debian packages. Under the simulator or
# METACONTROLLER_BIN, with METACONTROLLER_CRDS, as e2e.
# It tests the README's definition Running once its readiness probe passes and its flag at the
# NodePort endpoints; /flags/verify; stop, start and restart; real ErrImagePull, CrashLoopBackOff,
# OOMKilled and CreateContainerConfigError; an attacker instance probing a victim (Pod IP, Service,
# NodePort), a Pod outside any instance and another namespace through the victim's whole life and
# its own teardown; who reaches whom in instances of three pods; the policy gate letting no packet
# through before the policy (TestPolicyGate); and the TCP gateway as its component ships it: a
# token reaches its own instance alone, the instance answers the gateway alone, and a rollout turns
# no player away (TestTCPGateway*). The test images are one static binary (hack/testimages)
# imported with ctr: no registry, no Docker.
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
# rate, memory per idle connection), then the gateway's targets against them, PASS or FAIL; the
# same gateway process's WebSocket listener (--websocket-listen, GET /ws/<token>) as a column of
# its own, with its targets against the TCP path of the same run (handshake p50 at most 1.5x, bulk
# at least 0.8, at most 8 KiB per idle WebSocket); and hack/tcpgateway-ceiling, the least a gateway that asks for a token does, as a column of its own
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
# token), and the WebSocket upgrade's own classes against its --websocket-listen (slow headers,
# oversized headers, oversized frames, bad tokens by URL), each against a fresh gateway at its
# defaults with --max-connections=2000 (the attackers in a process of their own at nice 19, as
# attackers on machines of their own take none of its cores; -attack-nice=0 shares them), honest
# players over WebSocket counted apart beside those over TCP: success rate and handshake p99 (and
# its dial to prompt) per class, the gateway's RSS before, during and after,
# PASS or FAIL per target. About 10 minutes; a report, not a test. GATEWAY_ATTACK_FLAGS adds
# flags, e.g. -attack-classes none,silent,ws-slow-headers -attack-for 30s -honest-ws 0.
bench-gateway-attack: build
	$(GO) run ./hack/tcpgateway-load -binary $(BIN) -attack $(GATEWAY_ATTACK_FLAGS)

clean:
	rm -rf bin .cache
