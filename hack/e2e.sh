#!/usr/bin/env bash
# make e2e: end-to-end tests of the hook against a real kube-apiserver on loopback, under the
# project's simulator in Metacontroller's part (a test double, hack/metacontroller-sim), or under a
# real Metacontroller when METACONTROLLER_BIN names one (v4.17+; the same flags either way).
#   1. builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok once
#      per version into a cache outside the repository (hack/build-k8s-bins.sh);
#   2. builds the hook binary, and the simulator unless METACONTROLLER_BIN is set;
#   3. starts the control plane, a kwok fake node and the controller (Metacontroller's CRDs applied
#      first, from METACONTROLLER_CRDS) on fixed loopback ports, in .cache/e2e/;
#   4. runs the Go e2e tests (build tag e2e), which serve the hook on $E2E_HOOK_ADDR and register
#      it through compositecontroller.yaml, and exits with their status;
#   and always stops what it started (EXIT trap).
# Environment: METACONTROLLER_BIN (a Metacontroller binary; default: the simulator),
# METACONTROLLER_CRDS (Metacontroller's release file manifests/production/metacontroller-crds-v1.yaml;
# default its copy in ../shared/metacontroller/ beside the checkout, when there is one),
# K8S_BINS_DIR (binaries), E2E_RUN (state dir), E2E_RUN_ARGS (extra test binary flags, e.g.
# -test.run=TestLifecycle), E2E_KEEP_LOGS=1 to print the component logs' tails on success too,
# E2E_CHROMIUM (the browser of TestPlayerPage; default Debian's chromium, installed when missing),
# UPDATE_SCREENSHOT=1 (TestPlayerPage rewrites docs/images/player-page.png).
# The tests get E2E_CONTROLLER (metacontroller or metacontroller-sim) and E2E_CONTROLLER_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
run_defaults e2e
RUN=${E2E_RUN:-$ROOT/.cache/e2e}
# What it costs, before it starts: no root and no Docker, but a long first build.
log "make e2e: no Docker, no cluster, and no root once Debian's chromium is there (the player page's
  browser test drives it; it installs it with apt-get when missing, as root or with sudo when sudo
  asks no password). The first time it builds the control plane and kwok from source into $CACHE
  (up to about 18 minutes on 2 cores, more on a busy machine); once they are cached a run takes 1½
  to 3 minutes."

# The browser of e2e/playerpage_test.go (chromedp drives it headless): E2E_CHROMIUM, else Debian's
# chromium, installed with apt-get when missing as make e2e-node installs its packages (apt-get
# update first; the archive's current version, not pinned: the version is logged).
browser=$SECONDS
if [[ -z ${E2E_CHROMIUM:-} ]]; then
  if ! command -v chromium >/dev/null; then
    sudo=()
    if [[ $(id -u) != 0 ]]; then
      if sudo -n true 2>/dev/null; then sudo=(sudo -n); else
        log "chromium is missing, and installing it needs root: sudo apt-get install chromium (Debian), or
  set E2E_CHROMIUM=/path/to/chromium-or-chrome"
        exit 1
      fi
    fi
    command -v apt-get >/dev/null || { log "chromium is missing, and there is no apt-get: set E2E_CHROMIUM=/path/to/chromium-or-chrome"; exit 1; }
    log "installing chromium with apt-get (Debian's current version, not pinned)"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium > /dev/null
  fi
  E2E_CHROMIUM=$(command -v chromium)
fi
log "browser ready in $((SECONDS - browser))s: $E2E_CHROMIUM, $("$E2E_CHROMIUM" --version 2>/dev/null || echo "which does not run")"
# The real WebSocket clients of internal/tcpgateway's TestWebSocketRealClients, which
# e2e/websocketclients_test.go runs with REAL_WEBSOCKET_CLIENTS=required: Debian's python3-websocket
# and node-ws, installed with apt-get when missing, as chromium is.
if ! /usr/bin/python3 -c 'import websocket' 2>/dev/null || [[ ! -d /usr/share/nodejs/ws ]]; then
  sudo=(); [[ $(id -u) == 0 ]] || sudo=(sudo -n)
  log "installing python3-websocket and node-ws with apt-get (Debian's current versions, not pinned)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends python3-websocket node-ws > /dev/null
fi

