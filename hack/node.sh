#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, for make e2e-node: the control plane of
# hack/cluster.sh (+ Metacontroller's part: the project's simulator, or a real Metacontroller given
# as METACONTROLLER_BIN) and a real node: containerd + runc (Debian), the CNI bridge, kubelet,
# kube-proxy (iptables) and kube-network-policies enforcing NetworkPolicy on real packets.
#   node.sh up      start everything, wait until the Node is Ready, import the test images
#   node.sh down    stop everything it started (by PID), remove mounts, network namespaces, the
#                   bridge, the veth, iptables/nft state, cgroups and $NODE_ROOT/var
#   node.sh status
#   node.sh leftovers   print (and exit 1 on) anything of ours still on the machine
# Everything lives under $NODE_ROOT. Traffic stays on this machine: loopback, the node IP on our
# veth, and the Pod and Service ranges on our bridge.
#
# Environment (defaults are chosen not to collide with hack/e2e.sh's loopback ports, so that
# make e2e and make e2e-node can run at the same time):
#   NODE_ROOT           state (default .cache/e2e-node)
#   K8S_BINS_DIR        etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
#   K8S_NODE_BINS_DIR   kubelet kube-proxy;  KNP_BIN  kube-network-policies
#   E2E_CONTROLLER E2E_CONTROLLER_BIN METACONTROLLER_CRDS   the controller and Metacontroller's CRDs
#                       (hack/lib.sh's controller_defaults, as hack/e2e-node.sh exports them); when
#                       unset, 'up' chooses them the same way from METACONTROLLER_BIN and
#                       METACONTROLLER_CRDS and builds the simulator
#   IMAGES_DIR          *.tar docker archives imported into containerd (hack/build-images.sh)
#   NODE_IP NODE_IF NODE_BRIDGE POD_CIDR NODE_POD_CIDR SERVICE_CIDR and the *_PORT variables below
#   KUBELET_MAX_PODS    the kubelet's maxPods (default 110, the kubelet's own default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/.." && pwd)
# controller_defaults, build_controller (its log is replaced by this script's, below)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}
K8S=${K8S:-1.36.3}
NODE_ROOT=${NODE_ROOT:-$ROOT/.cache/e2e-node}
K8S_BINS_DIR=${K8S_BINS_DIR:-$CACHE/k8s-bins/v$K8S}
K8S_NODE_BINS_DIR=${K8S_NODE_BINS_DIR:-$CACHE/k8s-node-bins/v$K8S}
KNP_BIN=${KNP_BIN:-$(bash "$here/build-node-bins.sh" --knp-bin)}
IMAGES_DIR=${IMAGES_DIR:-$NODE_ROOT/images}
NODE_NAME=${NODE_NAME:-e2e-node}
NODE_IF=${NODE_IF:-chnode0}              # veth (peer ${NODE_IF}p) carrying the node IP
NODE_IP=${NODE_IP:-172.30.255.1}         # kubelet refuses loopback node IPs
NODE_BRIDGE=${NODE_BRIDGE:-chbr0}
POD_CIDR=${POD_CIDR:-10.244.0.0/16}
NODE_POD_CIDR=${NODE_POD_CIDR:-10.244.0.0/24}
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
ETCD_PORT=${ETCD_PORT:-25790} API_PORT=${API_PORT:-25443} KCM_PORT=${KCM_PORT:-25257} SCHED_PORT=${SCHED_PORT:-25259}
MC_METRICS_PORT=${MC_METRICS_PORT:-25999} MC_HEALTH_PORT=${MC_HEALTH_PORT:-25081}
KUBELET_PORT=${KUBELET_PORT:-25250} KUBELET_HEALTHZ_PORT=${KUBELET_HEALTHZ_PORT:-25248}
PROXY_HEALTHZ_PORT=${PROXY_HEALTHZ_PORT:-25256} PROXY_METRICS_PORT=${PROXY_METRICS_PORT:-25249}
KNP_METRICS_PORT=${KNP_METRICS_PORT:-25980} KNP_QUEUE=${KNP_QUEUE:-98}
CONTAINERD=${CONTAINERD:-/usr/bin/containerd} RUNC=${RUNC:-/usr/sbin/runc} CNI_SRC=${CNI_SRC:-/usr/lib/cni}
RUN=$NODE_ROOT/cluster PIDS=$NODE_ROOT/pids LOGS=$NODE_ROOT/logs ETC=$NODE_ROOT/etc VAR=$NODE_ROOT/var
KUBELET_DIR=$VAR/lib/kubelet
CTRD_SOCK=$NODE_ROOT/run/containerd/containerd.sock
export RUN ETCD_PORT API_PORT KCM_PORT SCHED_PORT SERVICE_CIDR POD_CIDR MC_METRICS_PORT MC_HEALTH_PORT
export BIN=$K8S_BINS_DIR EXTRA=${EXTRA-"kcm scheduler metacontroller"} MC_LOG_LEVEL=${MC_LOG_LEVEL:-4}
# kubectl exec/logs: the API server reaches the kubelet at the node's InternalIP with a client
# certificate the kubelet's CA (ours) signed.
export APISERVER_EXTRA_FLAGS="--kubelet-preferred-address-types=InternalIP --kubelet-client-certificate=$RUN/pki/admin.crt --kubelet-client-key=$RUN/pki/admin.key ${APISERVER_EXTRA_FLAGS:-}"
export KUBECACHEDIR=$RUN/kubecache
KUBECTL=("$K8S_BINS_DIR/kubectl" --kubeconfig="$RUN/kubeconfig")
CTR=(ctr --address "$CTRD_SOCK" -n k8s.io)
log() { echo "[node $(date +%T.%3N)] $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

start_proc() { # NAME CMD...
  local name=$1; shift
  setsid "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$name.pid"; echo "$name" >> "$PIDS/order"
}
wait_for() { # NAME TIMEOUT CMD...
  local name=$1 timeout=$2 t0; t0=$(now); shift 2
  until "$@" > /dev/null 2>&1; do
    if [[ -f $PIDS/$name.pid ]] && ! kill -0 "$(cat "$PIDS/$name.pid")" 2>/dev/null; then
      log "$name exited early:"; tail -n 30 "$LOGS/$name.log" >&2; return 1; fi
    if awk -v a="$t0" -v b="$(now)" -v t="$timeout" 'BEGIN {exit !(b - a > t)}'; then
      log "$name not ready after ${timeout}s:"; tail -n 30 "$LOGS/$name.log" >&2; return 1; fi
    sleep 0.2
  done
  log "$name ready after $(since "$t0")s"
}

write_configs() {
  mkdir -p "$ETC/cni/net.d" "$NODE_ROOT/cni/bin" "$VAR/lib/cni/networks" "$KUBELET_DIR" "$VAR/log/pods" "$NODE_ROOT/fake-sysctl"
  local p
  for p in bridge host-local loopback portmap; do cp "$CNI_SRC/$p" "$NODE_ROOT/cni/bin/"; done
  cat > "$ETC/cni/net.d/10-e2e-node.conflist" <<EOC
{ "cniVersion": "1.0.0", "name": "e2e-node",
  "plugins": [
    { "type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "ranges": [[{"subnet": "$NODE_POD_CIDR"}]],
                "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$VAR/lib/cni/networks" } },
    { "type": "portmap", "capabilities": {"portMappings": true} } ] }
EOC
  # Debian's containerd 1.6 (config version 2).
  cat > "$ETC/containerd.toml" <<EOC
version = 2
root = "$VAR/lib/containerd"
state = "$NODE_ROOT/run/containerd"
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/local/pause:v1"
  disable_apparmor = true
  # No CAP_SYS_RESOURCE in this kind of VM's bounding set: oom_score_adj < 0 fails (pause wants -998).
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$RUNC"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$NODE_ROOT/cni/bin"
    conf_dir = "$ETC/cni/net.d"
EOC
  cat > "$ETC/kubelet.yaml" <<EOC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false            # cgroup v1 controllers only here; kubelet >= 1.35 refuses them by default
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CTRD_SOCK
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $RUN/pki/ca.crt}
authorization: {mode: AlwaysAllow}
podLogsDir: $VAR/log/pods
volumePluginDir: $VAR/lib/kubelet-plugins
clusterDomain: cluster.local
failSwapOn: false
protectKernelDefaults: false
oomScoreAdj: 0                 # the default -999 needs CAP_SYS_RESOURCE
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 10s
serializeImagePulls: false
maxPods: ${KUBELET_MAX_PODS:-110}
EOC
  cat > "$ETC/kube-proxy.yaml" <<EOC
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
clientConnection: {kubeconfig: $RUN/kubeconfig}
nodePortAddresses: ["$NODE_IP/32"]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
oomScoreAdj: 0
EOC
}

