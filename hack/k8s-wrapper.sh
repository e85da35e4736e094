# Sourced by hack/build-k8s-bins.sh and hack/build-node-bins.sh: the wrapper module that builds
# Kubernetes commands from the Go module proxy.
#
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
