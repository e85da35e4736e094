#!/usr/bin/env bash
# A local Kubernetes control plane on loopback, for the e2e tests (binaries from
# hack/build-k8s-bins.sh).
#   cluster.sh start   starts etcd + kube-apiserver (+ optional controller-manager, scheduler,
#                      kwok, and Metacontroller or the project's simulator in its part), waits
#                      until each is healthy, writes $RUN/kubeconfig
#   cluster.sh stop    stops everything it started, by PID (all but etcd, then etcd)
#   cluster.sh status
# Environment:
#   BIN    directory with etcd kube-apiserver [kube-controller-manager kube-scheduler kwok]
#          (default: the cache of hack/build-k8s-bins.sh)
#   RUN    state directory (pki, etcd data, logs, pids, kubeconfig); 'start' wipes its data
#          unless KEEP=1
#   ETCD   etcd binary (default $BIN/etcd, else etcd on PATH, e.g. Debian's etcd-server)
#   EXTRA  any of "kcm scheduler kwok metacontroller" (default none: apiserver only)
#   KWOK_STAGES  kwok stage configuration (default $BIN/kwok-stages.yaml)
#   KCM_FLAGS    extra kube-controller-manager flags (e.g. --kube-api-qps=100)
#   E2E_CONTROLLER_BIN   with EXTRA's metacontroller: the binary started in Metacontroller's part,
#                a real Metacontroller or the project's simulator, with Metacontroller's flags
#                (hack/lib.sh's controller_defaults chooses it); its process is named metacontroller
#                ($RUN/pids/metacontroller.pid, $RUN/logs/metacontroller.log) either way
#   METACONTROLLER_CRDS  Metacontroller's CRDs (its release's metacontroller-crds-v1.yaml), applied
#                before it starts
#   MC_FLAGS     Metacontroller flags besides kubeconfig, ports and logging
#                (default --workers=5 --client-go-qps=100 --client-go-burst=200)
#   MC_LOG_LEVEL Metacontroller's --zap-log-level (default 4: one line per child create/update/delete)
#   MC_RESTART   non-empty: start it again whenever it exits (the process metacontroller-restarter)
#   ETCD_PORT API_PORT KCM_PORT SCHED_PORT KWOK_PORT MC_METRICS_PORT MC_HEALTH_PORT
#          loopback ports (etcd peer = ETCD_PORT+1)
set -euo pipefail

