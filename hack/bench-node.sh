#!/usr/bin/env bash
# make bench-node: an event's peak on real containers (not part of CI). The node of make e2e-node
# (hack/e2e-node.sh does the packages, builds, node up and teardown, and holds the same machine-wide
# lock: a bench and an e2e-node run queue for the one node), with what hundreds of instances need
# raised, then e2e/node/bench_test.go (build tags e2enode,benchnode): an attacker instance, then per
# mode BENCH_INSTANCES instances created at once (burst) and at BENCH_RATE a second (rate), with
# their start, first byte, policy, deletion, memory, idle CPU and each process's CPU.
#   BENCH_INSTANCES   instances per wave (default 300)
#   BENCH_RATE        instances a second in the rate mode (default 5)
#   BENCH_MODES       burst,rate (default both, in that order)
#   BENCH_IDLE_SECONDS  the idle window after the first wave (default 60)
#   BENCH_SAMPLE      instances of each wave the attacker probes (default 20)
#   BENCH_RESYNC_SECONDS  the CompositeController's resyncPeriodSeconds (default: compositecontroller.yaml's)
# Everything else as make e2e-node (METACONTROLLER_BIN, METACONTROLLER_CRDS, NODE_ROOT, ...): under
# the project's simulator unless METACONTROLLER_BIN names a real Metacontroller; the controller's
# figures of a run under the simulator are the simulator's, not Metacontroller's.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${BENCH_INSTANCES:-300}
export BENCH_INSTANCES=$n
# Raised for N instances (each says why):
#   the kubelet's maxPods (110 by default): N, the attacker, the two Pods outside any instance, and
#   room for the next wave's first Pods while the last wave's are still terminating;
export KUBELET_MAX_PODS=${KUBELET_MAX_PODS:-$((2 * n + 20))}
#   the node's Pod range (host-local hands out the node's CIDR: a /24 holds 254 Pods): a /21, 2046;
export NODE_POD_CIDR=${NODE_POD_CIDR:-10.244.0.0/21}
#   open files of containerd, the kubelet and the shims they start (one shim per Pod);
ulimit -n "$(ulimit -Hn)"
# and turned down: Metacontroller's debug log (level 4 in make e2e-node) logs every sync of every
# instance, which at hundreds of instances is a process of its own.
export MC_LOG_LEVEL=${MC_LOG_LEVEL:-info}
# The shipped resync period (make e2e-node shortens it to 5 s), so that idle is an event's idle.
export E2E_NODE_RESYNC_SECONDS=${BENCH_RESYNC_SECONDS:-$(awk '/^  resyncPeriodSeconds:/ {print $2}' compositecontroller.yaml)}
export E2E_NODE_TAGS="e2enode benchnode" E2E_NODE_TIMEOUT=${BENCH_TIMEOUT:-90m}
export E2E_NODE_RUN_ARGS="-test.run=^TestBenchNode\$ ${BENCH_RUN_ARGS:-}"
echo "[bench-node] $n instances per wave; raised: kubelet maxPods $KUBELET_MAX_PODS, node Pod range $NODE_POD_CIDR, open files $(ulimit -n); Metacontroller log level $MC_LOG_LEVEL; resync ${E2E_NODE_RESYNC_SECONDS}s" >&2
exec bash hack/e2e-node.sh
