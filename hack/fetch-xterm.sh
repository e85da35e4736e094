#!/usr/bin/env bash
# Puts xterm.js, the player page's terminal, into internal/platform/assets/xterm/ (gitignored; the
# binary embeds it): @xterm/xterm at the version pinned here, downloaded from registry.npmjs.org,
# its tarball checked against the sha512 integrity pinned here (npm's dist.integrity, the value
# `npm view @xterm/xterm@$VERSION dist.integrity` prints), and lib/xterm.js, css/xterm.css and
# LICENSE extracted. No other project's file is committed to the repository, so every build that
# wants the terminal runs this first (make build, run, e2e; the Dockerfile). Without it a build
# works and has no terminal.
# Needs bash, curl, tar, sha512sum and base64. Does nothing when the files there are the ones it
# extracted (their sha256 in .fetched); XTERM_TARBALL=/path/to.tgz checks and uses a local copy
# instead of downloading.
# To upgrade: set VERSION and INTEGRITY from `npm view @xterm/xterm@<version> dist.integrity`.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=6.0.0
INTEGRITY=sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg==
URL=https://registry.npmjs.org/@xterm/xterm/-/xterm-$VERSION.tgz
DIR=internal/platform/assets/xterm
FILES=(xterm.js xterm.css LICENSE)
STAMP=$DIR/.fetched

log() { echo "fetch-xterm: $*" >&2; }

# stamp is what .fetched records: the pinned integrity and each extracted file's sha256.
stamp() {
  echo "$INTEGRITY"
  (cd "$DIR" && sha256sum "${FILES[@]}")
}

if [[ -f $STAMP ]] && [[ $(stamp 2>/dev/null) == "$(cat "$STAMP")" ]]; then
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tarball=$tmp/xterm.tgz
if [[ -n ${XTERM_TARBALL:-} ]]; then
  cp "$XTERM_TARBALL" "$tarball"
else
  log "downloading @xterm/xterm $VERSION from $URL"
  curl -fsSL --retry 3 --max-time 120 -o "$tarball" "$URL"
fi

# npm's integrity is "sha512-" and the base64 of the digest: compute it the same way.
hex=$(sha512sum "$tarball" | cut -d' ' -f1)
got=sha512-$(printf '%b' "$(sed 's/../\\x&/g' <<<"$hex")" | base64 -w0)
if [[ $got != "$INTEGRITY" ]]; then
  log "the tarball's integrity is $got, not the pinned $INTEGRITY: refusing it (a changed or corrupted download)"
  exit 1
fi

tar -xzf "$tarball" -C "$tmp" package/lib/xterm.js package/css/xterm.css package/LICENSE
mkdir -p "$DIR"
cp "$tmp/package/lib/xterm.js" "$tmp/package/css/xterm.css" "$tmp/package/LICENSE" "$DIR/"
stamp >"$STAMP"
log "@xterm/xterm $VERSION ($INTEGRITY) in $DIR: ${FILES[*]}"