start=$SECONDS
bash hack/build-k8s-bins.sh
log "control-plane binaries ready in $((SECONDS - start))s ($K8S_BINS_DIR)"
build_controller
log "$E2E_CONTROLLER ready after $((SECONDS - start))s ($E2E_CONTROLLER_BIN)"

bash hack/fetch-xterm.sh # the player page's terminal, which the browser test opens
CGO_ENABLED=0 $GO build -o bin/challenge-hook ./cmd/challenge-hook

# Fixed, non-default loopback ports, so a developer's own scratch cluster does not collide.
export BIN=$K8S_BINS_DIR RUN EXTRA="kcm scheduler kwok metacontroller" KWOK_STAGES=$ROOT/hack/kwok-stages.yaml
export ETCD_PORT=24790 API_PORT=26443 KCM_PORT=20257 SCHED_PORT=20259 KWOK_PORT=20247
export MC_METRICS_PORT=29999 MC_HEALTH_PORT=28081 MC_LOG_LEVEL=4
export MC_FLAGS="--workers=5 --client-go-qps=100 --client-go-burst=200"
# Restart the controller when it exits, as Metacontroller's Deployment would (hack/cluster.sh); each
# restart is printed at the end.
export MC_RESTART=1
# The hook the tests serve, at the address the CompositeController's webhook urls name, and the
# CompositeController's resync period: short, so that a test can watch three of them.
HOOK_ADDR=127.0.0.1:28080 RESYNC_SECONDS=${E2E_RESYNC_SECONDS:-5}
export KUBECACHEDIR=$RUN/kubecache
mkdir -p "$RUN"
# One e2e plane per machine at a time (its ports are fixed): a second run waits here instead of
# failing on "address already in use". The lock stays with this script, not with the plane's
# processes (9>&- where they start).
take_lock "${TMPDIR:-/tmp}/challenge-hook-e2e-plane.lock" "make e2e"
# A previous run killed hard may have left its plane running: stop it first (by its own PIDs).
bash hack/cluster.sh stop >/dev/null 2>&1 9>&- || true

status=1
stop_plane() {
  bash hack/cluster.sh stop || true
  if grep -q RESTART "$RUN/logs/metacontroller-restarter.log" 2>/dev/null; then
    log "$E2E_CONTROLLER exited during the run and was restarted:"
    grep RESTART "$RUN/logs/metacontroller-restarter.log" >&2
    grep -m3 '^panic:' "$RUN/logs/metacontroller.log" >&2 || true
  fi
  if [[ $status != 0 || ${E2E_KEEP_LOGS:-0} == 1 ]]; then
    tail_logs 15 "$RUN"/logs/*.log
  fi
  log "done in $((SECONDS - start))s, exit status $status"
}
trap stop_plane EXIT

plane=$SECONDS
bash hack/cluster.sh start 9>&-
log "control plane up in $((SECONDS - plane))s"

# The test binary runs in the background (await_tests): an interrupted run stops it before the EXIT
# trap stops the plane. E2E_METACONTROLLER_KUBECONFIG is the kubeconfig hack/cluster.sh runs
# the controller with: the tests name its user in the deletion policy's ConfigMap, as an organizer
# names Metacontroller's. E2E_CONTROLLER says which controller that is.
$GO test -tags e2e -c -o "$RUN/e2e.test" ./e2e
(cd e2e && exec env KUBECONFIG="$RUN/kubeconfig" E2E_HOOK_BIN="$ROOT/bin/challenge-hook" E2E_REPO_ROOT="$ROOT" E2E_KUBECTL="$K8S_BINS_DIR/kubectl" \
  E2E_CHROMIUM="$E2E_CHROMIUM" \
  E2E_CONTROLLER="$E2E_CONTROLLER" E2E_CONTROLLER_BIN="$E2E_CONTROLLER_BIN" \
  E2E_HOOK_ADDR=$HOOK_ADDR E2E_RESYNC_SECONDS=$RESYNC_SECONDS E2E_METACONTROLLER_LOG="$RUN/logs/metacontroller.log" \
  E2E_METACONTROLLER_KUBECONFIG="$RUN/kubeconfig" \
  E2E_METACONTROLLER_METRICS="127.0.0.1:$MC_METRICS_PORT" \
  "$RUN/e2e.test" -test.v -test.count=1 -test.timeout=15m ${E2E_RUN_ARGS:-}) 9>&- &
await_tests $!
exit $status