# The kubelet sets six kernel sysctls (panic_on_oops=1, overcommit_memory=1, ...): fine on a throwaway
# CI VM, not on a shared machine. It runs in a private mount namespace where those /proc/sys files are
# bind-mounted fakes (KUBELET_FAKE_SYSCTLS=0: the real ones). Its root dir is an rshared bind mount,
# so the tmpfs mounts it makes for Secrets reach the host's namespace, where runc runs.
kubelet_cmd() { # writes $NODE_ROOT/run/kubelet.sh, prints the command that runs it
  local fake=$NODE_ROOT/fake-sysctl kv f w=$NODE_ROOT/run/kubelet.sh
  local exe="$K8S_NODE_BINS_DIR/kubelet --config=$ETC/kubelet.yaml --kubeconfig=$RUN/kubeconfig --root-dir=$KUBELET_DIR --cert-dir=$VAR/lib/kubelet-pki --hostname-override=$NODE_NAME --node-ip=$NODE_IP --v=${KUBELET_V:-1}"
  {
    echo '#!/bin/sh'
    echo 'set -e'
    echo 'mount --make-rprivate /proc'
    for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
              kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
      f=${kv%%=*}; mkdir -p "$fake/$(dirname "$f")"; echo "${kv#*=}" > "$fake/$f"
      echo "mount --bind $fake/$f /proc/sys/$f"
    done
    echo "exec $exe"
  } > "$w"
  chmod +x "$w"
  if ! grep -q " $KUBELET_DIR .*shared:" /proc/self/mountinfo; then
    mount --bind "$KUBELET_DIR" "$KUBELET_DIR"; mount --make-rshared "$KUBELET_DIR"
  fi
  if [[ ${KUBELET_FAKE_SYSCTLS:-1} == 1 ]]; then echo unshare -m --propagation unchanged "$w"; else echo "$exe"; fi
}

