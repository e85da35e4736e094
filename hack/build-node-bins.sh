#!/usr/bin/env bash
# Builds the node side of a real Kubernetes node from the Go module proxy only, for make e2e-node:
#   kubelet, kube-proxy   k8s.io/kubernetes v$K8S through the SAME wrapper module as the control plane
#                         (hack/build-k8s-bins.sh keeps it in $K8S_BINS_DIR/src/k8s): the same module
#                         graph, so every package the control plane already compiled comes from the Go
#                         build cache -> $K8S_NODE_BINS_DIR
#   kube-network-policies sig-network's NetworkPolicy agent (nftables + NFQUEUE), patched (below)
#                         -> $KNP_DIR
# Cached per version: a part whose binaries exist is skipped.
#
#   K8S                Kubernetes version (default 1.36.3)
#   K8S_BINS_DIR       the control plane's cache (its src/k8s wrapper is reused when present)
#   K8S_NODE_BINS_DIR  default ${XDG_CACHE_HOME:-$HOME/.cache}/k8s-node-bins/v$K8S
#   KNP_VER            kube-network-policies version (default v0.7.0; empty skips it)
#   KNP_DIR            default ${XDG_CACHE_HOME:-$HOME/.cache}/kube-network-policies/$KNP_VER-<patch level>
#   PARTS              "k8s knp" (default both)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
K8S=${K8S:-1.36.3}
KNP_VER=${KNP_VER-v0.7.0}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}
K8S_BINS_DIR=${K8S_BINS_DIR:-$CACHE/k8s-bins/v$K8S}
OUT=${K8S_NODE_BINS_DIR:-$CACHE/k8s-node-bins/v$K8S}
PARTS=${PARTS:-k8s knp}
# KNP_PATCH names the patch level of kube-network-policies (below) in its cache directory; change it
# when the patches change.
KNP_PATCH=p2
KNP_DIR=${KNP_DIR:-$CACHE/kube-network-policies/$KNP_VER-$KNP_PATCH}
# --knp-bin: print where the kube-network-policies binary is (hack/node.sh, hack/e2e-node.sh)
[[ ${1:-} == --knp-bin ]] && { echo "$KNP_DIR/kube-network-policies"; exit 0; }
TRIMPATH=${TRIMPATH:--trimpath}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export GOFLAGS=${GOFLAGS:--buildvcs=false} GOWORK=off CGO_ENABLED=0
timed() { local start=$SECONDS; "$@"; echo "[build-node-bins] $((SECONDS - start))s: ${*:1:3}" >&2; }

# ---------------------------------------------------------------- kubelet, kube-proxy
if [[ " $PARTS " == *" k8s "* && ( ! -x $OUT/kubelet || ! -x $OUT/kube-proxy ) ]]; then
  mkdir -p "$W/k8s"
  if [[ -f $K8S_BINS_DIR/src/k8s/go.mod ]]; then
    cp "$K8S_BINS_DIR/src/k8s/go.mod" "$K8S_BINS_DIR/src/k8s/go.sum" "$W/k8s/"
  else
    write_k8s_wrapper_gomod "$K8S" > "$W/k8s/go.mod"
  fi
  write_k8s_main "$W/k8s" kubelet k8s.io/kubernetes/cmd/kubelet/app 'NewKubeletCommand(context.Background())'
  write_k8s_main "$W/k8s" kube-proxy k8s.io/kubernetes/cmd/kube-proxy/app 'NewProxyCommand()'
  mkdir -p "$OUT"
  (cd "$W/k8s" && timed go mod tidy && timed go build $TRIMPATH -ldflags "$(k8s_version_ldflags "$K8S")" -o "$W/out/" ./cmd/kubelet ./cmd/kube-proxy)
  mv "$W/out/kubelet" "$W/out/kube-proxy" "$OUT/"
fi

