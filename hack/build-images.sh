#!/usr/bin/env bash
# The test images of make e2e-node, without Docker or a registry: hack/testimages/ctfbox (one static
# binary) written as docker-archive tarballs by hack/testimages/mkimage (go-containerregistry, in
# its own module so that the project's go.mod stays lean); hack/node.sh imports them with
# `ctr -n k8s.io images import`. Into $IMAGES_DIR (default .cache/e2e-node/images):
#   local/ctfbox:v1    the challenge server (ctfbox serve), user 65532
#   local/attacker:v1  the attacker (ctfbox probe -ignore-term: survives SIGTERM), user 65532
#   local/rootbox:v1   the challenge server with no user: root, which runAsNonRoot refuses
#   local/pause:v1     the Pod sandbox (ctfbox pause), user 65535
#   ctfbox             the binary itself, for the host side of the tests (the player)
#   local/challenge-hook:v1  with HOOK_BIN set: that hook binary as /challenge-hook, user 65532, the
#                      image of the instances' policy gate (challenge-hook wait-for-policy)
set -euo pipefail
cd "$(dirname "$0")/testimages"
OUT=${IMAGES_DIR:-$(cd ../.. && pwd)/.cache/e2e-node/images}
mkdir -p "$OUT"
export GOWORK=off GOFLAGS=${GOFLAGS:--buildvcs=false} CGO_ENABLED=0
go build -trimpath -ldflags '-s -w' -o "$OUT/ctfbox" ./ctfbox
go build -trimpath -o "$OUT/.mkimage" ./mkimage
mk() { "$OUT/.mkimage" -bin "$OUT/ctfbox" -dest /ctfbox "$@" 2>&1 | sed 's/^/[build-images] /' >&2; }
mk -o "$OUT/ctfbox.tar" -t local/ctfbox:v1 -entrypoint /ctfbox,serve -user 65532:65532
mk -o "$OUT/attacker.tar" -t local/attacker:v1 -entrypoint /ctfbox,probe,-ignore-term -user 65532:65532
mk -o "$OUT/rootbox.tar" -t local/rootbox:v1 -entrypoint /ctfbox,serve
mk -o "$OUT/pause.tar" -t local/pause:v1 -entrypoint /ctfbox,pause -user 65535:65535
if [[ -n ${HOOK_BIN:-} ]]; then
  "$OUT/.mkimage" -bin "$HOOK_BIN" -dest /challenge-hook -o "$OUT/challenge-hook.tar" -t local/challenge-hook:v1 \
    -entrypoint /challenge-hook -user 65532:65532 2>&1 | sed 's/^/[build-images] /' >&2
fi
rm -f "$OUT/.mkimage"