# kube-network-policies queues a connection's first packet (nft 'queue' in a postrouting chain) and
# accepts or drops it by the NetworkPolicies. Kernels without CONFIG_NFT_QUEUE (this kind of VM)
# refuse its nft table; the xtables NFQUEUE target exists, so an iptables mangle chain sends the same
# packets to its queue (new connections from or to Pods, not root's sockets); its verdict code is
# unchanged. On a kernel with nft queue support (NETPOL_IPTABLES=0) it runs unmodified. UDP DNS is
# queued here too, after DNAT like every packet in postrouting: kube-network-policies moves it to a
# prerouting chain (after DNAT as well) only to dodge a conntrack race of kernels before 6.12.
netpol_iptables() {
  local ch=KUBE-NETPOL-QUEUE
  iptables -t mangle -N $ch 2>/dev/null || iptables -t mangle -F $ch
  iptables -t mangle -C POSTROUTING -j $ch 2>/dev/null || iptables -t mangle -A POSTROUTING -j $ch
  iptables -t mangle -A $ch -m owner --uid-owner 0 -j RETURN          # kubelet probes, host daemons
  iptables -t mangle -A $ch -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
  iptables -t mangle -A $ch -s "$POD_CIDR" -j NFQUEUE --queue-num "$KNP_QUEUE"
  iptables -t mangle -A $ch -d "$POD_CIDR" -j NFQUEUE --queue-num "$KNP_QUEUE"
}
nft_queue_supported() {
  local t=e2e_node_probe ok=1
  nft add table inet $t 2>/dev/null || return 1
  nft add chain inet $t c '{ type filter hook postrouting priority 95; }' 2>/dev/null &&
    nft add rule inet $t c ip daddr 192.0.2.1 queue num "$KNP_QUEUE" bypass 2>/dev/null && ok=0
  nft delete table inet $t 2>/dev/null
  return $ok
}

