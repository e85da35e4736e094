#!/usr/bin/env bash
# Builds kube-state-metrics, the release manifests/components/monitoring runs, from its Go module
# (k8s.io/kube-state-metrics/v2, no replace directives), once per version:
#   $KSM_DIR/kube-state-metrics   static binary; its presence means done
#
#   KSM_VERSION  module version (default v2.18.0, the image tag in
#                manifests/components/monitoring/kube-state-metrics.yaml)
#   KSM_DIR      output (default ${XDG_CACHE_HOME:-$HOME/.cache}/kube-state-metrics/$KSM_VERSION)
#
# `go install k8s.io/kube-state-metrics/v2@version` needs the proxy's version list (for the
# deprecation check), which the proxy may refuse; a wrapper module with the binary as its `tool`
# builds the same program with the versions of kube-state-metrics' own go.mod.
set -euo pipefail
VERSION=${KSM_VERSION:-v2.18.0}
OUT=${KSM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-state-metrics/$VERSION}
log() { echo "[build-kube-state-metrics] $*" >&2; }
if [[ -x $OUT/kube-state-metrics ]]; then
  log "kube-state-metrics $VERSION already built in $OUT"
  exit 0
fi

# Outside any module (the project's go.mod must not influence this build).
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export GOFLAGS=${GOFLAGS:--buildvcs=false} GOWORK=off
start=$SECONDS
cd "$W"
printf 'module local/ksmbin\n\ngo 1.24.5\n' > go.mod
go get -tool "k8s.io/kube-state-metrics/v2@$VERSION"
log "$((SECONDS - start))s: modules"
mkdir -p "$OUT"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$VERSION" \
  -o "$OUT/kube-state-metrics.tmp" k8s.io/kube-state-metrics/v2
mv "$OUT/kube-state-metrics.tmp" "$OUT/kube-state-metrics"
log "built in $((SECONDS - start))s: $OUT/kube-state-metrics"
