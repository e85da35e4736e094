#!/usr/bin/env bash
# Builds the real Metacontroller, the one the e2e tests and `make bench-cluster` run, from its
# release source archive, once per version:
#   $METACONTROLLER_DIR/metacontroller             static binary
#   $METACONTROLLER_DIR/metacontroller-crds-v1.yaml its three CRDs (manifests/production/)
#   $METACONTROLLER_DIR/VERSION                    written last; a directory holding the binary,
#                                                  the CRDs and this version is reused as is
#
#   METACONTROLLER_VERSION  release tag without the v (default 4.17.2)
#   METACONTROLLER_SOURCE   where the source archive comes from: a .tar.gz file, a directory holding
#                           metacontroller-$METACONTROLLER_VERSION.tar.gz, or an http(s) URL
#                           (default: the GitHub archive of the release tag)
#   METACONTROLLER_DIR      output (default ${XDG_CACHE_HOME:-$HOME/.cache}/metacontroller/v$VERSION)
#
# Metacontroller's Go module path is `metacontroller`, so it cannot come from the Go module proxy;
# its dependencies do. Cold build about 2 to 5 minutes on 2 cores.
set -euo pipefail
VERSION=${METACONTROLLER_VERSION:-4.17.2}
SOURCE=${METACONTROLLER_SOURCE:-https://github.com/metacontroller/metacontroller/archive/refs/tags/v$VERSION.tar.gz}
OUT=${METACONTROLLER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/metacontroller/v$VERSION}
log() { echo "[build-metacontroller] $*" >&2; }

if [[ -x $OUT/metacontroller && -f $OUT/metacontroller-crds-v1.yaml && $(cat "$OUT/VERSION" 2>/dev/null) == "$VERSION" ]]; then
  log "metacontroller $VERSION already built in $OUT"
  exit 0
fi

W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
archive=$SOURCE
case $SOURCE in
  http://* | https://*)
    log "downloading $SOURCE"
    curl -fsSL --retry 3 -o "$W/source.tar.gz" "$SOURCE"
    archive=$W/source.tar.gz ;;
  *)
    [[ -d $SOURCE ]] && archive=$SOURCE/metacontroller-$VERSION.tar.gz
    [[ -f $archive ]] || { log "no source archive at $archive (METACONTROLLER_SOURCE=$SOURCE)"; exit 1; } ;;
esac
log "source $archive, sha256 $(sha256sum "$archive" | cut -d' ' -f1)"
tar -xzf "$archive" -C "$W"
src=$W/metacontroller-$VERSION
[[ -f $src/go.mod && $(head -1 "$src/go.mod") == "module metacontroller" ]] ||
  { log "$archive does not unpack to metacontroller-$VERSION/ with Metacontroller's go.mod"; exit 1; }

mkdir -p "$OUT"
rm -f "$OUT/VERSION"
start=$SECONDS
# Outside the project's module and workspace: Metacontroller's own go.mod and go.sum decide.
(cd "$src" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
  go build -trimpath -ldflags "-s -w -X main.version=v$VERSION" -o "$OUT/metacontroller.tmp" ./pkg/cmd/metacontroller)
mv "$OUT/metacontroller.tmp" "$OUT/metacontroller"
cp "$src/manifests/production/metacontroller-crds-v1.yaml" "$OUT/"
echo "$VERSION" >"$OUT/VERSION"
log "metacontroller $VERSION built in $((SECONDS - start))s: $OUT/metacontroller"
