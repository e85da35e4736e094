#!/usr/bin/env bash
# make bench-cluster: a scale run of the hook (not part of CI), under a real Metacontroller when
# METACONTROLLER_BIN names one (v4.17+), else under the project's simulator (a test double): its
# figures are then the simulator's, not Metacontroller's. METACONTROLLER_CRDS as make e2e (hack/e2e.sh).
# Starts the same loopback control plane as `make e2e` (own ports and state in .cache/bench-cluster/),
# with the API server's audit log recording every request (who read or wrote what, when), and
# the controller with $BENCH_MC_FLAGS; then e2e/scale_test.go (build tags e2e,scale) creates
# $BENCH_CHALLENGES Challenges at once and reports time to all Running, creation -> readyAt, API
# writes per instance by component, hook syncs per instance, CPU per process, and a steady window
# without child writes: its reads and writes by component and verb (all namespaces), Metacontroller's
# syncs, enqueues and resyncAfterSeconds wake-ups (its workqueue metrics), the hook's CPU per sync,
# the control plane's CPU per idle instance per second, and each process's memory.
#   BENCH_CHALLENGES      how many Challenges (default 500)
#   BENCH_MC_FLAGS        Metacontroller flags (default --workers=5 --client-go-qps=100 --client-go-burst=200)
#   BENCH_KCM_FLAGS       extra kube-controller-manager flags (default none: --kube-api-qps 20)
#   BENCH_RESYNC_SECONDS  the CompositeController's resyncPeriodSeconds (default: compositecontroller.yaml's)
#   BENCH_SETTLE_SECONDS  from all Running to the steady window (default 125: the Creating answers'
#                         wake-ups at the Pod's 120 s progress deadline are behind it)
#   BENCH_STEADY_SECONDS  the steady window (default resync + 15 s: every instance resyncs in it)
#   BENCH_OWNERS          how many owners share the Challenges (default: one per Challenge)
#   BENCH_MAX_INSTANCES_PER_OWNER  restart the hook with --max-instances-per-owner (default: off), to
#                         measure the cost of relating each Challenge to its owner's
#   BENCH_IDLE_TIMEOUT    the definition's idleTimeout (default: none); with it, after the steady window
#                         (whose idle cost is then that of untouched instances with an idle clock), a
#                         stamping window stamps every instance once as the activity stamper does, and
#                         reports the control plane's CPU per stamp and per instance in use per second
#   BENCH_STAMP_SECONDS   the stamping window (default 60)
#   BENCH_RESTART         0: no controller restart at the end (default: restart it, and check that
#                         every Challenge is synced again at once)
# The test gets E2E_CONTROLLER (metacontroller or metacontroller-sim) and E2E_CONTROLLER_BIN.
# Runs alone: take the lock make e2e takes (flock /tmp/challenge-hook-e2e-plane.lock make bench-cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
run_defaults bench-cluster
RUN=${BENCH_RUN:-$ROOT/.cache/bench-cluster}

bash hack/build-k8s-bins.sh
build_controller
CGO_ENABLED=0 $GO build -o bin/challenge-hook ./cmd/challenge-hook
mkdir -p "$RUN"
$GO test -tags e2e,scale -c -o "$RUN/scale.test" ./e2e

export BIN=$K8S_BINS_DIR RUN EXTRA="kcm scheduler kwok metacontroller" KWOK_STAGES=$ROOT/hack/kwok-stages.yaml
export ETCD_PORT=34790 API_PORT=36443 KCM_PORT=30257 SCHED_PORT=30259 KWOK_PORT=30247
export MC_METRICS_PORT=39999 MC_HEALTH_PORT=38081 MC_LOG_LEVEL=info
export MC_FLAGS=${BENCH_MC_FLAGS:---workers=5 --client-go-qps=100 --client-go-burst=200}
# BENCH_SHARDS=2: manifests/components/sharding's two shards, each its own controller (the same
# binary, $E2E_CONTROLLER_BIN) with the same flags: shard 0 (this one) runs the CompositeControllers
# not labelled shard 1, shard 1 (started below) the others; the test registers shard 1's
# CompositeController and labels every other Challenge ctf.challenge-hook.dev/shard=1.
SHARDS=${BENCH_SHARDS:-1}
if [[ $SHARDS == 2 ]]; then MC_FLAGS="$MC_FLAGS --target-label-selector=ctf.challenge-hook.dev/shard!=1"; fi
export KCM_FLAGS=${BENCH_KCM_FLAGS:-}
export KUBECACHEDIR=$RUN/kubecache
cat >"$RUN/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  # Reads too (get, list, watch): where an idle cluster's API server time goes. Metadata only: no
  # bodies, so the log costs the API server little next to what it records.
  - level: Metadata
EOF
rm -f "$RUN/audit.log"
export APISERVER_EXTRA_FLAGS="--audit-policy-file=$RUN/audit-policy.yaml --audit-log-path=$RUN/audit.log --audit-log-maxsize=0 --audit-log-mode=batch"
bash hack/cluster.sh stop >/dev/null 2>&1 || true
trap 'bash hack/cluster.sh stop || true' EXIT
bash hack/cluster.sh start
if [[ $SHARDS == 2 ]]; then
  # Shard 1's controller: a PID file in $RUN/pids, so that the test meters its CPU and
  # hack/cluster.sh stop stops it.
  log "starting metacontroller-1 (shard 1): $E2E_CONTROLLER_BIN"
  setsid "$E2E_CONTROLLER_BIN" --kubeconfig="$RUN/kubeconfig" --discovery-interval=2s --zap-log-level=info \
    --metrics-address=127.0.0.1:39998 --health-probe-bind-address=127.0.0.1:38082 \
    ${BENCH_MC_FLAGS:---workers=5 --client-go-qps=100 --client-go-burst=200} \
    --target-label-selector=ctf.challenge-hook.dev/shard=1 > "$RUN/logs/metacontroller-1.log" 2>&1 < /dev/null &
  echo $! > "$RUN/pids/metacontroller-1.pid"
  echo metacontroller-1 >> "$RUN/pids/order"
fi

log "$E2E_CONTROLLER $MC_FLAGS; controller-manager ${KCM_FLAGS:-(defaults)}; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
(cd e2e && env KUBECONFIG="$RUN/kubeconfig" E2E_HOOK_BIN="$ROOT/bin/challenge-hook" E2E_REPO_ROOT="$ROOT" \
  E2E_CONTROLLER="$E2E_CONTROLLER" E2E_CONTROLLER_BIN="$E2E_CONTROLLER_BIN" \
  E2E_HOOK_ADDR=127.0.0.1:38080 E2E_RESYNC_SECONDS="${BENCH_RESYNC_SECONDS:-$(awk '/^  resyncPeriodSeconds:/ {print $2}' "$ROOT/compositecontroller.yaml")}" \
  E2E_METACONTROLLER_LOG="$RUN/logs/metacontroller.log" BENCH_SHARDS=$SHARDS BENCH_MC_METRICS=127.0.0.1:$MC_METRICS_PORT BENCH_AUDIT_LOG="$RUN/audit.log" BENCH_PIDS_DIR="$RUN/pids" \
  "$RUN/scale.test" -test.run='^TestScale$' -test.v -test.count=1 -test.timeout=30m)