cmd_up() {
  local T0 t img; T0=$(now)
  mkdir -p "$PIDS" "$LOGS" "$NODE_ROOT/run"
  [[ -f $PIDS/order ]] && { log "already up? run down first"; exit 1; }
  for b in "$K8S_BINS_DIR/kube-apiserver" "$K8S_NODE_BINS_DIR/kubelet" "$K8S_NODE_BINS_DIR/kube-proxy" "$KNP_BIN" "$CONTAINERD" "$RUNC"; do
    [[ -x $b ]] || { log "missing $b (hack/build-k8s-bins.sh, hack/build-node-bins.sh, apt packages)"; exit 1; }
  done
  # Metacontroller's part, when hack/e2e-node.sh has not chosen it (node.sh up on its own).
  if [[ " $EXTRA " == *" metacontroller "* && -z ${E2E_CONTROLLER_BIN:-} ]]; then
    controller_defaults; build_controller
  fi
  # What was there before, so that 'down' removes only what we added.
  nft list tables 2>/dev/null | sort > "$NODE_ROOT/nft-tables.before"
  [[ -f $NODE_ROOT/run/ip_forward.orig ]] || cat /proc/sys/net/ipv4/ip_forward > "$NODE_ROOT/run/ip_forward.orig"
  # Pods on one bridge talk at layer 2: only with br_netfilter do those frames meet iptables
  # (kube-proxy's DNAT, the policy agent's queue). Without it, Pod-to-Pod policy is not enforced.
  local brnf=/proc/sys/net/bridge/bridge-nf-call-iptables
  [[ -f $brnf ]] || modprobe br_netfilter 2>/dev/null || true
  [[ -f $brnf ]] || { log "no $brnf (br_netfilter): NetworkPolicy between Pods on the bridge could not be enforced"; exit 1; }
  [[ -f $NODE_ROOT/run/bridge-nf-call-iptables.orig ]] || cat "$brnf" > "$NODE_ROOT/run/bridge-nf-call-iptables.orig"
  echo 1 > "$brnf"
  write_configs
  ip link show "$NODE_IF" > /dev/null 2>&1 || {
    # no 'dummy' driver in this kind of VM: a veth pair whose peer stays unused
    ip link add "$NODE_IF" type veth peer name "${NODE_IF}p"; ip addr add "$NODE_IP/32" dev "$NODE_IF"
    ip link set "${NODE_IF}p" up; ip link set "$NODE_IF" up; }
  # The CNI bridge plugin creates the bridge on the first Pod; a bridge whose MAC the kernel picks
  # takes its lowest port's, which changes as Pods (veths) come and go, and Pods' ARP entries for
  # the gateway can go stale. Created here with a fixed MAC.
  ip link show "$NODE_BRIDGE" > /dev/null 2>&1 || {
    ip link add "$NODE_BRIDGE" type bridge; ip link set "$NODE_BRIDGE" address 02:00:0a:f4:00:01; ip link set "$NODE_BRIDGE" up; }
  t=$(now)
  start_proc containerd "$CONTAINERD" --config "$ETC/containerd.toml"
  wait_for containerd 30 "${CTR[@]}" version
  for img in "$IMAGES_DIR"/*.tar; do "${CTR[@]}" images import "$img" > /dev/null; done
  log "containerd up, images imported in $(since "$t")s"
  t=$(now); bash "$here/cluster.sh" start; log "control plane up in $(since "$t")s"
  t=$(now)
  # shellcheck disable=SC2046
  start_proc kubelet $(kubelet_cmd)
  wait_for kubelet 60 curl -sf "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"
  wait_for kubelet 90 sh -c "'${KUBECTL[0]}' ${KUBECTL[1]} get node $NODE_NAME -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  log "node Ready $(since "$t")s after kubelet start"
  start_proc kube-proxy "$K8S_NODE_BINS_DIR/kube-proxy" --config="$ETC/kube-proxy.yaml" --v=1
  wait_for kube-proxy 60 curl -sf "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"
  local knp_nft=1
  if [[ ${NETPOL_IPTABLES:-auto} == 1 ]] || { [[ ${NETPOL_IPTABLES:-auto} == auto ]] && ! nft_queue_supported; }; then
    log "no nft queue support in this kernel: kube-network-policies' queue rules as iptables (mangle $KNP_QUEUE)"
    netpol_iptables
    knp_nft=0   # and it does not try its nft table (see hack/build-node-bins.sh: each failure drops queued packets)
  fi
  start_proc kube-network-policies env KNP_NFTABLES=$knp_nft "$KNP_BIN" --kubeconfig="$RUN/kubeconfig" --hostname-override="$NODE_NAME" \
    --nfqueue-id="$KNP_QUEUE" --metrics-bind-address="127.0.0.1:$KNP_METRICS_PORT" --v="${KNP_V:-2}"
  wait_for kube-network-policies 60 curl -sf "http://127.0.0.1:$KNP_METRICS_PORT/metrics"
  log "node up in $(since "$T0")s; export KUBECONFIG=$RUN/kubeconfig"
}

stop_pid() { # PID NAME
  local pid=$1 i; kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  log "SIGKILL $2 ($pid)"; kill -KILL "$pid" 2>/dev/null || true
}

cleanup_host() { # the host state 'up' and the Pods created (best effort)
  set +e +o pipefail
  local m ns tbl ch r d ipt
  for m in $(awk -v r="$NODE_ROOT/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo | sort -r); do umount "$m" || umount -l "$m"; done
  for ns in $(ip netns list | awk '/^cni-/{print $1}'); do ip netns delete "$ns"; done
  [[ -x $K8S_NODE_BINS_DIR/kube-proxy ]] && "$K8S_NODE_BINS_DIR/kube-proxy" --cleanup > /dev/null 2>&1
  nft delete table inet kube-network-policies 2>/dev/null
  for ipt in iptables ip6tables; do for tbl in filter nat mangle raw; do
    $ipt -t $tbl -S 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*(KUBE-|CNI-)' | sed 's/^-A/-D/' | \
      while read -r r; do eval "$ipt -t $tbl $r"; done
    for ch in $($ipt -t $tbl -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/{print $2}'); do $ipt -t $tbl -F "$ch"; done
    for ch in $($ipt -t $tbl -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/{print $2}'); do $ipt -t $tbl -X "$ch"; done
  done; done
  # iptables-nft creates its tables on first use: drop those that were not there before 'up' and
  # hold no rule any more (kube-proxy's own nft tables too).
  if [[ -f $NODE_ROOT/nft-tables.before ]]; then
    nft list tables 2>/dev/null | sort | comm -13 "$NODE_ROOT/nft-tables.before" - | while read -r _ fam name; do
      if ! nft list table "$fam" "$name" 2>/dev/null | grep -qvE '^\s*(table|chain|type|policy|\}|$)'; then nft delete table "$fam" "$name"; fi
    done
  fi
  ip link del "$NODE_BRIDGE" 2>/dev/null
  ip link del "$NODE_IF" 2>/dev/null
  [[ -f $NODE_ROOT/run/ip_forward.orig ]] && cat "$NODE_ROOT/run/ip_forward.orig" > /proc/sys/net/ipv4/ip_forward && rm -f "$NODE_ROOT/run/ip_forward.orig"
  [[ -f $NODE_ROOT/run/bridge-nf-call-iptables.orig ]] && cat "$NODE_ROOT/run/bridge-nf-call-iptables.orig" > /proc/sys/net/bridge/bridge-nf-call-iptables && rm -f "$NODE_ROOT/run/bridge-nf-call-iptables.orig"
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/kubepods /sys/fs/cgroup/k8s.io; do
    [[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  # containerd's content and snapshots, Pod logs, kubelet state: nothing is reused by the next run
  if ! awk -v r="$NODE_ROOT/" 'index($5, r) == 1 {f=1} END {exit !f}' /proc/self/mountinfo; then rm -rf "$VAR" "$NODE_ROOT/run"; fi
  set -e -o pipefail
}

cmd_down() {
  local name t c; t=$(now)
  if [[ -f $PIDS/order ]]; then
    # Metacontroller (or the simulator) first, so that it recreates none of the Pods deleted below
    local mc; mc=$(cat "$RUN/pids/metacontroller.pid" 2>/dev/null || true)
    if [[ -n $mc ]] && tr '\0' ' ' < "/proc/$mc/cmdline" 2>/dev/null | grep -q -- "$RUN"; then stop_pid "$mc" metacontroller; fi
    # Pods first (so that runc and CNI tear down cleanly), while the kubelet and containerd run
    if [[ -f $PIDS/kubelet.pid ]] && kill -0 "$(cat "$PIDS/kubelet.pid")" 2>/dev/null; then
      "${KUBECTL[@]}" delete pods --all -A --grace-period=1 --wait=true --timeout=60s > /dev/null 2>&1 || true
    fi
    for name in kube-network-policies kube-proxy kubelet; do
      [[ -f $PIDS/$name.pid ]] && { stop_pid "$(cat "$PIDS/$name.pid")" "$name"; rm -f "$PIDS/$name.pid"; }
    done
    bash "$here/cluster.sh" stop || true
    if [[ -f $PIDS/containerd.pid ]]; then
      # anything left (a Pod whose deletion timed out): kill its tasks, remove its containers
      for c in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s KILL "$c" > /dev/null 2>&1 || true; done
      sleep 0.5
      for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" tasks rm -f "$c" > /dev/null 2>&1 || true; "${CTR[@]}" containers rm "$c" > /dev/null 2>&1 || true; done
      stop_pid "$(cat "$PIDS/containerd.pid")" containerd; rm -f "$PIDS/containerd.pid"
    fi
    # containerd-shim processes outlive containerd by design: theirs are gone with their tasks,
    # any other one of ours is stopped here
    for c in $(pgrep -f "containerd-shim.*$NODE_ROOT/" || true); do stop_pid "$c" containerd-shim; done
    rm -f "$PIDS/order"
  fi
  cleanup_host
  log "down in $(since "$t")s"
}

cmd_leftovers() { # anything of ours still on the machine; exit 1 if so
  local bad=0 out
  out=$(pgrep -af "$NODE_ROOT/|$K8S_NODE_BINS_DIR/|$KNP_BIN" | grep -v pgrep || true)
  [[ -n $out ]] && { echo "processes:"; echo "$out"; bad=1; }
  out=$(awk -v r="$NODE_ROOT/" 'index($5, r) == 1 {print $5}' /proc/self/mountinfo)
  [[ -n $out ]] && { echo "mounts:"; echo "$out"; bad=1; }
  out=$(ip -o link show | awk -F': ' '{print $2}' | grep -E "^($NODE_IF|${NODE_IF}p|$NODE_BRIDGE|veth)" || true)
  [[ -n $out ]] && { echo "links:"; echo "$out"; bad=1; }
  out=$(ip netns list | grep '^cni-' || true)
  [[ -n $out ]] && { echo "netns:"; echo "$out"; bad=1; }
  out=$( { iptables-save 2>/dev/null; ip6tables-save 2>/dev/null; } | grep -cE 'KUBE-|CNI-' || true)
  [[ $out != 0 ]] && { echo "iptables: $out KUBE-/CNI- lines"; bad=1; }
  if [[ -f $NODE_ROOT/nft-tables.before ]]; then
    out=$(nft list tables 2>/dev/null | sort | comm -13 "$NODE_ROOT/nft-tables.before" -)
  else
    out=$(nft list tables 2>/dev/null | grep -E 'kube|filter|nat|mangle' || true)
  fi
  [[ -n $out ]] && { echo "nft tables:"; echo "$out"; bad=1; }
  out=$(ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/k8s.io 2>/dev/null || true)
  [[ -n $out ]] && { echo "cgroups:"; echo "$out"; bad=1; }
  (( bad == 0 )) && log "no leftovers: processes, mounts, links, netns, iptables, nft, cgroups clean"
  return $bad
}

cmd_status() {
  [[ -f $PIDS/order ]] || { echo "not running"; return 0; }
  local name; for name in $(cat "$PIDS/order"); do
    [[ -f $PIDS/$name.pid ]] || continue
    if kill -0 "$(cat "$PIDS/$name.pid")" 2>/dev/null; then echo "$name running pid $(cat "$PIDS/$name.pid")"; else echo "$name DEAD"; fi
  done
  bash "$here/cluster.sh" status
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  leftovers) cmd_leftovers ;;
  config) write_configs ;;
  *) echo "usage: $0 up|down|status|leftovers" >&2; exit 2 ;;
esac