# ---------------------------------------------------------------- kube-network-policies
# Two patches, on a copy of the module's source:
#  1. cmd/main.go uses rest.InClusterConfig() only: a --kubeconfig flag, to run as a host process;
#  2. KNP_NFTABLES=0 in its environment skips programming its nft table. For kernels without nft
#     'queue' support (CONFIG_NFT_QUEUE), where hack/node.sh sends the same packets to its queue
#     with iptables instead: there every attempt fails, and each failed nft transaction unregisters
#     the base chain it had registered, which makes the kernel drop every packet waiting in every
#     NFQUEUE (nf_queue_nf_hook_drop): first packets of allowed connections, lost at each Pod or
#     NetworkPolicy change. The verdict code is unchanged.
if [[ " $PARTS " == *" knp "* && -n $KNP_VER && ! -x $KNP_DIR/kube-network-policies ]]; then
  mkdir -p "$KNP_DIR"
  # The checksum database has no entry for this module (404): skip it for this module only.
  export GONOSUMDB=sigs.k8s.io/kube-network-policies
  src=$(go mod download -json "sigs.k8s.io/kube-network-policies@$KNP_VER" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  cp -r "$src" "$W/knp" && chmod -R u+w "$W/knp"
  sed -i -e 's#"k8s.io/client-go/rest"#"k8s.io/client-go/tools/clientcmd"#' \
      -e 's#config, err := rest.InClusterConfig()#config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)#' \
      -e 's#^func init() {#var kubeconfig string\n\nfunc init() {\n\tflag.StringVar(\&kubeconfig, "kubeconfig", "", "kubeconfig; empty = in-cluster")#' \
      "$W/knp/cmd/main.go"
  sed -i 's#^func (c \*Controller) syncNFTablesRules(ctx context.Context) error {#&\n\tif os.Getenv("KNP_NFTABLES") == "0" {\n\t\treturn nil\n\t}#' \
      "$W/knp/pkg/networkpolicy/controller.go"
  grep -q 'BuildConfigFromFlags("", kubeconfig)' "$W/knp/cmd/main.go" && grep -q 'KNP_NFTABLES' "$W/knp/pkg/networkpolicy/controller.go" ||
    { echo "[build-node-bins] cannot patch kube-network-policies $KNP_VER" >&2; exit 1; }
  if [[ -f $K8S_BINS_DIR/src/k8s/go.mod && ${KNP_OWN_MODULES:-0} != 1 ]]; then
    # In the control plane's module graph (k8s.io/* v0.36.3 instead of its own v0.32): most of what
    # it needs is then in the Go build cache already. Measured 155 s instead of 636 s cold on 2 busy
    # cores. Its go.sum goes along for the modules the checksum database does not know (nftables).
    # KNP_OWN_MODULES=1 builds it with its own go.mod, as released.
    mkdir -p "$W/knpmod/cmd/kube-network-policies"
    cp "$K8S_BINS_DIR/src/k8s/go.mod" "$K8S_BINS_DIR/src/k8s/go.sum" "$W/knpmod/" && chmod u+w "$W/knpmod/go.mod" "$W/knpmod/go.sum"
    sed -i '1s#.*#module local/knp#' "$W/knpmod/go.mod"
    cat "$W/knp/go.sum" >> "$W/knpmod/go.sum"
    printf '\nrequire sigs.k8s.io/kube-network-policies %s\n\nreplace sigs.k8s.io/kube-network-policies => %s\n' "$KNP_VER" "$W/knp" >> "$W/knpmod/go.mod"
    cp "$W/knp/cmd/main.go" "$W/knpmod/cmd/kube-network-policies/"
    (cd "$W/knpmod" && timed go build -mod=mod $TRIMPATH -ldflags "-s -w" -o "$W/knp/kube-network-policies.bin" ./cmd/kube-network-policies)
  else
    (cd "$W/knp" && timed go build $TRIMPATH -ldflags "-s -w" -o "$W/knp/kube-network-policies.bin" ./cmd)
  fi
  mv "$W/knp/kube-network-policies.bin" "$KNP_DIR/kube-network-policies"
fi
echo "[build-node-bins] $OUT: $(ls "$OUT" 2>/dev/null | tr '\n' ' ')  $KNP_DIR: $(ls "$KNP_DIR" 2>/dev/null | tr '\n' ' ')" >&2
