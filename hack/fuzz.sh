#!/usr/bin/env bash
# Runs each fuzz target of packages sync, prepull, cmd/challenge-hook, internal/tcptoken and
# internal/tcpgateway for ${FUZZTIME:-30s}, one at a time (go test -fuzz takes a single target),
# and fails if any target fails. A crasher is written to
# <package>/testdata/fuzz/<FuzzName>/<hash>: read it, fix the bug, and keep the file so that every
# `go test` of the package replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
# Workers (default here 2, go's default is every core): CI machines are small and shared.
FUZZ_PARALLEL=${FUZZ_PARALLEL:-2}
# Go minimizes every new interesting input for up to 60 s by default; on these large JSON inputs
# that stalls fuzzing (measured: about 50 execs in 45 s, against about 4000/s with 0). 0 turns
# minimization off; set FUZZMINIMIZETIME=60s to shrink a crasher you are debugging.
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-0}
# Each package's fuzzing test binary is built once and runs each of its targets as `go test -fuzz`
# would run it: from the package's directory (a failing input is written to its testdata/fuzz), with
# go's fuzz cache. One build and link per package instead of one per target, and no separate build
# to list the targets.
#
# The binary is built as `go test -fuzz` builds it (the compiler's -d=libfuzzer coverage counters
# that guide the fuzzer) for this module's packages only, not for every package it links:
# `go test -fuzz` instruments client-go, k8s.io/api, Prometheus's client and the standard library
# too, a second compilation of all of them (measured 176 CPU-seconds from an empty build cache,
# against 16 here: the dependencies come compiled from go vet's and go test's builds). Over 10 s
# per target, the module's own counters guide the fuzzer at least as far for every target: a corpus
# that covers as many of the module's statements or more, from 4 to 190 times the executions
# (FuzzPolicyGate, an HTTP round trip per input: about as many), see
# docs/benchmarks.md#fuzzing-instrumentation. `go test -fuzz` still fuzzes a target with every
# package instrumented.
module=$($GO list -m)
bin=$(mktemp -d)
# fuzz PKG TARGET LOG: one run of PKG's binary, its output on stdout and in LOG.
fuzz() {
	(cd "$1" && "$bin/test" -test.run '^$' -test.fuzz "^${2}\$" -test.fuzztime "$FUZZTIME" \
		-test.fuzzminimizetime "$FUZZMINIMIZETIME" -test.parallel "$FUZZ_PARALLEL" \
		-test.fuzzcachedir "$fuzzcache/$importpath" -test.paniconexit0) 2>&1 | tee "$3"
	return "${PIPESTATUS[0]}"
}
# deadline_race LOG: the run failed only by Go's fuzzing coordinator racing its own -fuzztime
# deadline (golang/go#75804, fixed in Go 1.27): "context deadline exceeded" and no input written,
# no panic, no test failure of the target.
deadline_race() {
	grep -q 'context deadline exceeded' "$1" &&
		! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$1"
}
log=$(mktemp)
trap 'rm -rf "$log" "$bin"' EXIT
fuzzcache=$($GO env GOCACHE)/fuzz
status=0
for pkg in ./sync ./prepull ./cmd/challenge-hook ./internal/tcptoken ./internal/tcpgateway; do
	$GO test -c -gcflags="$module/...=-d=libfuzzer" -o "$bin/test" "$pkg"
	importpath=$($GO list "$pkg")
	for target in $(cd "$pkg" && "$bin/test" -test.list '^Fuzz' | grep '^Fuzz'); do
		echo "== $pkg $target for $FUZZTIME"
		if fuzz "$pkg" "$target" "$log"; then
			continue
		fi
		if deadline_race "$log"; then
			echo "== $pkg $target: Go's -fuzztime deadline race (golang/go#75804), nothing found: once more"
			fuzz "$pkg" "$target" "$log" && continue
		fi
		echo "== $pkg $target FAILED"
		status=1
	done
done
exit $status
