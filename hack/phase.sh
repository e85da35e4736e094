#!/usr/bin/env bash
# phase.sh NAME COMMAND [ARG...]: runs COMMAND and prints its wall time as "== NAME: 12.3 s", so
# that a slow step shows long before it threatens a limit; exits with COMMAND's status. With
# PHASE_LOG set, the same line is appended to that file too (make test prints them together at
# its end). make test and .ci/run time their phases with it.
set -uo pipefail
name=$1
shift
echo "== $name"
start=$(date +%s%N)
"$@"
status=$?
ms=$((($(date +%s%N) - start) / 1000000))
line=$(printf '== %s: %d.%d s' "$name" $((ms / 1000)) $((ms % 1000 / 100)))
if ((status != 0)); then line+=" (failed, exit status $status)"; fi
echo "$line"
if [[ -n ${PHASE_LOG:-} ]]; then echo "$line" >>"$PHASE_LOG"; fi
exit "$status"
