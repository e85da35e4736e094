# Sourced by the hack/ scripts: what the builds of Kubernetes binaries (build-k8s-bins.sh,
# build-node-bins.sh) and the end-to-end runs (e2e.sh, e2e-node.sh, node.sh, bench-cluster.sh) share.

# ---------------------------------------------------------------- building Kubernetes commands

# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module with a local
# directory. A wrapper module requiring it and replacing each staging module that it requires at
# v0.0.0 with the published v0.X.Y builds the same commands.
#
#   write_k8s_wrapper_gomod K8S_VERSION > go.mod
write_k8s_wrapper_gomod() {
  local k8s=$1 gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@v$k8s" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  printf 'module local/k8sbins\n\n'
  grep -E '^(go|godebug) ' "$gomod"
  printf '\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$k8s"
  awk '/^replace \(/{f=1;next} f&&/^\)/{f=0} f && $3 ~ /^\.\/staging\// {print $1}' "$gomod" | while read -r mod; do
    if awk -v m="$mod" '$1==m && $2=="v0.0.0" {found=1} END {exit !found}' "$gomod"; then
      printf '\t%s => %s v0.%s\n' "$mod" "$mod" "${k8s#1.}"
    fi
  done
  printf ')\n'
}

# write_k8s_main MODULE_DIR CMD IMPORT CALL: MODULE_DIR/cmd/CMD/main.go runs the cobra command that
# CALL (an expression of package IMPORT, as "app"; context is imported) returns, as the upstream
# binary's main does.
write_k8s_main() {
  mkdir -p "$1/cmd/$2"
  cat > "$1/cmd/$2/main.go" <<EOF
package main

import (
	"context"
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"$3"
)

var _ = context.Background

func main() { os.Exit(cli.Run(app.$4)) }
EOF
}

# k8s_version_ldflags K8S_VERSION: the -ldflags that stamp the version into the binaries; without
# them they report v0.0.0-master and kubectl warns about version skew.
k8s_version_ldflags() {
  local ldf="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldf="$ldf -X $pkg.gitVersion=v$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(cut -d. -f2 <<<"$1") -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$ldf"
}

# ---------------------------------------------------------------- end-to-end runs
# run_defaults PREFIX: run from the repository root ($ROOT), log lines "[PREFIX time] ...", the
# per-version cache of the control plane ($K8S_BINS_DIR), and the controller that plays
# Metacontroller's part (controller_defaults), shared by make e2e, make e2e-node and make bench-cluster.
run_defaults() {
  LOG_PREFIX=$1
  ROOT=$PWD GO=${GO:-go} K8S=${K8S:-1.36.3} CACHE=${XDG_CACHE_HOME:-$HOME/.cache}
  export K8S K8S_BINS_DIR=${K8S_BINS_DIR:-$CACHE/k8s-bins/v$K8S}
  controller_defaults
}

# controller_defaults: which controller runs the suite, and Metacontroller's CRDs, from $ROOT.
# Exports, for hack/cluster.sh and the test processes:
#   E2E_CONTROLLER      metacontroller (a real one: METACONTROLLER_BIN is set) or metacontroller-sim
#                       (the project's simulator, a test double; build_controller builds it)
#   E2E_CONTROLLER_BIN  its binary, an absolute path
#   METACONTROLLER_CRDS Metacontroller's CRDs (its release's manifests/production/
#                       metacontroller-crds-v1.yaml), an absolute path; default the data file
#                       ../shared/metacontroller/metacontroller-crds-v1.yaml beside the checkout
# Stops the run at once when the CRDs or METACONTROLLER_BIN are not there. Logs the choice.
controller_defaults() {
  local crds=${METACONTROLLER_CRDS:-$ROOT/../shared/metacontroller/metacontroller-crds-v1.yaml} bin
  if [[ ! -f $crds ]]; then
    if [[ -n ${METACONTROLLER_CRDS:-} ]]; then log "METACONTROLLER_CRDS=$METACONTROLLER_CRDS: no such file"; else
      log "Metacontroller's CRDs are needed (applied before the controller starts): set METACONTROLLER_CRDS to
  Metacontroller's release file manifests/production/metacontroller-crds-v1.yaml (of v4.17.2, the
  tested version), e.g. METACONTROLLER_CRDS=/path/to/metacontroller-crds-v1.yaml make e2e"
    fi
    exit 1
  fi
  METACONTROLLER_CRDS=$(cd "$(dirname "$crds")" && pwd)/$(basename "$crds")
  export METACONTROLLER_CRDS
  if [[ -n ${METACONTROLLER_BIN:-} ]]; then
    if ! bin=$(command -v -- "$METACONTROLLER_BIN") || [[ ! -f $bin || ! -x $bin ]]; then
      log "METACONTROLLER_BIN=$METACONTROLLER_BIN: not an executable file (want a Metacontroller v4.17+ binary)"
      exit 1
    fi
    E2E_CONTROLLER_BIN=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
    export E2E_CONTROLLER=metacontroller E2E_CONTROLLER_BIN
    log "controller: a real Metacontroller, METACONTROLLER_BIN=$E2E_CONTROLLER_BIN (CRDs $METACONTROLLER_CRDS)"
  else
    export E2E_CONTROLLER=metacontroller-sim E2E_CONTROLLER_BIN=$ROOT/bin/metacontroller-sim
    log "controller: the project's simulator (internal/mcsim, a test double, not Metacontroller); set
  METACONTROLLER_BIN=/path/to/metacontroller to run under the real one (CRDs $METACONTROLLER_CRDS)"
  fi
}

# build_controller: builds the simulator (E2E_CONTROLLER=metacontroller-sim) into $E2E_CONTROLLER_BIN;
# a real Metacontroller is the user's binary, used as it is.
build_controller() {
  [[ $E2E_CONTROLLER == metacontroller-sim ]] || return 0
  (cd "$ROOT" && CGO_ENABLED=0 "${GO:-go}" build -o bin/metacontroller-sim ./hack/metacontroller-sim)
}

log() { echo "[${LOG_PREFIX:-hack} $(date +%T)] $*" >&2; }
# take_lock FILE WHAT: holds FILE's lock (on fd 9) for the rest of the script, waiting while another
# run holds it. Processes the script starts for the whole run get 9>&- so the lock stays with it.
take_lock() {
  exec 9> "$1"
  if ! flock -n 9; then log "another $2 runs on this machine: waiting for it"; flock 9; fi
}

# tail_logs LINES FILE...: prints the last LINES lines of each FILE that exists.
tail_logs() {
  local lines=$1 f; shift
  for f in "$@"; do
    [[ -f $f ]] || continue
    echo "----- tail of $f" >&2; tail -n "$lines" "$f" >&2
  done
}

# await_tests PID: waits for the test binary started in the background as PID and sets status to
# its exit status. An interrupt (Ctrl-C, CI cancel) stops the tests, and the processes they started,
# before the EXIT trap stops what the script started.
await_tests() {
  tests=$1
  trap 'status=130; kill -TERM "$tests" 2>/dev/null; wait "$tests"; exit 130' INT TERM
  set +e
  wait "$tests"
  status=$?
  set -e
}