BIN=${BIN:-${K8S_BINS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-bins/v${K8S:-1.36.3}}}
RUN=${RUN:?set RUN to a state directory}
EXTRA=${EXTRA:-}
ETCD_PORT=${ETCD_PORT:-2379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
API_PORT=${API_PORT:-6443}
READY_TIMEOUT=${READY_TIMEOUT:-120}
if [[ -z "${ETCD:-}" ]]; then
  if [[ -x $BIN/etcd ]]; then ETCD=$BIN/etcd; else ETCD=$(command -v etcd); fi
fi
PKI=$RUN/pki
LOGS=$RUN/logs
PIDS=$RUN/pids
KUBECONFIG_OUT=$RUN/kubeconfig

log() { echo "[cluster $(date +%T)] $*" >&2; }

gen_pki() {
  mkdir -p "$PKI"
  (
    cd "$PKI"
    [[ -f ca.crt ]] && exit 0
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=local-k8s-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    printf '%s\n' \
      'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local' \
      'extendedKeyUsage=serverAuth' 'keyUsage=digitalSignature,keyEncipherment' > apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 -extfile apiserver.ext 2>/dev/null
    # admin client cert: O=system:masters => full access even with RBAC
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin" 2>/dev/null
    printf '%s\n' 'extendedKeyUsage=clientAuth' 'keyUsage=digitalSignature,keyEncipherment' > client.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 -extfile client.ext 2>/dev/null
    # service-account token signing key pair
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
}

write_kubeconfig() {
  cat > "$KUBECONFIG_OUT" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:${API_PORT}
    certificate-authority: ${PKI}/ca.crt
users:
- name: admin
  user:
    client-certificate: ${PKI}/admin.crt
    client-key: ${PKI}/admin.key
contexts:
- name: local
  context:
    cluster: local
    user: admin
current-context: local
EOF
}

# start NAME CMD... : run in background, own process group, remember PID
start_proc() {
  local name=$1; shift
  log "starting $name"
  setsid "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$name.pid"
  echo "$name" >> "$PIDS/order"
}

wait_for() { # NAME TIMEOUT CMD...
  local name=$1 timeout=$2; shift 2
  local start=$SECONDS
  until "$@" > /dev/null 2>&1; do
    if ! kill -0 "$(cat "$PIDS/$name.pid")" 2>/dev/null; then
      log "$name exited early; last log lines:"; tail -n 30 "$LOGS/$name.log" >&2; return 1
    fi
    if (( SECONDS - start > timeout )); then
      log "$name not ready after ${timeout}s; last log lines:"; tail -n 30 "$LOGS/$name.log" >&2; return 1
    fi
    sleep 0.2
  done
  log "$name ready after $((SECONDS - start))s"
}

api_get() { curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://127.0.0.1:${API_PORT}$1"; }

# Metacontroller out of cluster: its CRDs first (a CompositeController needs them), then the
# binary ($E2E_CONTROLLER_BIN: a real Metacontroller or the project's simulator, the same flags),
# which picks up CompositeControllers and their resources through discovery every 2s.
start_metacontroller() {
  local bin=${E2E_CONTROLLER_BIN:?set E2E_CONTROLLER_BIN to the controller binary (hack/lib.sh controller_defaults)}
  local crds=${METACONTROLLER_CRDS:?set METACONTROLLER_CRDS to the release file manifests/production/metacontroller-crds-v1.yaml of Metacontroller}
  local kubectl=(env KUBECACHEDIR="$RUN/kubecache" "$BIN/kubectl" --kubeconfig="$KUBECONFIG_OUT")
  "${kubectl[@]}" apply -f "$crds" >/dev/null
  "${kubectl[@]}" wait --for=condition=Established --timeout=60s \
    crd/compositecontrollers.metacontroller.k8s.io crd/decoratorcontrollers.metacontroller.k8s.io \
    crd/controllerrevisions.metacontroller.k8s.io >/dev/null
  log "metacontroller: $bin (${E2E_CONTROLLER:-its part})"
  start_proc metacontroller "$bin" \
    --kubeconfig="$KUBECONFIG_OUT" \
    --discovery-interval=2s --zap-log-level="${MC_LOG_LEVEL:-4}" \
    --metrics-address="127.0.0.1:${MC_METRICS_PORT:-9999}" \
    --health-probe-bind-address="127.0.0.1:${MC_HEALTH_PORT:-8081}" \
    ${MC_FLAGS:---workers=5 --client-go-qps=100 --client-go-burst=200}
  wait_for metacontroller 60 curl -sf "http://127.0.0.1:${MC_HEALTH_PORT:-8081}/readyz"
  if [[ -n ${MC_RESTART:-} ]]; then
    start_proc metacontroller-restarter bash "${BASH_SOURCE[0]}" restart-metacontroller "$RUN"
  fi
}

# cmd_restart_metacontroller runs (as the process metacontroller-restarter) for as long as the
# control plane does: when the process metacontroller exits (Metacontroller v4.17.2 panics, rarely,
# on a parent deleted while it syncs it: a nil parent in syncParentObject), it starts the same
# command line (whichever binary) again a second later, its log appended, as the Deployment of a
# real install restarts it; each restart is logged, and make e2e prints them. Stopped before
# everything else (cmd_stop), so that it restarts nothing on the way down.
cmd_restart_metacontroller() {
  local pid cmd=()
  # The command line of the Metacontroller it watches, exactly as started.
  mapfile -d '' cmd < "/proc/$(cat "$PIDS/metacontroller.pid")/cmdline"
  trap 'exit 0' TERM
  while sleep 1; do
    pid=$(cat "$PIDS/metacontroller.pid")
    # Alive, and not a zombie: a process started with setsid by a script that has exited is the
    # child of PID 1, which in a container may never reap it.
    [[ $(ps -o stat= -p "$pid" 2>/dev/null) == [^Z]* ]] && continue
    log "RESTART: metacontroller (pid $pid) exited; starting it again; its log: $LOGS/metacontroller.log"
    setsid "${cmd[@]}" >> "$LOGS/metacontroller.log" 2>&1 < /dev/null &
    echo $! > "$PIDS/metacontroller.pid"
  done
}

cmd_start() {
  if [[ -f $PIDS/order ]]; then log "already started? run stop first"; exit 1; fi
  if [[ ${KEEP:-0} != 1 ]]; then rm -rf "$RUN/etcd" "$LOGS" "$PIDS"; fi
  mkdir -p "$LOGS" "$PIDS" "$RUN/etcd"
  gen_pki
  write_kubeconfig

  local etcd_extra=()
  # --unsafe-no-fsync exists in etcd >= 3.5 only (Debian bookworm ships 3.4.23)
  if "$ETCD" --help 2>&1 | grep -q -- '--unsafe-no-fsync'; then etcd_extra+=(--unsafe-no-fsync); fi
  # etcd reads ETCD_* variables as flags: do not hand it ours.
  start_proc etcd env -u ETCD_PORT "$ETCD" \
    --name=local --data-dir="$RUN/etcd" \
    --listen-client-urls="http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls="http://127.0.0.1:${ETCD_PORT}" \
    --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster="local=http://127.0.0.1:${ETCD_PEER_PORT}" \
    --log-level=warn "${etcd_extra[@]}"
  wait_for etcd 30 curl -sf "http://127.0.0.1:${ETCD_PORT}/health"

  local admission=()
  # Without kube-controller-manager nobody creates the 'default' ServiceAccount,
  # so Pods would be rejected by the ServiceAccount admission plugin (envtest does the same).
  [[ " $EXTRA " == *" kcm "* ]] || admission=(--disable-admission-plugins=ServiceAccount)
  start_proc kube-apiserver "$BIN/kube-apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="${API_PORT}" \
    --etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-cluster-ip-range=${SERVICE_CIDR:-10.96.0.0/16} \
    --authorization-mode=RBAC \
    --allow-privileged=true \
    --endpoint-reconciler-type=none \
    --profiling=false \
    "${admission[@]}" ${APISERVER_EXTRA_FLAGS:-}
  wait_for kube-apiserver "$READY_TIMEOUT" api_get /readyz

  if [[ " $EXTRA " == *" kcm "* ]]; then
    start_proc kube-controller-manager "$BIN/kube-controller-manager" \
      --kubeconfig="$KUBECONFIG_OUT" \
      --bind-address=127.0.0.1 --secure-port=${KCM_PORT:-10257} \
      --flex-volume-plugin-dir="$RUN/flexvolume" \
      --leader-elect=false \
      --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
      --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
      --service-cluster-ip-range=${SERVICE_CIDR:-10.96.0.0/16} \
      --use-service-account-credentials=false ${KCM_FLAGS:-}
    wait_for kube-controller-manager 60 curl -skf "https://127.0.0.1:${KCM_PORT:-10257}/healthz"
  fi
  if [[ " $EXTRA " == *" scheduler "* ]]; then
    start_proc kube-scheduler "$BIN/kube-scheduler" \
      --kubeconfig="$KUBECONFIG_OUT" \
      --bind-address=127.0.0.1 --secure-port=${SCHED_PORT:-10259} \
      --leader-elect=false
    wait_for kube-scheduler 60 curl -skf "https://127.0.0.1:${SCHED_PORT:-10259}/healthz"
  fi
  if [[ " $EXTRA " == *" kwok "* ]]; then
    # kwok fakes kubelets for Nodes annotated kwok.x-k8s.io/node=fake (and their Pods)
    start_proc kwok "$BIN/kwok" \
      --kubeconfig="$KUBECONFIG_OUT" \
      --config="${KWOK_STAGES:-$BIN/kwok-stages.yaml}" \
      --manage-all-nodes=false \
      --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
      --node-ip=10.0.0.1 --cidr=${POD_CIDR:-10.244.0.0/16} \
      --server-address=127.0.0.1:${KWOK_PORT:-10247}
    wait_for kwok 60 curl -sf "http://127.0.0.1:${KWOK_PORT:-10247}/healthz"
  fi
  if [[ " $EXTRA " == *" metacontroller "* ]]; then
    start_metacontroller
  fi
  log "control plane up; export KUBECONFIG=$KUBECONFIG_OUT"
}

stop_pids() { # PID... : SIGTERM, wait up to 15s, then SIGKILL
  local pid alive
  kill -TERM "$@" 2>/dev/null || true
  for _ in $(seq 1 150); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    (( alive )) || return 0
    sleep 0.1
  done
  log "SIGKILL $*"; kill -KILL "$@" 2>/dev/null || true
}

# ours NAME: the recorded PID of NAME, if that process is still the one we started (a PID file
# left by a run killed hard may name a process that has since reused the PID).
ours() {
  local pid
  [[ -f $PIDS/$1.pid ]] || return 1
  pid=$(cat "$PIDS/$1.pid")
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$RUN" || return 1
  echo "$pid"
}

cmd_stop() {
  [[ -f $PIDS/order ]] || { log "nothing to stop"; return 0; }
  local name pid pids=()
  if pid=$(ours metacontroller-restarter); then stop_pids "$pid"; fi
  # everything except etcd first (in parallel), then etcd
  for name in $(tac "$PIDS/order"); do
    [[ $name == etcd ]] && continue
    if pid=$(ours "$name"); then pids+=("$pid"); fi
  done
  if (( ${#pids[@]} )); then log "stopping ${pids[*]}"; stop_pids "${pids[@]}"; fi
  if pid=$(ours etcd); then log "stopping etcd"; stop_pids "$pid"; fi
  rm -f "$PIDS"/*.pid "$PIDS/order"
  log "stopped"
}

cmd_status() {
  [[ -f $PIDS/order ]] || { echo "not running"; return 0; }
  local name
  for name in $(cat "$PIDS/order"); do
    if kill -0 "$(cat "$PIDS/$name.pid")" 2>/dev/null; then echo "$name running pid $(cat "$PIDS/$name.pid")"; else echo "$name DEAD"; fi
  done
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart-metacontroller) cmd_restart_metacontroller ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
