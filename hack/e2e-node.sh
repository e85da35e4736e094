#!/usr/bin/env bash
# make e2e-node: the hook with a REAL node: containers run, packets flow, NetworkPolicy is enforced
# (kube-network-policies). Under the project's simulator in Metacontroller's part (a test double,
# hack/metacontroller-sim), or under a real Metacontroller when METACONTROLLER_BIN names one (v4.17+;
# the same flags either way). As root, on Linux.
#   1. installs the Debian packages it needs when one is missing (apt-get update first);
#   2. builds once per version, cached under ~/.cache: the control plane (hack/build-k8s-bins.sh),
#      kubelet + kube-proxy + kube-network-policies (hack/build-node-bins.sh); then the simulator
#      (unless METACONTROLLER_BIN is set), the hook and the tests, and the test images
#      (hack/build-images.sh), the hook binary among them as the policy gate's image;
#   3. starts the node (hack/node.sh up: containerd, control plane + controller, kubelet,
#      kube-proxy, kube-network-policies) on loopback ports of its own (make e2e can run beside it);
#   4. runs the Go tests of e2e/node (build tag e2enode), which serve the hook and register it;
#   5. always tears everything down (EXIT trap) and fails if anything is left behind.
# Each phase's time is printed. Environment: E2E_NODE_RUN_ARGS (test binary flags, e.g.
# -test.run=TestIsolation), E2E_NODE_HOOK_BIN (a hook binary to test instead of building one),
# METACONTROLLER_BIN and METACONTROLLER_CRDS (as make e2e: hack/e2e.sh), NODE_ROOT (state, default
# .cache/e2e-node), E2E_NODE_TAGS (build tags, default e2enode) and E2E_NODE_TIMEOUT (default 20m):
# hack/bench-node.sh runs its benchmark through this script with them. The tests get
# E2E_CONTROLLER (metacontroller or metacontroller-sim) and E2E_CONTROLLER_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
run_defaults e2e-node
# containerd + runc from Debian; iptables/nftables/conntrack/ipset for kube-proxy and the policy
# agent; the CNI reference plugins (bridge, host-local, loopback, portmap); openssl for the PKI.
PACKAGES="containerd runc iptables ipset conntrack nftables containernetworking-plugins openssl curl util-linux"
# What it needs and costs, before anything starts (and before the root check, so that anyone
# who tries it reads it).
log "make e2e-node: needs root on Linux, and changes this machine while it runs (a bridge, a veth,
  iptables and nft rules, mounts, cgroups; all removed at the end). It installs with apt-get what
  is missing of: $PACKAGES.
  The first time it builds the control plane, kubelet, kube-proxy and kube-network-policies from
  source into $CACHE: about 23 minutes on 2 cores (more on a busy machine; less after make e2e,
  which builds the control plane); once they are cached a run takes about 3½ minutes."
export K8S_NODE_BINS_DIR=${K8S_NODE_BINS_DIR:-$CACHE/k8s-node-bins/v$K8S}
export KNP_VER=${KNP_VER:-v0.7.0}
KNP_BIN=$(bash hack/build-node-bins.sh --knp-bin); export KNP_BIN
export NODE_ROOT=${NODE_ROOT:-$ROOT/.cache/e2e-node}
export IMAGES_DIR=$NODE_ROOT/images
export NODE_IP=${NODE_IP:-172.30.255.1} POD_CIDR=${POD_CIDR:-10.244.0.0/16} SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
export KUBELET_PORT=${KUBELET_PORT:-25250}
HOOK_ADDR=${E2E_NODE_HOOK_ADDR:-127.0.0.1:25080}
start=$SECONDS
phase_start=$SECONDS
phase() { log "PHASE $1: $((SECONDS - phase_start))s"; phase_start=$SECONDS; }

[[ $(id -u) == 0 ]] || { log "needs root (network namespaces, iptables, mounts)"; exit 1; }
[[ $(uname -s) == Linux ]] || { log "needs Linux"; exit 1; }
# One real node per machine at a time (its bridge, veth, routes and iptables chains are the
# machine's): a second run waits here. make e2e's kwok plane needs no such lock and runs beside it.
take_lock "${TMPDIR:-/tmp}/challenge-hook-e2e-node.lock" "make e2e-node"

# ---------------------------------------------------------------- 1. packages
missing=()
for p in $PACKAGES; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
if (( ${#missing[@]} )); then
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
phase packages

# ---------------------------------------------------------------- 2. builds (cached per version)
bash hack/build-k8s-bins.sh; phase build-control-plane
bash hack/build-node-bins.sh; phase build-node-bins
build_controller; phase build-controller
HOOK_BIN=${E2E_NODE_HOOK_BIN:-$ROOT/bin/challenge-hook}
if [[ -z ${E2E_NODE_HOOK_BIN:-} ]]; then CGO_ENABLED=0 $GO build -o bin/challenge-hook ./cmd/challenge-hook; fi
$GO test -tags "${E2E_NODE_TAGS:-e2enode}" -c -o "$NODE_ROOT/e2enode.test" ./e2e/node
phase build-hook-and-tests
# The hook binary is also the instances' policy gate image (local/challenge-hook:v1).
HOOK_BIN=$HOOK_BIN bash hack/build-images.sh; phase build-images

# ---------------------------------------------------------------- 3. node
status=1
down() {
  local t=$SECONDS
  bash hack/node.sh down || true
  log "PHASE teardown: $((SECONDS - t))s"
  if ! bash hack/node.sh leftovers; then log "LEFTOVERS after teardown (see above)"; [[ $status == 0 ]] && status=1; fi
  if [[ $status != 0 || ${E2E_KEEP_LOGS:-0} == 1 ]]; then
    tail_logs 20 "$NODE_ROOT"/logs/*.log "$NODE_ROOT"/cluster/logs/*.log
  fi
  log "done in $((SECONDS - start))s, exit status $status"
  exit $status
}
# A previous run killed hard may have left its node: stop it first (by its own PIDs).
bash hack/node.sh down > /dev/null 2>&1 || true
trap down EXIT
phase_start=$SECONDS
bash hack/node.sh up 9>&-   # the lock stays with this script, not with the node's processes
phase node-up

# ---------------------------------------------------------------- 4. tests
# In the background (await_tests): an interrupted run stops the tests before the EXIT trap stops
# the node.
(cd e2e/node && exec env KUBECONFIG="$NODE_ROOT/cluster/kubeconfig" E2E_REPO_ROOT="$ROOT" \
  E2E_CONTROLLER="$E2E_CONTROLLER" E2E_CONTROLLER_BIN="$E2E_CONTROLLER_BIN" \
  E2E_NODE_HOOK_BIN="$HOOK_BIN" E2E_NODE_HOOK_ADDR="$HOOK_ADDR" E2E_NODE_RESYNC_SECONDS="${E2E_NODE_RESYNC_SECONDS:-5}" \
  E2E_NODE_IP="$NODE_IP" E2E_NODE_POD_CIDR="$POD_CIDR" E2E_NODE_SERVICE_CIDR="$SERVICE_CIDR" \
  E2E_NODE_KUBELET_PORT="$KUBELET_PORT" E2E_NODE_CTFBOX="$IMAGES_DIR/ctfbox" \
  "$NODE_ROOT/e2enode.test" -test.v -test.count=1 -test.timeout="${E2E_NODE_TIMEOUT:-20m}" ${E2E_NODE_RUN_ARGS:-}) 9>&- &
await_tests $!
phase tests
exit $status
