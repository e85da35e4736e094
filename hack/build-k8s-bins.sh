#!/usr/bin/env bash
# Builds a local Kubernetes control plane from the Go module proxy only (no Docker, no release
# downloads): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok, plus
# kwok's stock stages (kwok-stages.yaml), into $K8S_BINS_DIR.
#
# The result is cached per version: nothing is done when $K8S_BINS_DIR/.complete exists, so only
# the first run on a machine pays the build (about 10 minutes on 2 cores).
#
#   K8S           Kubernetes version (k8s.io/kubernetes v$K8S; staging modules are v0.${K8S#1.})
#   ETCD_VER      etcd server module version
#   KWOK_VER      kwok version; empty skips kwok
#   K8S_BINS_DIR  output directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/k8s-bins/v$K8S)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
K8S=${K8S:-1.36.3}
ETCD_VER=${ETCD_VER:-v3.6.16}
KWOK_VER=${KWOK_VER-v0.8.0}
OUT=${K8S_BINS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-bins/v$K8S}
TRIMPATH=${TRIMPATH:--trimpath}
[[ -f $OUT/.complete ]] && { echo "[build-k8s-bins] binaries already in $OUT"; exit 0; }

# Outside any module (the project's go.mod must not influence these builds).
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$OUT" "$W/etcd" "$W/k8s"
export GOFLAGS=${GOFLAGS:--buildvcs=false} GOWORK=off
timed() { local start=$SECONDS; "$@"; echo "[build-k8s-bins] $((SECONDS - start))s: ${*:1:3}" >&2; }

# ---------------------------------------------------------------- etcd
# etcd's main package lives in a module with replace directives; a wrapper calling etcdmain builds.
cat > "$W/etcd/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
printf 'module local/etcdbin\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VER" > "$W/etcd/go.mod"
(cd "$W/etcd" && timed go mod tidy && timed go build $TRIMPATH -ldflags "-s -w" -o "$OUT/etcd" .)

# ---------------------------------------------------------------- kubernetes
# The wrapper module (hack/lib.sh) builds the same commands as k8s.io/kubernetes's own.
write_k8s_wrapper_gomod "$K8S" > "$W/k8s/go.mod"
write_k8s_main "$W/k8s" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver/app 'NewAPIServerCommand()'
write_k8s_main "$W/k8s" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager/app 'NewControllerManagerCommand()'
write_k8s_main "$W/k8s" kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler/app 'NewSchedulerCommand()'
mkdir -p "$W/k8s/cmd/kubectl"
cat > "$W/k8s/cmd/kubectl/main.go" <<'EOF'
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
EOF
(cd "$W/k8s" && timed go mod tidy && timed go build $TRIMPATH -ldflags "$(k8s_version_ldflags "$K8S")" -o "$OUT/" ./cmd/...)
mkdir -p "$OUT/src" && cp -r "$W/k8s" "$OUT/src/k8s" && cp -r "$W/etcd" "$OUT/src/etcd"

# ---------------------------------------------------------------- kwok (fake nodes and kubelets)
if [[ -n $KWOK_VER ]]; then
  (cd "$W" && GOBIN=$OUT timed go install $TRIMPATH -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VER")
  stages=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VER/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"; grep -v '^---$' "$stages/$f"
  done > "$OUT/kwok-stages.yaml"
fi
touch "$OUT/.complete"
ls -la "$OUT"
