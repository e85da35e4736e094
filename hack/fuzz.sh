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
# Each package's fuzzing test binary (instrumented, as `go test -fuzz` builds it) is built once and
# runs each of its targets as `go test -fuzz` would run it: from the package's directory (a
# failing input is written to its testdata/fuzz), with go's fuzz cache. One build and link per
# package instead of one per target, and no separate build to list the targets. The tag fuzzbuild
# leaves out the test files that only bring heavy test dependencies (sync's NetworkPolicy truth
# table and its engine, cyclonus) and hold no fuzz target: fuzzing instruments every package of the
# binary.
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
	$GO test -c -fuzz . -tags fuzzbuild -o "$bin/test" "$pkg"
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
